#include "test_util.h"

#include <thread>

using namespace trident;
using namespace trident::testing;

TEST(Autocast, ProductsComputeInTheHalfType) {
  Generator g(1);
  Tensor x = randn({4, 8}, kF32, &g), w = randn({3, 8}, kF32, &g).set_requires_grad(), b = randn({3}, kF32, &g);
  Tensor y;
  {
    autocast::Guard ac(kBF16);
    EXPECT_TRUE(autocast::is_enabled());
    y = linear(x, w, b);
    EXPECT_EQ(matmul(x, transpose(w.detach(), 0, 1)).dtype(), kBF16);
    EXPECT_EQ(conv2d(randn({1, 2, 5, 5}, kF32, &g), randn({3, 2, 3, 3}, kF32, &g)).dtype(), kBF16);
    EXPECT_EQ(scaled_dot_product_attention(randn({1, 4, 8}, kF32, &g), randn({1, 4, 8}, kF32, &g), randn({1, 4, 8}, kF32, &g)).dtype(),
              kBF16);
  }
  EXPECT_FALSE(autocast::is_enabled());
  EXPECT_EQ(y.dtype(), kBF16);
  EXPECT_TRUE(all_close(y, linear(x.to(kBF16), w.detach().to(kBF16), b.to(kBF16)), 0, 0));
  // The gradient reaches the f32 master weight in f32, through the cast.
  sum(y.to(kF32)).backward();
  EXPECT_EQ(w.grad().dtype(), kF32);
  Tensor w2 = w.detach().clone().set_requires_grad();
  sum(linear(x.to(kBF16), w2.to(kBF16), b.to(kBF16)).to(kF32)).backward();
  EXPECT_TRUE(all_close(w.grad(), w2.grad(), 0, 0));
}

TEST(Autocast, SoftmaxLossesNormsAndReductionsRunInF32) {
  Generator g(2);
  Tensor h = randn({4, 6}, kF32, &g).to(kBF16);
  autocast::Guard ac(kBF16);
  EXPECT_EQ(softmax(h, -1).dtype(), kF32);
  EXPECT_EQ(log_softmax(h, -1).dtype(), kF32);
  EXPECT_EQ(cross_entropy(h, from_vector<int64_t>({0, 1, 2, 3})).dtype(), kF32);
  EXPECT_EQ(layer_norm(h, {6}, ones({6}), zeros({6})).dtype(), kF32);
  EXPECT_EQ(sum(h).dtype(), kF32);
  EXPECT_EQ(mean(h, {1}).dtype(), kF32);
  EXPECT_EQ(var(h, {1}).dtype(), kF32);
  EXPECT_EQ(logsumexp(h, {1}).dtype(), kF32);
  EXPECT_EQ(norm(h).dtype(), kF32);
  EXPECT_TRUE(all_close(softmax(h, -1), softmax(h.to(kF32), -1), 0, 0));
  EXPECT_EQ(gelu(h).dtype(), kBF16) << "other ops keep their input's dtype";
}

// NOTE [bf16 batch norm]: under autocast a bf16 input on the CPU is read as it is; the output,
// the running statistics and every gradient are bit for bit those of widening it first, in
// training and eval mode, with and without affine parameters, with a spatial size that is not a
// multiple of the rounding's runs (the input gradient is rounded to bf16 in runs of 256).
TEST(Autocast, BatchNormReadsBf16InputsAsTheirF32Values) {
  for (const bool training : {true, false}) {
    for (const bool affine : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "training " << training << " affine " << affine);
      Generator g(3);
      const Tensor x0 = randn({3, 5, 17, 19}, kF32, &g).to(kBF16), gy = randn({3, 5, 17, 19}, kF32, &g);
      const Tensor w0 = randn({5}, kF32, &g), b0 = randn({5}, kF32, &g);
      const Tensor rm0 = randn({5}, kF32, &g), rv0 = rand({5}, kF32, &g) + 0.5;
      Tensor results[2][6];
      for (int route = 0; route < 2; ++route) {  // 0: bf16 as it is; 1: widened by hand first
        Tensor x = x0.clone().set_requires_grad();
        Tensor w = affine ? w0.clone().set_requires_grad() : Tensor(), b = affine ? b0.clone().set_requires_grad() : Tensor();
        Tensor rm = rm0.clone(), rv = rv0.clone();
        Tensor y;
        {
          autocast::Guard ac(kBF16);
          y = batch_norm(route == 0 ? x : x.to(kF32), rm, rv, w, b, training, 0.1, 1e-5);
        }
        EXPECT_EQ(y.dtype(), kF32);
        y.backward(gy);
        EXPECT_EQ(x.grad().dtype(), kBF16);
        results[route][0] = y;
        results[route][1] = x.grad();
        results[route][2] = rm;
        results[route][3] = rv;
        if (affine) {
          EXPECT_EQ(w.grad().dtype(), kF32);
          results[route][4] = w.grad();
          results[route][5] = b.grad();
        }
      }
      for (int k = 0; k < (affine ? 6 : 4); ++k)
        EXPECT_EQ(results[0][k].to(kF32).to_vector<float>(), results[1][k].to(kF32).to_vector<float>()) << "result " << k;
    }
  }
}

// autocast::lower_relu before a convolution: the conv's output and every gradient bit for bit
// those of relu then the conv's own cast, with no f32 relu output.
TEST(Autocast, LowerReluFeedsAConvolutionAsTheCastWould) {
  Generator g(4);
  const Tensor x0 = randn({2, 6, 9, 11}, kF32, &g), w0 = randn({5, 6, 3, 3}, kF32, &g), gy = randn({2, 5, 9, 11}, kF32, &g);
  Tensor results[2][3];
  for (int route = 0; route < 2; ++route) {  // 0: lower_relu; 1: relu, then conv2d's cast
    Tensor x = x0.clone().set_requires_grad(), w = w0.clone().set_requires_grad();
    Tensor y;
    {
      autocast::Guard ac(kBF16);
      const Tensor h = route == 0 ? autocast::lower_relu(x) : relu(x);
      EXPECT_EQ(h.dtype(), route == 0 ? kBF16 : kF32);
      y = conv2d(h, w, Tensor(), {1, 1}, {1, 1});
    }
    EXPECT_EQ(y.dtype(), kBF16);
    y.backward(gy.to(kBF16));
    EXPECT_EQ(x.grad().dtype(), kF32);
    results[route][0] = y.to(kF32);
    results[route][1] = x.grad();
    results[route][2] = w.grad();
  }
  for (int k = 0; k < 3; ++k) EXPECT_EQ(results[0][k].to_vector<float>(), results[1][k].to_vector<float>()) << "result " << k;
  // Outside autocast, and for f64 inside it, it is relu.
  EXPECT_EQ(autocast::lower_relu(x0).dtype(), kF32);
  EXPECT_EQ(autocast::lower_relu(x0).to_vector<float>(), relu(x0).to_vector<float>());
  autocast::Guard ac(kBF16);
  EXPECT_EQ(autocast::lower_relu(x0.to(kF64)).dtype(), kF64);
  EXPECT_EQ(autocast::lower_relu(x0).dtype(), kBF16);
}

TEST(Autocast, MixedDtypesPromoteOnlyUnderAutocast) {
  Tensor a = ones({2}, kF32), b = ones({2}, kBF16), c = ones({2}, kF16);
  EXPECT_THROW(add(a, b), Error);
  autocast::Guard ac(kF16);
  EXPECT_EQ(add(a, b).dtype(), kF32);
  EXPECT_EQ(mul(b, c).dtype(), kF32);
  EXPECT_EQ(sub(ones({2}, kF64), a).dtype(), kF64);
  EXPECT_EQ(cat({a, b}, 0).dtype(), kF32);
  EXPECT_EQ(where(from_vector<bool>({true, false}), c, a).dtype(), kF32);
  EXPECT_EQ(linear(ones({2, 2}, kF64), ones({2, 2}, kF64)).dtype(), kF64) << "f64 is never lowered";
  {
    autocast::Guard off(kBF16, false);
    EXPECT_EQ(linear(ones({2, 2}), ones({2, 2})).dtype(), kF32);
    EXPECT_THROW(add(a, b), Error);
  }
  EXPECT_EQ(autocast::dtype(), kF16);
  EXPECT_THROW({ autocast::Guard bad(kF32); }, Error);
}

TEST(Autocast, IsPerThread) {
  autocast::Guard ac(kBF16);
  bool other = true;
  std::thread t([&] { other = autocast::is_enabled(); });
  t.join();
  EXPECT_FALSE(other);
  EXPECT_TRUE(autocast::is_enabled());
}

TEST(Autocast, AnMlpTrainsWithF32MasterWeights) {
  Generator g(3);
  nn::Sequential mlp({std::make_shared<nn::Linear>(8, 32, true, kF32, &g), std::make_shared<nn::GELU>(),
                      std::make_shared<nn::Linear>(32, 1, true, kF32, &g)});
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    Tensor x = randn({64, 8}, kF32, &g);
    Tensor y = sum(mul(x, x), {1}, true);
    Tensor loss;
    {
      autocast::Guard ac(kBF16);
      loss = mse_loss(mlp.forward(x), y);
    }
    EXPECT_EQ(loss.dtype(), kF32);
    loss.backward();
    NoGradGuard ng;
    for (Tensor& p : mlp.parameters()) {
      EXPECT_EQ(p.grad().dtype(), kF32);
      sub_(p, mul(p.grad(), 0.01));
    }
    mlp.zero_grad();
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
  }
  EXPECT_LT(last, 0.3 * first) << first << " -> " << last;
  for (const Tensor& p : mlp.parameters()) EXPECT_EQ(p.dtype(), kF32);
}

namespace {

// A small model with a product, an activation, a reduction-based loss: the parts autocast treats
// differently. Returns the loss and the gradients of w1 and w2.
struct Grads {
  double loss;
  std::vector<float> g1, g2;
};

Grads run_mlp(bool backward_inside, bool checkpointed) {
  Generator g(11);
  Tensor w1 = randn({16, 8}, kF32, &g).set_requires_grad(true);
  Tensor w2 = randn({1, 16}, kF32, &g).set_requires_grad(true);
  const Tensor x = randn({32, 8}, kF32, &g), y = randn({32, 1}, kF32, &g);
  const auto body = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{gelu(linear(in[0], in[1]))}; };
  Tensor loss;
  {
    autocast::Guard ac(kBF16);
    const Tensor h = checkpointed ? autograd::checkpoint(body, {x, w1})[0] : body({x, w1})[0];
    loss = mse_loss(linear(h, w2), y);
    if (backward_inside) loss.backward();
  }
  if (!backward_inside) loss.backward();
  return {loss.item<double>(), w1.grad().to_vector<float>(), w2.grad().to_vector<float>()};
}

}  // namespace

// NOTE [Autocast state]: backward runs without autocast wherever it is called from, so a backward
// inside the autocast scope (a pipeline step's) gives the gradients of one outside it, and
// checkpoint re-runs its function under the forward's autocast mode (bf16 here), so the
// recomputed activations, and the gradients, are the ones of the plain run.
TEST(Autocast, BackwardAndCheckpointRecomputeIgnoreTheCallersScope) {
  const Grads outside = run_mlp(false, false);
  const Grads inside = run_mlp(true, false);
  EXPECT_EQ(inside.loss, outside.loss);
  EXPECT_EQ(inside.g1, outside.g1);
  EXPECT_EQ(inside.g2, outside.g2);
  for (bool inside_scope : {false, true}) {
    const Grads ck = run_mlp(inside_scope, true);
    EXPECT_EQ(ck.loss, outside.loss);
    EXPECT_EQ(ck.g1, outside.g1) << "checkpointed, backward inside the scope: " << inside_scope;
    EXPECT_EQ(ck.g2, outside.g2);
  }
}
