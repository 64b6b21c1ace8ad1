// Pipeline and tensor parallelism with CUDA models (NOTE [Pipeline on GPUs] in
// parallel/pipeline/pipeline.h, NOTE [Model parallelism on GPUs] in apps/device.h) on one GPU.
// One GPU cannot show activations crossing GPUs (that needs two GPUs and mpirun; the CPU suites
// run the same code with two and more ranks, staged through host buffers too), but it runs every
// device path a rank takes:
//   - a one-stage pipeline given host batches: the micro-batches moved to the model's GPU, the
//     loss, gradients and forward_only outputs of the model run on the GPU micro-batch by
//     micro-batch (GPT-2, BERT, AmoebaNet with batch norm); an NCCL pp group refused;
//   - TensorParallelLayers over a one-rank NCCL group (the training programs' tp layers on GPUs):
//     the split layers' all-reduces, the vocabulary-parallel loss's max and sums (and sequence
//     parallelism's gathers and reduce-scatters) on device tensors over NCCL; clipping by the
//     serial norm and the full state dict over a host group, as the programs do. Against the
//     serial GPT-2 on the GPU: the same losses, norms and parameters.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda/cuda_test_util.h"
#include "models/gpt2.h"
#include "nn/optim/clip_grad.h"
#include "nn/optim/sgd.h"
#include "parallel/comm/local_communicator.h"
#include "parallel/comm/nccl_communicator.h"
#include "parallel/pipeline/pipeline.h"
#include "parallel/pipeline_models.h"
#include "parallel/tensor_parallel/checkpoint.h"
#include "parallel/tensor_parallel/grad_norm.h"
#include "parallel/tensor_parallel/tp_layers.h"
#include "test_util.h"

using namespace trident;
using namespace trident::parallel;
using namespace trident::parallel::comm;
using trident::testing::all_close;
using trident::testing::make_pipeline_batch;
using trident::testing::make_pipeline_model;

namespace {

const Device kGPU = Device::cuda(0);

std::shared_ptr<Communicator> local_group(const std::string& name) { return make_local_communicator({name, std::nullopt}); }

std::shared_ptr<Communicator> nccl_of_one(const std::string& name) {
  cuda::set_device(0);
  return make_nccl_communicator(local_group(name + ".bootstrap"), {name, std::nullopt});
}

int64_t batch_size(const std::string& kind) { return kind == "amoebanet" ? trident::testing::kAmoebaBatch : 8; }

TEST(CudaPipeline, OneStageOnTheGpuTakesHostBatchesAndMatchesTheModel) {
  TRIDENT_REQUIRE_CUDA();
  constexpr int64_t M = 4, T = 8;
  for (const std::string kind : {"gpt2", "bert", "amoebanet"}) {
    SCOPED_TRACE(kind);
    const models::Batch host = make_pipeline_batch(kind, batch_size(kind), T, 7);
    // The reference: the whole model on the GPU, micro-batch by micro-batch (batch norm
    // normalizes each by its own statistics, as the pipeline does), each loss weighted by the
    // whole batch's counts.
    auto ref = make_pipeline_model(kind);
    ref->to(kGPU);
    const std::vector<double> counts = ref->loss_counts(host);
    double want = 0;
    for (const models::Batch& mb : host.split(M)) {
      const models::Batch d = mb.to(kGPU);
      Tensor l = ref->loss(ref->layers().run(d), d, counts);
      l.backward();
      want += l.item<double>();
    }
    std::map<std::string, Tensor> ref_grads;
    for (const auto& [name, p] : ref->named_parameters()) ref_grads[name] = p.grad();

    auto model = make_pipeline_model(kind);
    model->to(kGPU);
    pipeline::Pipeline pipe(*model, local_group("pp.local"), {.micro_batches = M, .remat = pipeline::Remat::Always});
    const double got = pipe.step(host);  // host tensors: the pipeline moves them
    EXPECT_NEAR(got, want, 1e-5 * std::fabs(want));
    ASSERT_FALSE(pipe.named_parameters().empty());
    for (const auto& [name, p] : pipe.named_parameters()) {
      ASSERT_EQ(p.device(), kGPU) << name;
      ASSERT_TRUE(p.grad().defined()) << name;
      EXPECT_EQ(p.grad().device(), kGPU) << name;
      EXPECT_TRUE(all_close(p.grad().to(kCPU), ref_grads.at(name).to(kCPU), 1e-4, 1e-6)) << name;
    }

    // Evaluation through the stage: the model's outputs on the GPU.
    model->eval();
    ref->eval();
    NoGradGuard no_grad;
    const models::Activations outs = pipe.forward_only(host);
    const models::Activations want_outs = ref->layers().run(host.to(kGPU));
    ASSERT_EQ(outs.size(), want_outs.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      if (!want_outs[i].defined()) continue;
      EXPECT_EQ(outs[i].device(), kGPU) << "output " << i;
      EXPECT_TRUE(all_close(outs[i].to(kCPU), want_outs[i].to(kCPU), 1e-4, 1e-5)) << "output " << i;
    }
  }
}

TEST(CudaPipeline, AnNcclPpGroupIsRefused) {
  TRIDENT_REQUIRE_CUDA();
  auto model = make_pipeline_model("gpt2");
  model->to(kGPU);
  trident::testing::expect_error([&] { pipeline::Pipeline pipe(*model, nccl_of_one("pp.nccl")); },
                                 {"pipeline: group 'pp.nccl' is an NCCL communicator", "MPI or local"});
}

// GPT-2 with 2 blocks, 4 heads of 8, vocabulary 61 (padded to 64: the vocabulary-parallel
// embedding and loss), no dropout.
models::GPT2Config tp_gpt2_config(std::shared_ptr<const models::LayerFactory> layers) {
  models::GPT2Config c = trident::testing::pipeline_gpt2_config(2, 32);
  c.n_head = 4;
  c.layers = std::move(layers);
  return c;
}

struct TpRun {
  std::vector<double> losses, norms;
  nn::StateDict state;
};

constexpr int kSteps = 3;
constexpr double kClip = 0.05;

TpRun train_gpt2(models::GPT2LMHeadModel& m, const std::function<double()>& clip, const std::function<nn::StateDict()>& state) {
  nn::optim::SGD opt(m.parameters(), {.lr = 0.5, .momentum = 0.9});
  TpRun r;
  for (int s = 0; s < kSteps; ++s) {
    const models::Batch b = make_pipeline_batch("gpt2", 4, 16, 100 + static_cast<uint64_t>(s)).to(kGPU);
    Tensor loss = m.loss(m.layers().run(b), b);
    loss.backward();
    r.losses.push_back(loss.item<double>());
    r.norms.push_back(clip());
    opt.step();
    opt.zero_grad();
  }
  r.state = state();
  return r;
}

TEST(CudaTensorParallel, OneRankOverNcclTrainsAsTheSerialModel) {
  TRIDENT_REQUIRE_CUDA();
  Generator g1(1234);
  models::GPT2LMHeadModel serial(tp_gpt2_config(nullptr), &g1);
  serial.to(kGPU);
  const TpRun want = train_gpt2(
      serial, [&] { return nn::clip_grad_norm_(serial.parameters(), kClip); }, [&] { return serial.state_dict(); });
  for (const bool sequence_parallel : {false, true}) {
    SCOPED_TRACE(sequence_parallel ? "sequence parallel" : "tensor parallel");
    // The layers' collectives over NCCL; the once-per-step ones over a host group (as
    // tensor_parallel_layers and train() in apps/train_common.cpp split them).
    auto layers = std::make_shared<tp::TensorParallelLayers>(
        nccl_of_one("tp.nccl"), tp::TensorParallelOptions{.sequence_parallel = sequence_parallel});
    auto host_tp = local_group("tp.host");
    Generator g2(1234);
    models::GPT2LMHeadModel m(tp_gpt2_config(layers), &g2);
    m.to(kGPU);
    ASSERT_FALSE(tp::sharded_parameters(m).empty()) << "the model has split layers";
    const TpRun got = train_gpt2(
        m, [&] { return tp::clip_grad_norm_(m, kClip, *host_tp); }, [&] { return tp::full_state_dict(m, *host_tp); });
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_NEAR(got.losses[s], want.losses[s], 1e-5 * want.losses[s]) << "step " << s;
      EXPECT_NEAR(got.norms[s], want.norms[s], 1e-5 * want.norms[s]) << "step " << s;
      EXPECT_GT(want.norms[s], kClip) << "clipping acts at step " << s;
    }
    ASSERT_EQ(got.state.size(), want.state.size());
    for (const auto& [name, t] : want.state)
      EXPECT_TRUE(all_close(got.state.at(name).to(kCPU), t.to(kCPU), 1e-4, 1e-6)) << name;
  }
}

}  // namespace
