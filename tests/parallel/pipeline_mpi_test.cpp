// Pipeline parallelism against serial training, run by ctest under mpirun -np 2 and -np 4: the
// pipeline has as many stages as ranks. Every rank also computes the serial reference itself
// (the same model from the same seed on the same mini-batch), so no rank depends on another for
// the expected values (pipeline_reference.h). Equality is within relative 1e-5 in f32: the
// micro-batches' gradients are summed in another order than the mini-batch's. What a rank keeps
// of the model, evaluation and gathered state: pipeline_stage_only_mpi_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "nn/optim/sgd.h"
#include "ops/autocast.h"
#include "parallel/mesh.h"
#include "nn/grad_scaler.h"
#include "nn/optim/clip_grad.h"
#include "parallel/pipeline/checkpoint.h"
#include "parallel/pipeline/grad_norm.h"
#include "parallel/pipeline/pipeline.h"
#include "parallel/tensor_parallel/checkpoint.h"
#include "parallel/tensor_parallel/tp_layers.h"
#include "parallel/zero.h"
#include "pipeline_models.h"
#include "pipeline_reference.h"
#include "test_util.h"

using namespace trident;
using namespace trident::parallel;
using namespace trident::parallel::pipeline;
using trident::testing::make_pipeline_batch;
using trident::testing::make_pipeline_model;

namespace {

using namespace trident::testing::pipeline_reference;

using Case = std::tuple<std::string, int64_t, Schedule, Remat>;

class PipelineMatchesSerial : public ::testing::TestWithParam<Case> {};

// One step of `pipe` over `model` (built by make_pipeline_model(kind)): the serial loss and
// gradients of the same mini-batch.
void expect_step_matches_serial(const std::string& kind, int64_t M, Pipeline& pipe) {
  const Serial& want = serial(kind, M);
  const double loss = pipe.step(make_pipeline_batch(kind, batch_size(kind), kSeq, 7));
  EXPECT_NEAR(loss, want.loss, 1e-5 * std::fabs(want.loss));
  ASSERT_FALSE(pipe.named_parameters().empty());
  for (const auto& [name, p] : pipe.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_TRUE(close_rel(p.grad(), want.grads.at(name), name, want.scale)) << name << " on stage " << pipe.stage();
  }
}

TEST_P(PipelineMatchesSerial, LossAndGradients) {
  const auto& [kind, M, schedule, remat] = GetParam();
  auto model = make_pipeline_model(kind);
  Pipeline pipe(*model, fresh_group("pp"), {.micro_batches = M, .schedule = schedule, .remat = remat});
  expect_step_matches_serial(kind, M, pipe);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const auto& [kind, M, schedule, remat] = info.param;
  return kind + "_M" + std::to_string(M) + "_" + std::string(schedule_name(schedule)) + "_" + std::string(remat_name(remat));
}

INSTANTIATE_TEST_SUITE_P(All, PipelineMatchesSerial,
                         ::testing::Combine(::testing::Values("gpt2", "bert", "amoebanet"), ::testing::Values(1, 4, 8),
                                            ::testing::Values(Schedule::GPipe, Schedule::OneFOneB),
                                            ::testing::Values(Remat::Always, Remat::ExceptLast, Remat::Never)),
                         case_name);

TEST(PipelineMpi, AmoebaNetStateWithUndefinedPartsCrossesStages) {
  // Explicit cuts so that a boundary follows the stem (state {cur}: prev and aux undefined),
  // one follows the auxiliary head ({cur, prev, aux}) and one a cell ({cur, prev}, aux defined).
  // Layers: stem, cell_0, reduction_cell_0, cell_1, aux_head, reduction_cell_1, cell_2, classifier.
  const int K = comm::Communicator::world()->size();
  const Balance balance = K == 2 ? Balance{1, 7} : K == 4 ? Balance{1, 4, 1, 2} : Balance{};
  if (balance.empty()) GTEST_SKIP() << "for 2 or 4 ranks";
  const Serial& want = serial("amoebanet", 4);
  auto model = make_pipeline_model("amoebanet");
  Pipeline pipe(*model, fresh_group("pp"),
                {.micro_batches = 4, .schedule = Schedule::OneFOneB, .remat = Remat::Always, .balance = balance});
  const double loss = pipe.step(make_pipeline_batch("amoebanet", batch_size("amoebanet"), kSeq, 7));
  EXPECT_NEAR(loss, want.loss, 1e-5 * std::fabs(want.loss));
  for (const auto& [name, p] : pipe.named_parameters())
    EXPECT_TRUE(close_rel(p.grad(), want.grads.at(name), name, want.scale)) << name << " on stage " << pipe.stage();
}

// NOTE [Deferred batch norm]: with deferred_batch_norm each batch norm's running statistics
// move once per step by the statistics of everything it saw in the step (num_batches_tracked
// counts one batch), while the loss and gradients stay those of per-micro-batch normalization.
//  - The stem's batch norm sees the images themselves, so its running statistics equal those of
//    serial training on the whole mini-batch at any M. Later batch norms see activations that
//    earlier ones normalized per micro-batch, which differ from the whole batch's (GPipe's and
//    torchgpipe's semantics too), so there the reference is serial training on the same
//    micro-batches with deferred batch norm.
//  - Without deferring, the statistics are those of the M micro-batches run one after another,
//    also under re-materialization (the re-run in backward updates nothing).
// The deferred update itself is checked against hand-computed numbers in tests/nn/layers_test.cpp.
using BnCase = std::tuple<int64_t, Schedule, Remat>;
class DeferredBatchNorm : public ::testing::TestWithParam<BnCase> {};

TEST_P(DeferredBatchNorm, RunningStatisticsDoNotDependOnMicroBatches) {
  const auto& [M, schedule, remat] = GetParam();
  const Serial& whole = serial("amoebanet", 1);
  const Serial& per_micro = serial("amoebanet", M);
  const Serial& per_micro_deferred = serial("amoebanet", M, true);
  for (bool deferred : {true, false}) {
    auto model = make_pipeline_model("amoebanet");
    Pipeline pipe(*model, fresh_group("pp"),
                  {.micro_batches = M, .schedule = schedule, .remat = remat, .deferred_batch_norm = deferred});
    const double loss = pipe.step(make_pipeline_batch("amoebanet", batch_size("amoebanet"), kSeq, 7));
    EXPECT_NEAR(loss, per_micro.loss, 1e-5 * std::fabs(per_micro.loss));
    for (const auto& [name, p] : pipe.named_parameters())
      EXPECT_TRUE(close_rel(p.grad(), per_micro.grads.at(name), name, per_micro.scale)) << name;
    const Serial& want = deferred ? per_micro_deferred : per_micro;
    const auto got = layer_buffers(*model);
    int64_t compared = 0;
    bool any_differs_from_whole = false;
    for (size_t i = 0; i < got.size(); ++i)
      for (size_t j = 0; pipe.holds_layer(i) && j < got[i].size(); ++j) {
        const auto& [name, b] = got[i][j];
        const std::string where = model->layers().name(i) + "." + name + (deferred ? " (deferred)" : "");
        if (b.dtype() == DType::I64) {
          EXPECT_EQ(b.item<int64_t>(), want.buffers[i][j].second.item<int64_t>()) << where;
        } else {
          EXPECT_TRUE(close_rel(b, want.buffers[i][j].second)) << where;
          if (deferred && i == 0) {
            EXPECT_TRUE(close_rel(b, whole.buffers[i][j].second)) << where << " against the whole mini-batch";
          }
          any_differs_from_whole = any_differs_from_whole || !close_rel(b, whole.buffers[i][j].second);
          ++compared;
        }
      }
    EXPECT_GT(compared, 0) << "every stage holds batch norms";
    // Without deferring, M > 1 does move the statistics elsewhere (the test can tell).
    if (!deferred && M > 1) {
      EXPECT_TRUE(any_differs_from_whole);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AmoebaNet, DeferredBatchNorm,
                         ::testing::Values(BnCase{1, Schedule::GPipe, Remat::Never},
                                           BnCase{4, Schedule::GPipe, Remat::Always},
                                           BnCase{4, Schedule::OneFOneB, Remat::ExceptLast},
                                           BnCase{8, Schedule::OneFOneB, Remat::Always}));

// Parameters after SGD steps driven by the pipeline.
std::map<std::string, Tensor> train(int64_t M, Schedule schedule, int steps) {
  auto model = make_pipeline_model("gpt2");
  Pipeline pipe(*model, fresh_group("pp"), {.micro_batches = M, .schedule = schedule, .remat = Remat::ExceptLast});
  nn::optim::SGD opt(pipe.parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int s = 0; s < steps; ++s) {
    pipe.step(make_pipeline_batch("gpt2", kBatch, kSeq, 100 + static_cast<uint64_t>(s)));
    opt.step();
    opt.zero_grad();
  }
  std::map<std::string, Tensor> out;
  for (const auto& [name, p] : pipe.named_parameters()) out[name] = p.detach().clone();
  return out;
}

TEST(PipelineMpi, OneAndEightMicroBatchesGiveTheSameUpdate) {
  const auto one = train(1, Schedule::GPipe, 2), eight = train(8, Schedule::OneFOneB, 2);
  ASSERT_EQ(one.size(), eight.size());
  for (const auto& [name, p] : one) EXPECT_TRUE(close_rel(eight.at(name), p)) << name;
}

// bf16 autocast through the pipeline (NOTE [Autocast state], autograd/grad_mode.h): the step runs
// inside the caller's autocast scope, as the training apps run it; the engine turns autocast off
// for the backward passes, and a re-materializing re-run casts as its forward did. The serial
// reference is the training apps' loop: the same M micro-batches one after another under
// autocast, each loss weighted by the mini-batch's counts, backward outside the scope.
// What differs: nothing in any forward (the same micro-batches through the same layers), so the
// first step's loss is equal bit for bit; the backward passes compute the same per-micro-batch
// gradients, and with M = 2 the two summands of an untied gradient are added in either order
// (exact), but the tied word embedding sums its four parts (embedding and head, two
// micro-batches) in another order: (e0 + e1) + (h0 + h1) against ((e0 + h0) + e1) + h1, an f32
// rounding difference of about 1e-7 relative in that gradient, hence in the weights after a
// step. Later losses then differ at f32's level, and can differ more only where such a
// difference moves a weight or activation across a bf16 rounding boundary (the products' casts),
// which changes one operand by 2^-8 of itself and the mean loss far less (~1e-6); so the f32
// tests' 1e-5 relative bounds them too.
std::vector<double> train_bf16_losses(std::optional<std::pair<Schedule, Remat>> pipeline, int steps, bool bf16 = true) {
  constexpr int64_t M = 2;
  auto model = make_pipeline_model("gpt2");
  std::unique_ptr<Pipeline> pipe;
  if (pipeline) pipe = std::make_unique<Pipeline>(*model, fresh_group("pp"), PipelineOptions{.micro_batches = M, .schedule = pipeline->first, .remat = pipeline->second});
  nn::optim::SGD opt(pipe ? pipe->parameters() : model->parameters(), {.lr = 0.1, .momentum = 0.9});
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    const models::Batch batch = make_pipeline_batch("gpt2", kBatch, kSeq, 100 + static_cast<uint64_t>(s));
    double loss = 0;
    if (pipe) {
      autocast::Guard guard(DType::BF16, bf16);
      loss = pipe->step(batch);
    } else {
      const std::vector<double> counts = model->loss_counts(batch);
      for (const models::Batch& mb : batch.split(M)) {
        Tensor l;
        {
          autocast::Guard guard(DType::BF16, bf16);
          l = model->loss(model->layers().run(mb), mb, counts);
        }
        l.backward();
        loss += l.item<double>();
      }
    }
    opt.step();
    opt.zero_grad();
    losses.push_back(loss);
  }
  return losses;
}

TEST(PipelineMpi, Bf16AutocastTrainsAsSerialBf16) {
  constexpr int kSteps = 4;
  static const std::vector<double> serial_bf16 = train_bf16_losses(std::nullopt, kSteps);
  // The reference is bf16 indeed: the same computation in f32 gives the same bits every time,
  // so any difference comes from autocast's casts. At initialization the logits are small and
  // the loss is close to log(61) whatever the rounding, so the casts move it little (4e-6
  // relative here), but far more than f32 rounding could (~1e-7).
  const double f32 = train_bf16_losses(std::nullopt, 1, /*bf16=*/false)[0];
  EXPECT_GT(std::fabs(serial_bf16[0] - f32), 1e-6 * f32);
  for (Schedule schedule : {Schedule::GPipe, Schedule::OneFOneB})
    for (Remat remat : {Remat::Always, Remat::ExceptLast, Remat::Never}) {
      const std::vector<double> got = train_bf16_losses(std::pair{schedule, remat}, kSteps);
      const std::string where = std::string(schedule_name(schedule)) + " " + std::string(remat_name(remat));
      ASSERT_EQ(got.size(), serial_bf16.size());
      EXPECT_EQ(got[0], serial_bf16[0]) << where << ": the same forward, bit for bit";
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], serial_bf16[i], 1e-5 * std::fabs(serial_bf16[i])) << where << " step " << i;
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - serial_bf16[i]) / serial_bf16[i]);
      if (comm::Communicator::world()->rank() == 0)
        std::printf("bf16 %s: %d steps, largest relative loss difference from serial bf16 %.3g\n", where.c_str(), kSteps,
                    worst);
    }
}

// fp16 with dynamic loss scaling through the pipeline: the last stage starts backward from
// loss x scale (Pipeline::set_loss_scale, what GradScaler::scale(loss).backward() does serially)
// and the stages agree on overflow (GradScaler::unscale_ with all_finite over pp). Against the
// serial fp16 loop with the same scaler, for the reasons of the bf16 test above: the same losses
// within 1e-5 relative, and the same scale and skipped steps. The initial scale, 2^20, overflows
// f16 in this model's backward (serially, 2^19 does too and 2^18 does not), so the first two
// steps are skipped and backed off from, and that is part of what must agree.
struct Fp16Run {
  std::vector<double> losses, scales;
  std::vector<bool> skipped;
};
Fp16Run train_fp16(std::optional<std::pair<Schedule, Remat>> pipeline, int steps) {
  constexpr int64_t M = 2;
  auto model = make_pipeline_model("gpt2");
  std::unique_ptr<Pipeline> pipe;
  if (pipeline)
    pipe = std::make_unique<Pipeline>(*model, fresh_group("pp"),
                                      PipelineOptions{.micro_batches = M, .schedule = pipeline->first, .remat = pipeline->second});
  nn::optim::SGD opt(pipe ? pipe->parameters() : model->parameters(), {.lr = 0.1, .momentum = 0.9});
  nn::GradScaler scaler({.init_scale = 1048576.0});
  Fp16Run run;
  for (int s = 0; s < steps; ++s) {
    const models::Batch batch = make_pipeline_batch("gpt2", kBatch, kSeq, 100 + static_cast<uint64_t>(s));
    double loss = 0;
    if (pipe) {
      autocast::Guard guard(DType::F16);
      pipe->set_loss_scale(scaler.get_scale());
      loss = pipe->step(batch);
      scaler.unscale_(opt, [&](bool finite) {
        Tensor bad = scalar_tensor(finite ? 0.0 : 1.0, DType::F64);
        pipe->pp()->all_reduce(bad).wait();
        return bad.item<double>() == 0.0;
      });
    } else {
      const std::vector<double> counts = model->loss_counts(batch);
      for (const models::Batch& mb : batch.split(M)) {
        Tensor l;
        {
          autocast::Guard guard(DType::F16);
          l = model->loss(model->layers().run(mb), mb, counts);
        }
        scaler.scale(l).backward();
        loss += l.item<double>();
      }
    }
    run.scales.push_back(scaler.get_scale());
    scaler.step(opt);
    run.skipped.push_back(scaler.last_step_skipped());
    scaler.update();
    opt.zero_grad();
    run.losses.push_back(loss);
  }
  return run;
}

TEST(PipelineMpi, Fp16LossScalingTrainsAsSerialFp16) {
  constexpr int kSteps = 6;
  const Fp16Run want = train_fp16(std::nullopt, kSteps);
  ASSERT_TRUE(want.skipped[0]) << "the initial scale overflows";
  ASSERT_FALSE(want.skipped.back()) << "and the scaler backs off until it does not";
  ASSERT_NE(want.losses[1], want.losses[2]) << "the clean steps do update";
  for (const auto& [schedule, remat] : {std::pair{Schedule::GPipe, Remat::Never}, std::pair{Schedule::OneFOneB, Remat::Always}}) {
    const Fp16Run got = train_fp16(std::pair{schedule, remat}, kSteps);
    const std::string where = std::string(schedule_name(schedule)) + " " + std::string(remat_name(remat));
    EXPECT_EQ(got.skipped, want.skipped) << where;
    EXPECT_EQ(got.scales, want.scales) << where;
    for (size_t i = 0; i < want.losses.size(); ++i)
      EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * std::fabs(want.losses[i])) << where << " step " << i;
  }
}

TEST(PipelineMpi, Fp16OverflowInOneStageSkipsTheStepOnEveryStage) {
  // An inf in stage 0's gradients only (as an overflow confined to one stage's weight
  // gradients would leave it): every stage must skip and back off.
  auto model = make_pipeline_model("gpt2");
  Pipeline pipe(*model, fresh_group("pp"), {.micro_batches = 2});
  nn::optim::SGD opt(pipe.parameters(), {.lr = 0.1});
  nn::GradScaler scaler({.init_scale = 1024.0});
  pipe.set_loss_scale(scaler.get_scale());
  pipe.step(make_pipeline_batch("gpt2", kBatch, kSeq, 7));
  const Tensor before = pipe.parameters().back().detach().clone();
  if (pipe.stage() == 0) fill_(pipe.parameters().front().grad(), std::numeric_limits<double>::infinity());
  auto all_finite = [&](bool finite) {
    Tensor bad = scalar_tensor(finite ? 0.0 : 1.0, DType::F64);
    pipe.pp()->all_reduce(bad).wait();
    return bad.item<double>() == 0.0;
  };
  EXPECT_FALSE(scaler.unscale_(opt, all_finite)) << "on stage " << pipe.stage();
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 512.0);
  EXPECT_TRUE(trident::testing::all_close(pipe.parameters().back(), before, 0, 0)) << "no update on stage " << pipe.stage();
  trident::testing::expect_error([&] { pipe.set_loss_scale(0.0); }, {"loss scale must be positive and finite, got 0"});
}

TEST(PipelineMpi, TiedEmbeddingStaysEqualOnFirstAndLastStage) {
  auto w = comm::Communicator::world();
  const auto params = train(4, Schedule::OneFOneB, 2);
  // wte lives on stage 0 (embedding) and on the last stage (head): the same after the updates.
  const int K = w->size();
  const bool holds = w->rank() == 0 || w->rank() == K - 1;
  ASSERT_EQ(params.count("transformer.wte.weight") != 0, holds);
  Tensor t = holds ? params.at("transformer.wte.weight") : zeros({64, 16});
  Tensor first = t.clone(), last = t.clone();
  w->broadcast(first, 0).wait();
  w->broadcast(last, K - 1).wait();
  EXPECT_TRUE(trident::testing::all_close(first, last, 0, 0));
}

TEST(PipelineMpi, DropoutMatchesUnderReMaterialization) {
  // With dropout, re-running a stage's forward in backward must draw the same masks: `always`
  // then gives the gradients `never` gives (same seed on every rank for both runs).
  std::map<std::string, Tensor> grads[2];
  int i = 0;
  for (Remat r : {Remat::Never, Remat::Always}) {
    auto model = make_pipeline_model("gpt2", 0.2);
    manual_seed(99 + static_cast<uint64_t>(comm::Communicator::world()->rank()));
    Pipeline pipe(*model, fresh_group("pp"), {.micro_batches = 4, .schedule = Schedule::OneFOneB, .remat = r});
    pipe.step(make_pipeline_batch("gpt2", kBatch, kSeq, 7));
    for (const auto& [name, p] : pipe.named_parameters()) grads[i][name] = p.grad().clone();
    ++i;
  }
  for (const auto& [name, g] : grads[0]) EXPECT_TRUE(close_rel(grads[1].at(name), g)) << name;
  // And dropout did act: the gradients differ from the dropout-free serial ones.
  const Serial& plain = serial("gpt2");
  bool differs = false;
  for (const auto& [name, g] : grads[0]) differs = differs || !close_rel(g, plain.grads.at(name));
  EXPECT_TRUE(differs);
}

TEST(PipelineMpi, DataTimesPipelineMatchesSerial) {
  // dp x pp on the world: dp = 2 when there are 4 ranks (pp = 2), else dp = 1 (pp = 2). Each dp
  // replica runs its half of the mini-batch; the average of the replicas' gradients is the
  // mini-batch gradient (equal numbers of targets per row).
  auto w = comm::Communicator::world();
  Mesh mesh(w, {.dp = w->size() / 2, .pp = 2, .tp = 1});
  const Serial& want = serial("gpt2");
  auto model = make_pipeline_model("gpt2");
  Pipeline pipe(*model, mesh.group_ptr(Axis::PP),
                {.micro_batches = 2, .schedule = Schedule::OneFOneB, .dp = mesh.group_ptr(Axis::DP)});
  const models::Batch batch = make_pipeline_batch("gpt2", kBatch, kSeq, 7);
  const int64_t per = kBatch / mesh.size(Axis::DP);
  const double loss = pipe.step(batch.slice(mesh.index(Axis::DP) * per, (mesh.index(Axis::DP) + 1) * per));
  EXPECT_NEAR(loss, want.loss, 1e-5 * want.loss);
  for (const auto& [name, p] : pipe.named_parameters())
    EXPECT_TRUE(close_rel(p.grad(), want.grads.at(name), name, want.scale)) << name;
}

// The serial GPT-2 of the pipeline tests trained `steps` steps with SGD + momentum and gradient
// clipping at `clip` on batch_of(step): the losses, the norms before clipping and the final state.
struct ClippedRun {
  std::vector<double> losses, norms;
  nn::StateDict params;
};
// gather_state_dict's result: the serial state on pp rank 0 (`writer`), nothing elsewhere.
void expect_gathered(const nn::StateDict& got, const nn::StateDict& want, bool writer) {
  if (!writer) {
    EXPECT_TRUE(got.empty());
    return;
  }
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(got.count(name) != 0) << name;
    EXPECT_TRUE(close_rel(got.at(name), t)) << name;
  }
}

ClippedRun train_serial_clipped(int steps, double clip, const std::function<models::Batch(int)>& batch_of) {
  auto model = make_pipeline_model("gpt2");
  nn::optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  ClippedRun r;
  for (int s = 0; s < steps; ++s) {
    const models::Batch b = batch_of(s);
    Tensor loss = model->loss(model->layers().run(b), b);
    loss.backward();
    r.norms.push_back(nn::clip_grad_norm_(model->parameters(), clip));
    opt.step();
    opt.zero_grad();
    r.losses.push_back(loss.item<double>());
  }
  EXPECT_GT(r.norms[0], clip) << "clipping acts";
  r.params = model->state_dict();
  return r;
}

// NOTE [Interleaved schedule]: two chunks per rank. Each kind whose layer list has room for
// K x 2 virtual stages (GPT-2 and BERT have 6 layers, AmoebaNet 8: all at K = 2, AmoebaNet at
// K = 4) gives the serial loss and gradients, whatever the schedule and re-materialization, with
// M = K and 2 K micro-batches. GPT-2's tied embedding is on rank 0's first chunk and rank K - 1's
// last.
using InterleavedCase = std::tuple<std::string, int64_t, Schedule, Remat>;
class InterleavedPipelineMatchesSerial : public ::testing::TestWithParam<InterleavedCase> {};

TEST_P(InterleavedPipelineMatchesSerial, LossAndGradients) {
  const auto& [kind, groups, schedule, remat] = GetParam();
  const int64_t K = comm::Communicator::world()->size(), V = 2, M = groups * K;
  auto model = make_pipeline_model(kind);
  if (static_cast<int64_t>(model->layers().size()) < K * V)
    GTEST_SKIP() << kind << "'s " << model->layers().size() << " layers do not make " << K * V << " virtual stages";
  Pipeline pipe(*model, fresh_group("pp"), {.micro_batches = M, .schedule = schedule, .remat = remat, .chunks = V});
  ASSERT_EQ(pipe.layer_ranges().size(), 2u);
  EXPECT_EQ(pipe.balance().size(), static_cast<size_t>(K * V));
  expect_step_matches_serial(kind, M, pipe);
}

std::string interleaved_case_name(const ::testing::TestParamInfo<InterleavedCase>& info) {
  const auto& [kind, groups, schedule, remat] = info.param;
  return kind + "_groups" + std::to_string(groups) + "_" + std::string(schedule_name(schedule)) + "_" +
         std::string(remat_name(remat));
}

INSTANTIATE_TEST_SUITE_P(All, InterleavedPipelineMatchesSerial,
                         ::testing::Combine(::testing::Values("gpt2", "bert", "amoebanet"), ::testing::Values(1, 2),
                                            ::testing::Values(Schedule::GPipe, Schedule::OneFOneB),
                                            ::testing::Values(Remat::Always, Remat::ExceptLast, Remat::Never)),
                         interleaved_case_name);

// Interleaved GPT-2 trained three steps with clipping by the whole model's norm (the tied
// embedding counted once, on rank 0's first chunk): the serial losses, norms and, gathered to pp
// rank 0, parameters; evaluation through the chunks (forward_only) gives the serial logits; the
// transfers of gradients go on their own communicator.
TEST(PipelineMpi, InterleavedTrainsAsSerialAndEvaluatesThroughTheChunks) {
  const int64_t K = comm::Communicator::world()->size();
  if (K != 2) GTEST_SKIP() << "GPT-2's 6 layers make 2 x 2 virtual stages (the test runs at 2 ranks)";
  constexpr int kSteps = 3;
  constexpr double kClip = 0.5;
  auto batch_of = [](int s) { return make_pipeline_batch("gpt2", kBatch, kSeq, 100 + static_cast<uint64_t>(s)); };
  const auto [want_loss, want_norm, want_params] = train_serial_clipped(kSteps, kClip, batch_of);
  auto model = make_pipeline_model("gpt2");
  auto pp = fresh_group("pp-interleaved");
  Pipeline pipe(*model, pp, {.micro_batches = 4, .schedule = Schedule::OneFOneB, .timeline = true, .chunks = 2});
  // Layers 0-5 cut by parameters into 4 virtual stages: rank 0 holds the first and third.
  EXPECT_TRUE(pipe.holds_layer(0) == (pipe.stage() == 0));
  EXPECT_TRUE(pipe.holds_layer(5) == (pipe.stage() == 1));
  nn::optim::SGD opt(pipe.parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int s = 0; s < kSteps; ++s) {
    const double loss = pipe.step(batch_of(s));
    const double norm = clip_grad_norm_(pipe, kClip);
    opt.step();
    pipe.zero_grad();
    EXPECT_NEAR(loss, want_loss[static_cast<size_t>(s)], 1e-5 * want_loss[static_cast<size_t>(s)]) << "step " << s;
    EXPECT_NEAR(norm, want_norm[static_cast<size_t>(s)], 1e-5 * want_norm[static_cast<size_t>(s)]) << "step " << s;
  }
  // The ranks send each other activations (virtual stages 0 -> 1 and 2 -> 3 from rank 0 to rank
  // 1, 1 -> 2 back) and gradients (3 -> 2 and 1 -> 0 from rank 1, 2 -> 1 from rank 0): on pp the
  // activations only, 4 per step and boundary plus the shape header once; the gradients on a
  // communicator of their own.
  const int64_t per_boundary = kSteps * 4 + 1;
  EXPECT_EQ(pp->stats()[comm::CommOp::Send].calls, (pipe.stage() == 0 ? 2 : 1) * per_boundary) << pp->stats().str();
  EXPECT_EQ(pp->stats()[comm::CommOp::Recv].calls, (pipe.stage() == 0 ? 1 : 2) * per_boundary) << pp->stats().str();
  const PipelineTrace trace = pipe.gather_trace();
  EXPECT_EQ(trace.chunks, 2);
  int64_t chunk1 = 0;
  for (const auto& stage : trace.stages)
    for (const Event& e : stage) chunk1 += e.kind == EventKind::Forward && e.chunk == 1 ? 1 : 0;
  EXPECT_EQ(chunk1, 2 * 4) << "every rank's second chunk ran each micro-batch's forward once";

  auto serial_model = make_pipeline_model("gpt2");
  {
    NoGradGuard no_grad;
    serial_model->load_state_dict(want_params);
  }
  const models::Batch eval_batch = make_pipeline_batch("gpt2", kBatch, kSeq, 9);
  NoGradGuard no_grad;
  const models::Activations outs = pipe.forward_only(eval_batch);
  const nn::StateDict got = gather_state_dict(pipe, pipe.state_dict());
  if (pipe.stage() == 1) {
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_TRUE(close_rel(outs[0], serial_model->layers().run(eval_batch)[0])) << "logits through the chunks";
  } else {
    EXPECT_TRUE(outs.empty());
  }
  expect_gathered(got, want_params, pipe.stage() == 0);
}

// Pipeline::set_after_last_backward: once per step, after this rank's last backward pass, when
// every gradient of its stage is final but for the tied embedding's sum over its stages (NOTE
// [Overlapped pipeline gradients]), plain and interleaved.
TEST(PipelineMpi, AfterLastBackwardSeesTheStagesFinalGradients) {
  const int64_t K = comm::Communicator::world()->size();
  for (const int64_t V : {1, 2}) {
    if (K * V > 6) continue;  // GPT-2's 6 layers
    SCOPED_TRACE("chunks " + std::to_string(V));
    auto model = make_pipeline_model("gpt2");
    Pipeline pipe(*model, fresh_group("pp"), {.micro_batches = 2 * K, .schedule = Schedule::OneFOneB, .chunks = V});
    const Tensor& tied = model->layers().tied().front().tensor;
    int calls = 0;
    std::vector<std::pair<std::string, Tensor>> at_hook;
    pipe.set_after_last_backward([&] {
      ++calls;
      at_hook.clear();
      for (const auto& [name, p] : pipe.named_parameters())
        if (!p.is_same(tied)) at_hook.emplace_back(name, p.grad().clone());
    });
    for (int s = 0; s < 2; ++s) {
      pipe.zero_grad();
      pipe.step(make_pipeline_batch("gpt2", kBatch, kSeq, 7 + static_cast<uint64_t>(s)));
      EXPECT_EQ(calls, s + 1);
    }
    ASSERT_FALSE(at_hook.empty());
    std::map<std::string, Tensor> final_grads;
    for (const auto& [name, p] : pipe.named_parameters()) final_grads[name] = p.grad();
    for (const auto& [name, g] : at_hook)
      EXPECT_TRUE(trident::testing::all_close(g, final_grads.at(name), 0, 0)) << name << ": changed after the last backward";
  }
}

TEST(PipelineMpi, InterleavedNeedsMicroBatchesInGroupsOfTheStagesAndEnoughLayers) {
  const int64_t K = comm::Communicator::world()->size();
  auto model = make_pipeline_model("gpt2");
  trident::testing::expect_error([&] { Pipeline p(*model, fresh_group("pp"), {.micro_batches = K + 1, .chunks = 2}); },
                                 {"micro-batches is not a multiple of " + std::to_string(K)});
  trident::testing::expect_error([&] { Pipeline p(*model, fresh_group("pp"), {.micro_batches = K, .chunks = 4}); },
                                 {"of 4 chunks each but the model has only 6 layers"});
  if (K == 2)  // 4 virtual stages of 6 layers, but a balance of 2
    trident::testing::expect_error([&] { Pipeline p(*model, fresh_group("pp"), {.micro_batches = K, .balance = {3, 3}, .chunks = 2}); },
                                   {"the balance {3, 3} has 2 stages", "4 entries"});
  else  // 8 virtual stages of 6 layers
    trident::testing::expect_error([&] { Pipeline p(*model, fresh_group("pp"), {.micro_batches = K, .chunks = 2}); },
                                   {"of 2 chunks each but the model has only 6 layers"});
}

// tp x pp on four ranks: two stages, each split over two tensor-parallel ranks by
// TensorParallelLayers (the mesh's tp group), the pipeline's transfers between the ranks of one
// tp index. Trained with gradient clipping by the whole model's norm (split parameters' squares
// summed over tp, then over pp) and SGD with momentum, it must give the serial losses, norms and
// parameters (gathered to full tensors) within relative 1e-5 (f32): the sums of the split
// products and of the micro-batches run in other orders than serially.
TEST(PipelineMpi, TensorTimesPipelineTrainsAsSerial) {
  auto w = comm::Communicator::world();
  if (w->size() != 4) GTEST_SKIP() << "tp x pp needs 4 ranks (pp = 2, tp = 2)";
  const Mesh mesh(w, {.dp = 1, .pp = 2, .tp = 2});
  constexpr int kSteps = 3;
  constexpr double kClip = 0.5;
  auto batch_of = [](int s) { return make_pipeline_batch("gpt2", kBatch, kSeq, 100 + static_cast<uint64_t>(s)); };
  const auto [want_loss, want_norm, want_params] = train_serial_clipped(kSteps, kClip, batch_of);
  for (const auto& [M, schedule, remat] : {std::tuple{int64_t{4}, Schedule::GPipe, Remat::ExceptLast},
                                           std::tuple{int64_t{2}, Schedule::OneFOneB, Remat::Always}}) {
    const std::string where = "M = " + std::to_string(M) + " " + std::string(schedule_name(schedule)) + " " +
                              std::string(remat_name(remat));
    models::GPT2Config c = trident::testing::pipeline_gpt2_config();
    c.layers = std::make_shared<tp::TensorParallelLayers>(mesh);
    Generator g(1234);  // make_pipeline_model's seed: the serial model's values (NOTE [Parameter shards])
    models::GPT2LMHeadModel model(c, &g);
    Pipeline pipe(model, mesh.group_ptr(Axis::PP), {.micro_batches = M, .schedule = schedule, .remat = remat});
    const auto split = tp::sharded_parameters(model);
    const auto stage_params = pipe.named_parameters();
    EXPECT_TRUE(std::any_of(stage_params.begin(), stage_params.end(), [&](const auto& p) { return split.count(p.first) != 0; }))
        << "the stage holds tensor-parallel shards";
    nn::optim::SGD opt(pipe.parameters(), {.lr = 0.1, .momentum = 0.9});
    for (int s = 0; s < kSteps; ++s) {
      const double loss = pipe.step(batch_of(s));
      const double norm = clip_grad_norm_(pipe, kClip, &mesh.group(Axis::TP));
      opt.step();
      pipe.zero_grad();
      EXPECT_NEAR(loss, want_loss[static_cast<size_t>(s)], 1e-5 * want_loss[static_cast<size_t>(s)]) << where << " step " << s;
      EXPECT_NEAR(norm, want_norm[static_cast<size_t>(s)], 1e-5 * want_norm[static_cast<size_t>(s)]) << where << " step " << s;
    }
    // The tp group gathers each stage's shards to full tensors, then pp rank 0 takes every stage's.
    const nn::StateDict got = gather_state_dict(pipe, tp::full_state_dict(pipe.state_dict(), model, mesh.group(Axis::TP)));
    SCOPED_TRACE(where);
    expect_gathered(got, want_params, mesh.group(Axis::PP).rank() == 0);
  }
}

// ZeRO-1 over dp x pp on four ranks (NOTE [ZeRO-1 over pipeline stages]): each stage's optimizer
// sharded over its dp group, the micro-batches' backward passes under no_sync and the step's sum
// reduce-scattered once, clipping by the whole model's norm with the tied word embedding counted
// once (it lives on both stages). Trained with SGD + momentum (linear in the gradient, so
// rounding stays rounding), the losses, norms and parameters must be the serial run's within
// relative 1e-5. Counting the embedding twice, or clipping by the stage's norm alone, changes
// the norms far beyond that. Overlapped (NOTE [Overlapped pipeline gradients]): the tied
// embedding bucketed last (ZeroOptions::reduce_last), every other bucket's reduce-scatter
// launched from Pipeline::set_after_last_backward, before the embedding's sum over its stages,
// and the embedding's after the step: the same run.
static void expect_zero_over_pipeline_trains_as_serial(bool overlapped) {
  auto w = comm::Communicator::world();
  if (w->size() != 4) GTEST_SKIP() << "dp x pp needs 4 ranks (dp = 2, pp = 2)";
  const Mesh mesh(w, {.dp = 2, .pp = 2, .tp = 1});
  constexpr int kSteps = 3;
  constexpr double kClip = 0.5;
  auto batch_of = [](int s) { return make_pipeline_batch("gpt2", kBatch, kSeq, 200 + static_cast<uint64_t>(s)); };
  const auto [want_loss, want_norm, want_params] = train_serial_clipped(kSteps, kClip, batch_of);

  auto model = make_pipeline_model("gpt2");
  Pipeline pipe(*model, mesh.group_ptr(Axis::PP),
                {.micro_batches = 2, .schedule = Schedule::OneFOneB, .dp = mesh.group_ptr(Axis::DP),
                 .average_dp_gradients = false});
  const Tensor& tied = model->layers().tied().front().tensor;
  std::vector<Tensor> tied_here;
  for (const Tensor& p : pipe.parameters())
    if (p.is_same(tied)) tied_here.push_back(p);
  EXPECT_EQ(tied_here.size(), 1u) << "both stages hold the word embedding";
  // Its own dp communicator, so that its counters count the gradients' reduce-scatters alone.
  auto dp_grads = mesh.group(Axis::DP).split(0, mesh.group(Axis::DP).rank(), "zero-grads");
  ZeroOptimizer zero(ParamGroups{pipe.parameters()}, dp_grads,
                     [](const ParamGroups& g) {
                       return std::make_unique<nn::optim::SGD>(g.at(0), nn::optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
                     },
                     {.bucket_bytes = 2048, .reduce_last = overlapped ? tied_here : std::vector<Tensor>{}});
  const auto buckets = static_cast<int64_t>(zero.buckets().size());
  int64_t launched_at_hook = -1;
  if (overlapped) {
    pipe.set_after_last_backward([&] {
      const int64_t before = dp_grads->stats()[comm::CommOp::ReduceScatter].calls;
      zero.reduce_gradients_async();
      launched_at_hook = dp_grads->stats()[comm::CommOp::ReduceScatter].calls - before;
    });
  }
  ZeroOptimizer::NormParts parts;
  parts.pp = &mesh.group(Axis::PP);
  for (const Tensor& p : pipe.parameters())
    if (!counted_here(pipe, p)) parts.elsewhere.push_back(p);
  EXPECT_EQ(parts.elsewhere.size(), pipe.stage() == 1 ? 1u : 0u) << "the tied embedding counts on the first stage only";
  const int64_t per = kBatch / 2, row = mesh.index(Axis::DP) * per;
  for (int s = 0; s < kSteps; ++s) {
    double loss = 0;
    const int64_t calls_before = dp_grads->stats()[comm::CommOp::ReduceScatter].calls;
    {
      auto local = zero.no_sync();
      loss = pipe.step(batch_of(s).slice(row, row + per));
    }
    if (overlapped) {
      // The embedding's bucket (its own, the last) waits for its sum over the stages.
      const auto& last = zero.buckets().back();
      EXPECT_TRUE(last.slots.size() == 1 && last.slots[0].param.is_same(tied)) << "the embedding's bucket is the last";
      EXPECT_EQ(launched_at_hook, buckets - 1) << "every bucket but the embedding's, after the last backward pass";
      EXPECT_EQ(dp_grads->stats()[comm::CommOp::ReduceScatter].calls - calls_before, buckets - 1);
    }
    zero.reduce_gradients();
    EXPECT_EQ(dp_grads->stats()[comm::CommOp::ReduceScatter].calls - calls_before, buckets) << "one per bucket per step";
    const double norm = zero.clip_grad_norm(kClip, parts);
    zero.step();
    zero.zero_grad();
    EXPECT_NEAR(loss, want_loss[static_cast<size_t>(s)], 1e-5 * want_loss[static_cast<size_t>(s)]) << "step " << s;
    EXPECT_NEAR(norm, want_norm[static_cast<size_t>(s)], 1e-5 * want_norm[static_cast<size_t>(s)]) << "step " << s;
  }
  const nn::StateDict got = gather_state_dict(pipe, pipe.state_dict());
  expect_gathered(got, want_params, mesh.group(Axis::PP).rank() == 0);
}

TEST(PipelineMpi, ZeroOverDataTimesPipelineTrainsAsSerial) { expect_zero_over_pipeline_trains_as_serial(false); }

TEST(PipelineMpi, ZeroOverlappedWithTheFlushTrainsAsSerial) { expect_zero_over_pipeline_trains_as_serial(true); }

TEST(PipelineMpi, BalanceByParametersAndByTime) {
  auto model = make_pipeline_model("gpt2");
  const int K = comm::Communicator::world()->size();
  Pipeline by_params(*model, fresh_group("pp"));
  EXPECT_EQ(by_params.num_stages(), K);
  int64_t sum = 0;
  for (int64_t n : by_params.balance()) sum += n;
  EXPECT_EQ(sum, 6);
  // GPT-2's embedding and head hold the vocabulary table: with 2 stages the blocks split evenly
  // around them.
  if (K == 2) {
    EXPECT_EQ(by_params.balance(), (Balance{3, 3}));
  }
  // A model of its own: the first pipeline kept only its stage of `model` (NOTE [Stage-only
  // model]), and a cut by measured times may differ from the cut by parameters.
  auto timed_model = make_pipeline_model("gpt2");
  Pipeline by_time(*timed_model, fresh_group("pp"),
                   {.balance_by = BalanceBy::Time, .profile_batch = make_pipeline_batch("gpt2", 2, kSeq, 1)});
  // The same cut on every rank (pp rank 0 broadcasts its times).
  Tensor mine = from_vector<int64_t>(by_time.balance(), {K});
  Tensor zero = mine.clone();
  comm::Communicator::world()->broadcast(zero, 0).wait();
  EXPECT_TRUE(trident::testing::all_close(mine, zero, 0, 0));
  // And it trains like serial.
  const double loss = by_time.step(make_pipeline_batch("gpt2", kBatch, kSeq, 7));
  EXPECT_NEAR(loss, serial("gpt2").loss, 1e-5 * serial("gpt2").loss);
  // Interleaved (NOTE [Interleaved schedule]): the times cut K x 2 virtual stages, alike on every
  // rank, and the serial loss again. (GPT-2's 6 layers make 4 virtual stages at K = 2 only.)
  if (K != 2) return;
  auto chunked_model = make_pipeline_model("gpt2");
  Pipeline chunked(*chunked_model, fresh_group("pp"),
                   {.micro_batches = 2, .balance_by = BalanceBy::Time, .profile_batch = make_pipeline_batch("gpt2", 2, kSeq, 1),
                    .chunks = 2});
  ASSERT_EQ(chunked.balance().size(), 4u);
  Tensor cut = from_vector<int64_t>(chunked.balance(), {4});
  Tensor cut0 = cut.clone();
  comm::Communicator::world()->broadcast(cut0, 0).wait();
  EXPECT_TRUE(trident::testing::all_close(cut, cut0, 0, 0));
  const double chunked_loss = chunked.step(make_pipeline_batch("gpt2", kBatch, kSeq, 7));
  EXPECT_NEAR(chunked_loss, serial("gpt2").loss, 1e-5 * serial("gpt2").loss);
}

TEST(PipelineMpi, ShapesAreExchangedOnlyWhenTheyChange) {
  auto model = make_pipeline_model("gpt2");
  auto pp = fresh_group("pp-shapes");
  Pipeline pipe(*model, pp, {.micro_batches = 2});
  const int64_t act = 4 * kSeq * 16 * 4;  // a micro-batch of 4 rows: [4, 8, 16] f32
  const int64_t header = 64 * 8;
  auto sent = [&] { return pp->stats()[comm::CommOp::Send].bytes; };
  const bool sends_forward = pipe.stage() + 1 < pipe.num_stages(), sends_back = pipe.stage() > 0;
  const int64_t per_step = 2 * act * ((sends_forward ? 1 : 0) + (sends_back ? 1 : 0));
  int64_t before = sent();
  pipe.step(make_pipeline_batch("gpt2", kBatch, kSeq, 1));
  EXPECT_EQ(sent() - before, per_step + (sends_forward ? header : 0));
  before = sent();
  pipe.step(make_pipeline_batch("gpt2", kBatch, kSeq, 2));  // same shapes: no header
  EXPECT_EQ(sent() - before, per_step);
  before = sent();
  pipe.step(make_pipeline_batch("gpt2", kBatch, kSeq / 2, 3));  // shorter sequences: a new header
  EXPECT_EQ(sent() - before, per_step / 2 + (sends_forward ? header : 0));
}

TEST(PipelineMpi, AlwaysReMaterializingHoldsLessActivationMemoryThanNever) {
  // GPT-2 at M = 8 with longer sequences, so activations outweigh the transfer buffers. A first
  // step allocates the gradients; the second is measured.
  auto peak = [](Remat r, Schedule s) {
    auto model = make_pipeline_model("gpt2", 0.0, 32);
    Pipeline pipe(*model, fresh_group("pp"), {.micro_batches = 8, .schedule = s, .remat = r});
    const models::Batch batch = make_pipeline_batch("gpt2", 16, 32, 5);
    pipe.step(batch);
    pipe.zero_grad();
    pipe.step(batch);
    return pipe.peak_activation_bytes();
  };
  const int64_t always = peak(Remat::Always, Schedule::GPipe), never = peak(Remat::Never, Schedule::GPipe);
  const int64_t never_1f1b = peak(Remat::Never, Schedule::OneFOneB);
  const int rank = comm::Communicator::world()->rank();
  std::printf("[rank %d] peak activation bytes at M = 8: always %lld, never %lld (ratio %.2f); 1f1b never %lld\n", rank,
              static_cast<long long>(always), static_cast<long long>(never),
              static_cast<double>(always) / static_cast<double>(never), static_cast<long long>(never_1f1b));
  EXPECT_LT(always, never);
  // 1F1B keeps at most K - stage micro-batches in flight instead of 8: less on every stage.
  EXPECT_LT(never_1f1b, never);
}

TEST(PipelineMpi, TimelineRecordsEveryMicroBatchOnEveryStage) {
  auto model = make_pipeline_model("gpt2");
  Pipeline pipe(*model, fresh_group("pp"), {.micro_batches = 4, .remat = Remat::Always, .timeline = true});
  pipe.step(make_pipeline_batch("gpt2", kBatch, kSeq, 7));
  // An evaluation after the step (as the apps run one) leaves the step's timeline alone.
  const size_t events = pipe.events().size();
  pipe.forward_only(make_pipeline_batch("gpt2", kBatch, kSeq, 8));
  EXPECT_EQ(pipe.events().size(), events);
  const PipelineTrace trace = pipe.gather_trace();
  const int K = comm::Communicator::world()->size();
  ASSERT_EQ(trace.stages.size(), static_cast<size_t>(K));
  for (int s = 0; s < K; ++s) {
    std::map<EventKind, int> n;
    for (const Event& e : trace.stages[static_cast<size_t>(s)]) {
      ++n[e.kind];
      EXPECT_GE(e.start, 0.0);
      EXPECT_GE(e.end, e.start);
    }
    EXPECT_EQ(n[EventKind::Forward], 4) << "stage " << s;
    EXPECT_EQ(n[EventKind::Backward], 4) << "stage " << s;
    EXPECT_EQ(n[EventKind::Recompute], 4) << "stage " << s;  // remat always: every micro-batch
    // Activations (and the shape header) from the previous stage, gradients from the next.
    EXPECT_EQ(n[EventKind::Recv], (s > 0 ? 5 : 0) + (s + 1 < K ? 4 : 0)) << "stage " << s;
  }
  const double bubble = trace.bubble_fraction();
  EXPECT_GT(bubble, 0.0);
  EXPECT_LT(bubble, 1.0);
  EXPECT_NE(trace.chrome_json().find("\"name\": \"forward 3\""), std::string::npos);
  const auto peaks = pipe.gather_peak_activation_bytes();
  ASSERT_EQ(peaks.size(), static_cast<size_t>(K));
  for (int64_t p : peaks) EXPECT_GT(p, 0);
}

TEST(PipelineMpi, BadInputFailsAlikeOnEveryRank) {
  using trident::testing::expect_error;
  const int K = comm::Communicator::world()->size();
  auto model = make_pipeline_model("gpt2");  // 6 layers
  Balance wrong_sum(static_cast<size_t>(K), 1);
  expect_error([&] { Pipeline p(*model, fresh_group("pp"), {.balance = wrong_sum}); },
               {"the balance", "sums to " + std::to_string(K), "the model has 6 layers"});
  expect_error([&] { Pipeline p(*model, fresh_group("pp"), {.balance = {6}}); },
               {"has 1 stages but group 'pp' has " + std::to_string(K) + " ranks"});
  {
    Pipeline p(*model, fresh_group("pp"), {.micro_batches = 3});
    expect_error([&] { p.step(make_pipeline_batch("gpt2", kBatch, kSeq, 7)); },
                 {"3 micro-batches do not divide the batch of 8 rows"});
    // The pipeline is still usable after an input error.
    EXPECT_NEAR(p.step(make_pipeline_batch("gpt2", 6, kSeq, 7)), serial("gpt2").loss, 1.0);
  }
  if (K >= 4) {
    Generator g(1);
    models::GPT2LMHeadModel small(trident::testing::pipeline_gpt2_config(1), &g);  // 3 layers
    expect_error([&] { Pipeline p(small, fresh_group("pp")); },
                 {std::to_string(K) + " stages", "the model has only 3 layers"});
  }
}

}  // namespace
