#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using autograd::TensorList;

namespace {
struct Block {
  nn::Linear fc1{16, 64, true, kF64}, fc2{64, 16, true, kF64};
  double p = 0.3;
  Tensor operator()(const Tensor& x) const {
    Tensor h = gelu(const_cast<nn::Linear&>(fc1).forward(x));
    h = dropout(h, p, true);
    return const_cast<nn::Linear&>(fc2).forward(h);
  }
};
}  // namespace

TEST(Checkpoint, SameLossAndGradientsAsWithoutIncludingDropout) {
  manual_seed(5);
  Block blk;
  Tensor x = randn({8, 16}, kF64).set_requires_grad();
  auto grads = [&](bool ckpt) {
    x.zero_grad();
    blk.fc1.zero_grad();
    blk.fc2.zero_grad();
    manual_seed(77);
    Tensor y = ckpt ? autograd::checkpoint([&](const TensorList& in) { return TensorList{blk(in[0])}; }, {x})[0] : blk(x);
    Tensor loss = sum(mul(y, y));
    loss.backward();
    return std::vector<Tensor>{loss.detach(), x.grad(), blk.fc1.weight.grad(), blk.fc2.bias.grad()};
  };
  const std::vector<Tensor> plain = grads(false), ck = grads(true);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(all_close(plain[i], ck[i], 1e-12, 1e-12)) << "quantity " << i;
}

TEST(Checkpoint, KeepsOnlyInputsAndOutputsAlive) {
  nn::Linear a(256, 1024), b(1024, 256);
  Tensor x = randn({64, 256}).set_requires_grad();
  auto f = [&](const TensorList& in) { return TensorList{b.forward(gelu(a.forward(in[0])))}; };
  const int64_t base = memory_stats(kCPU).current_bytes;
  Tensor y1 = f({x})[0];
  const int64_t plain = memory_stats(kCPU).current_bytes - base;  // output + saved activations
  y1 = Tensor();
  const int64_t base2 = memory_stats(kCPU).current_bytes;
  Tensor y2 = autograd::checkpoint(f, {x})[0];
  const int64_t ck = memory_stats(kCPU).current_bytes - base2;  // output only
  EXPECT_EQ(ck, 64 * 256 * 4);
  EXPECT_GE(plain, ck + 2 * 64 * 1024 * 4) << "without checkpoint the [64, 1024] activations are kept";
  sum(y2).backward();
  EXPECT_TRUE(a.weight.grad().defined());
}

TEST(Checkpoint, ParametersGetGradientsWhenNoInputRequiresGrad) {
  nn::Embedding emb(10, 4);
  Tensor ids = from_vector<int64_t>({1, 3, 3});
  Tensor y = autograd::checkpoint([&](const TensorList& in) { return TensorList{emb.forward(in[0])}; }, {ids})[0];
  EXPECT_TRUE(y.requires_grad());
  sum(y).backward();
  const std::vector<float> g = emb.weight.grad().to_vector<float>();
  EXPECT_EQ(g[3 * 4], 2.f);
  EXPECT_EQ(g[1 * 4], 1.f);
  EXPECT_EQ(g[0], 0.f);
}

TEST(Checkpoint, LeavesTheGeneratorWhereItWasAndRunsPlainUnderNoGrad) {
  manual_seed(9);
  Tensor x = randn({100}, kF64).set_requires_grad();
  Tensor y = autograd::checkpoint([](const TensorList& in) { return TensorList{dropout(in[0], 0.5)}; }, {x})[0];
  const PhiloxState after_forward = default_generator().state();
  sum(y).backward();
  EXPECT_EQ(default_generator().state(), after_forward) << "the replay does not move the stream";
  // The gradient is the mask the forward used: 2 where kept, 0 where dropped.
  const auto yv = y.to_vector<double>(), xv = x.to_vector<double>(), gv = x.grad().to_vector<double>();
  for (size_t i = 0; i < yv.size(); ++i) EXPECT_EQ(gv[i], yv[i] == 0 ? 0.0 : 2.0);
  NoGradGuard ng;
  EXPECT_FALSE(autograd::checkpoint([](const TensorList& in) { return TensorList{mul(in[0], 2.0)}; }, {x})[0].requires_grad());
}

TEST(CheckpointGradcheck, Inputs) {
  Tensor a = rand_leaf({3, 4}, 1), b = rand_leaf({4}, 2);
  EXPECT_TRUE(grad_ok(gradcheck(
      [](const TensorList& in) {
        return autograd::checkpoint([](const TensorList& x) { return TensorList{tanh(mul(x[0], x[1]))}; }, in)[0];
      },
      {a, b})));
}
