// ZeRO-1 with CUDA parameters (NOTE [ZeRO-1 on GPUs], parallel/zero.h) on one GPU: over a one-rank
// NCCL group (what the training programs give it under --device cuda --dp N --zero) and over the
// Local backend (host staging). One rank cannot show shards crossing GPUs (that needs two GPUs
// and mpirun), but it runs every device path of zero.cpp: the buckets, shard views and the
// optimizer over them on the device, the clipping norm's squares and the overflow flag as device
// scalars over NCCL, the gathered state in host memory, a checkpoint written and resumed.
// Against the same model trained with a plain AdamW on the GPU, with gradient clipping and fp16's
// loss scaler (an inf injected at step 1): the same norms, the same skipped step, the same
// parameters. Skips without a GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <unistd.h>

#include "core/copy.h"
#include "cuda/cuda_test_util.h"
#include "nn/activation.h"
#include "nn/containers.h"
#include "nn/grad_scaler.h"
#include "nn/linear.h"
#include "nn/optim/adam.h"
#include "nn/optim/clip_grad.h"
#include "ops/index.h"
#include "ops/loss.h"
#include "ops/shape.h"
#include "parallel/checkpoint.h"
#include "parallel/comm/local_communicator.h"
#include "parallel/comm/nccl_communicator.h"
#include "parallel/zero.h"
#include "test_util.h"

using namespace trident;
using namespace trident::parallel;
using namespace trident::parallel::comm;

namespace {

const Device kGPU = Device::cuda(0);
constexpr int kSteps = 4, kOverflowStep = 1;
constexpr double kClip = 0.5;

std::shared_ptr<nn::Sequential> make_mlp() {
  Generator g(77);
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(24, 40, true, DType::F32, &g), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(40, 6, true, DType::F32, &g)});
  m->to(kGPU);
  return m;
}

std::pair<Tensor, Tensor> batch(int step) {
  Generator g(1000 + static_cast<uint64_t>(step));
  return {randn({16, 24}, TensorOptions(kF32), &g).to(kGPU), randn({16, 6}, TensorOptions(kF32), &g).to(kGPU)};
}

std::unique_ptr<nn::optim::Optimizer> make_adamw(const std::vector<Tensor>& params) {
  return std::make_unique<nn::optim::AdamW>(params, nn::optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.01});
}

// The first element of the first parameter's gradient becomes inf (a half-precision overflow).
void inject_inf(nn::Module& m) {
  Tensor g = m.parameters().front().grad();
  fill_(narrow(reshape(g, {-1}), 0, 0, 1), std::numeric_limits<double>::infinity());
}

struct ZeroRun {
  std::vector<double> norms;  // NaN at the overflow step
  std::vector<bool> stepped;
  std::vector<std::vector<float>> params;
};

ZeroRun train_plain() {
  auto m = make_mlp();
  auto opt = make_adamw(m->parameters());
  nn::GradScaler scaler({.init_scale = 1024.0});
  ZeroRun r;
  for (int s = 0; s < kSteps; ++s) {
    const auto [x, y] = batch(s);
    scaler.scale(mse_loss(m->forward(x), y)).backward();
    if (s == kOverflowStep) inject_inf(*m);
    scaler.unscale_(*opt);
    const double norm = nn::clip_grad_norm_(m->parameters(), kClip);
    r.norms.push_back(s == kOverflowStep ? NAN : norm);
    r.stepped.push_back(scaler.step(*opt));
    scaler.update();
    opt->zero_grad();
  }
  for (const Tensor& p : m->parameters()) r.params.push_back(p.to_vector<float>());
  return r;
}

void train_zero(nn::UnaryModule& m, ZeroOptimizer& zero, nn::GradScaler& scaler, int from, int to, ZeroRun& r) {
  for (int s = from; s < to; ++s) {
    const auto [x, y] = batch(s);
    scaler.scale(mse_loss(m.forward(x), y)).backward();
    // One rank: the reduced shard is the whole bucket, whose slots are the .grad tensors.
    if (s == kOverflowStep) inject_inf(m);
    zero.unscale_(scaler);
    const double norm = zero.clip_grad_norm(kClip);
    r.norms.push_back(s == kOverflowStep ? NAN : norm);
    r.stepped.push_back(zero.step(scaler));
    scaler.update();
    zero.zero_grad();
  }
}

void expect_same(const ZeroRun& got, const ZeroRun& want, const std::string& where) {
  ASSERT_EQ(got.norms.size(), want.norms.size());
  for (size_t s = 0; s < want.norms.size(); ++s) {
    EXPECT_EQ(got.stepped[s], want.stepped[s]) << where << " step " << s;
    if (!std::isnan(want.norms[s])) {
      EXPECT_NEAR(got.norms[s], want.norms[s], 1e-5 * want.norms[s]) << where << " step " << s;
    }
  }
  ASSERT_EQ(got.params.size(), want.params.size());
  for (size_t i = 0; i < want.params.size(); ++i) {
    const Tensor a = from_vector<float>(got.params[i], {static_cast<int64_t>(got.params[i].size())});
    const Tensor b = from_vector<float>(want.params[i], {static_cast<int64_t>(want.params[i].size())});
    EXPECT_TRUE(trident::testing::all_close(a, b, 1e-5, 1e-7)) << where << " parameter " << i;
  }
}

std::shared_ptr<Communicator> nccl_of_one(const std::string& name) {
  cuda::set_device(0);
  return make_nccl_communicator(make_local_communicator({name + ".bootstrap", std::nullopt}), {name, std::nullopt});
}

}  // namespace

TEST(CudaZero, OneRankOverNcclAndLocalTrainsAsPlainAdamW) {
  TRIDENT_REQUIRE_CUDA();
  const ZeroRun want = train_plain();
  ASSERT_FALSE(want.stepped[kOverflowStep]) << "the injected overflow skips the plain step";
  for (const bool nccl : {true, false}) {
    const std::string where = nccl ? "NCCL" : "Local";
    SCOPED_TRACE(where);
    auto group = nccl ? nccl_of_one("zero.nccl") : make_local_communicator({"zero.local", std::nullopt});
    auto m = make_mlp();
    ZeroOptimizer zero(*m, group, [](const ParamGroups& g) { return make_adamw(g.at(0)); }, {.bucket_bytes = 1024});
    for (const Tensor& p : m->parameters()) {
      EXPECT_EQ(p.device(), kGPU);
      EXPECT_EQ(p.grad().device(), kGPU) << "the gradients are slots of the device buckets";
    }
    nn::GradScaler scaler({.init_scale = 1024.0});
    ZeroRun got;
    train_zero(*m, zero, scaler, 0, kSteps, got);
    for (const Tensor& p : m->parameters()) got.params.push_back(p.to_vector<float>());
    expect_same(got, want, where);

    // The gathered state for a writer: in host memory, the values state_dict() gives.
    const std::optional<nn::optim::OptimizerState> host = zero.state_dict_to(0);
    ASSERT_TRUE(host.has_value());
    const nn::optim::OptimizerState dev = zero.state_dict();
    ASSERT_EQ(host->tensors.size(), dev.tensors.size());
    for (const auto& [key, t] : dev.tensors) {
      EXPECT_TRUE(host->tensors.at(key).device().is_cpu()) << key;
      EXPECT_EQ(host->tensors.at(key).to_vector<float>(), t.to_vector<float>()) << key;
    }
  }
}

TEST(CudaZero, CheckpointOfDeviceShardsResumesExactly) {
  TRIDENT_REQUIRE_CUDA();
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("trident_cuda_zero_" + std::to_string(::getpid()))).string();
  auto host_group = make_local_communicator({"zero.ckpt.host", std::nullopt});
  auto factory = [](const ParamGroups& g) { return make_adamw(g.at(0)); };
  // Straight through kSteps, and through a checkpoint after 2 steps into a fresh model.
  auto a = make_mlp();
  ZeroOptimizer za(*a, nccl_of_one("zero.ckpt.a"), factory, {.bucket_bytes = 1024});
  nn::GradScaler sa({.init_scale = 1024.0});
  ZeroRun ra;
  train_zero(*a, za, sa, 0, 2, ra);
  nn::TrainingCheckpointParts parts_a;
  parts_a.model = a.get();
  parts_a.scaler = &sa;
  save_training_checkpoint(dir, *host_group, parts_a, nn::TrainingProgress{}, &za);
  train_zero(*a, za, sa, 2, kSteps, ra);

  auto b = make_mlp();
  ZeroOptimizer zb(*b, nccl_of_one("zero.ckpt.b"), factory, {.bucket_bytes = 1024});
  nn::GradScaler sb;
  nn::TrainingCheckpointParts parts_b;
  parts_b.model = b.get();
  parts_b.scaler = &sb;
  load_training_checkpoint(dir, parts_b, &zb);
  ZeroRun rb;
  train_zero(*b, zb, sb, 2, kSteps, rb);
  EXPECT_EQ(sb.get_scale(), sa.get_scale()) << "the scaler's state came back";
  const auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(pb[i].to_vector<float>(), pa[i].to_vector<float>()) << "parameter " << i;
  std::filesystem::remove_all(dir);
}
