// NOTE [Stage-only model] and NOTE [Pipeline checkpoints] under mpirun -np 2 and -np 4 (one stage
// per rank): what a rank keeps of the model, evaluation through the stages, and the whole
// model's state gathered from the stages, each against the serial model built on every rank
// from the same seed (pipeline_reference.h).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "nn/optim/sgd.h"
#include "parallel/pipeline/checkpoint.h"
#include "parallel/pipeline/pipeline.h"
#include "pipeline_reference.h"

using namespace trident;
using namespace trident::parallel;
using namespace trident::parallel::pipeline;
using trident::testing::make_pipeline_batch;
using trident::testing::make_pipeline_model;

namespace {

using namespace trident::testing::pipeline_reference;

// NOTE [Stage-only model]: after construction a rank holds its stage's tensors only; every other
// entry of the model is a one-element NaN placeholder of the right shape, the memory it held is
// given back, and converting the model (to f64) leaves the placeholders one element.
bool is_placeholder(const Tensor& t) { return is_broadcast_scalar(t) && t.storage()->nbytes() == itemsize(t.dtype()); }

class StageOnly : public ::testing::TestWithParam<std::string> {};

TEST_P(StageOnly, RankHoldsItsStageOnly) {
  const std::string kind = GetParam();
  auto serial_model = make_pipeline_model(kind);
  const nn::StateDict whole = serial_model->state_dict();
  auto model = make_pipeline_model(kind);
  std::map<std::string, std::weak_ptr<Storage>> storage_before;
  for (const auto& [name, t] : model->state_dict()) storage_before[name] = t.storage();
  Pipeline pipe(*model, fresh_group("pp"), {.micro_batches = 2});
  const nn::StateDict mine = pipe.state_dict();
  ASSERT_FALSE(mine.empty());
  const nn::StateDict state = model->state_dict();
  ASSERT_EQ(state.size(), whole.size());
  ASSERT_EQ(pipe.state_owners().size(), whole.size());
  int64_t held = 0, total = 0, released = 0;
  for (const auto& [name, t] : state) {
    const Tensor& w = whole.at(name);
    EXPECT_EQ(t.sizes(), w.sizes()) << name;  // shapes and dtypes still the whole model's
    EXPECT_EQ(t.dtype(), w.dtype()) << name;
    const int64_t bytes = w.numel() * static_cast<int64_t>(itemsize(w.dtype()));
    total += bytes;
    if (mine.count(name) != 0) {
      held += bytes;
      EXPECT_FALSE(is_placeholder(t)) << name;
      EXPECT_TRUE(trident::testing::all_close(t, w, 0, 0)) << name << ": the serial model's initial values";
      continue;
    }
    EXPECT_NE(pipe.state_owners().at(name), pipe.stage()) << name;
    if (w.numel() <= 1) continue;
    EXPECT_TRUE(is_placeholder(t)) << name << " (owned by stage " << pipe.state_owners().at(name) << ") on stage "
                                   << pipe.stage();
    if (is_floating(t.dtype())) {
      EXPECT_TRUE(std::isnan(t.to(DType::F64).to_vector<double>().front())) << name;
    }
    EXPECT_TRUE(storage_before.at(name).expired()) << name << ": nothing keeps the released memory alive";
    released += bytes;
  }
  EXPECT_GT(released, 0) << "every stage releases the other stages' layers";
  EXPECT_LT(held, total);
  EXPECT_NEAR(static_cast<double>(pipe.released_bytes()), static_cast<double>(released), 0.05 * static_cast<double>(released))
      << "non-persistent buffers add a little";
  // Converting keeps the placeholders one element (Module::to) and converts the stage's tensors.
  model->to(DType::F64);
  for (const auto& [name, t] : model->state_dict()) {
    if (mine.count(name) != 0 || whole.at(name).numel() <= 1) continue;
    EXPECT_TRUE(is_placeholder(t)) << name;
  }
  for (const auto& [name, t] : pipe.state_dict())
    if (is_floating(whole.at(name).dtype())) {
      EXPECT_EQ(t.dtype(), DType::F64) << name;
    }
}

// keep_stage (no communication) cuts the model as the pipeline would;
// the pipeline built afterwards finds its stage whole, releases nothing more and trains as serial.
TEST_P(StageOnly, KeepStageBeforeThePipelineIsThePipelinesCut) {
  const std::string kind = GetParam();
  const int K = comm::Communicator::world()->size();
  auto reference = make_pipeline_model(kind);
  Pipeline cut_by_pipeline(*reference, fresh_group("pp"), {.micro_batches = 4});
  auto model = make_pipeline_model(kind);
  const Balance balance = plan_balance(model->layers(), K);
  EXPECT_EQ(balance, cut_by_pipeline.balance());
  keep_stage(*model, balance, comm::Communicator::world()->rank());
  Pipeline pipe(*model, fresh_group("pp"), {.micro_batches = 4});
  EXPECT_EQ(pipe.released_bytes(), 0);
  EXPECT_EQ(pipe.state_owners(), cut_by_pipeline.state_owners());
  const auto want_held = cut_by_pipeline.state_dict(), held = pipe.state_dict();
  ASSERT_EQ(held.size(), want_held.size());
  for (const auto& [name, t] : model->state_dict())
    EXPECT_EQ(is_placeholder(t), want_held.count(name) == 0 && t.numel() > 1) << name;
  const Serial& want = serial(kind, 4);
  const double loss = pipe.step(make_pipeline_batch(kind, batch_size(kind), kSeq, 7));
  EXPECT_NEAR(loss, want.loss, 1e-5 * std::fabs(want.loss));
  for (const auto& [name, p] : pipe.named_parameters())
    EXPECT_TRUE(close_rel(p.grad(), want.grads.at(name), name, want.scale)) << name;
}

// A second pipeline over the same model may cut it the same way (the benchmarks do), not
// otherwise: its stages would hold the first one's placeholders. Every rank gets the error.
TEST(PipelineMpi, ASecondCutOfAReleasedModelIsAnErrorOnEveryRank) {
  auto model = make_pipeline_model("gpt2");
  const Balance first = Pipeline(*model, fresh_group("pp")).balance();
  EXPECT_NO_THROW(Pipeline(*model, fresh_group("pp"), {.balance = first}));
  const auto K = static_cast<int64_t>(first.size());
  Balance other(static_cast<size_t>(K), 1);
  other[0] = static_cast<int64_t>(model->layers().size()) - (K - 1);
  ASSERT_NE(other, first) << "the test needs stage 0 to take layers it released";
  trident::testing::expect_error([&] { Pipeline(*model, fresh_group("pp"), {.balance = other}); },
                                 {"an earlier pipeline over this model released", "build the model again"});
}

// Evaluation through the stages equals the serial model's forward in eval mode (batch norm by its
// running statistics, dropout off), with micro-batches and with a batch the micro-batch count
// does not divide (run whole).
TEST_P(StageOnly, ForwardOnlyGivesTheSerialOutputs) {
  const std::string kind = GetParam();
  auto serial_model = make_pipeline_model(kind, /*dropout=*/0.1);
  serial_model->eval();
  auto model = make_pipeline_model(kind, 0.1);
  Pipeline pipe(*model, fresh_group("pp"), {.micro_batches = 4});
  model->eval();
  for (const int64_t B : {batch_size(kind), int64_t{6}}) {
    const models::Batch batch = make_pipeline_batch(kind, B, kSeq, 21);
    models::Activations want;
    {
      NoGradGuard ng;
      want = serial_model->layers().run(batch);
    }
    const models::Activations got = pipe.forward_only(batch);
    if (pipe.stage() + 1 != pipe.num_stages()) {
      EXPECT_TRUE(got.empty());
      continue;
    }
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i].defined(), want[i].defined()) << i;
      if (!want[i].defined()) continue;
      EXPECT_FALSE(got[i].requires_grad());
      EXPECT_TRUE(close_rel(got[i], want[i])) << kind << " output " << i << " B = " << B;
    }
  }
}

// NOTE [Pipeline checkpoints]: after training steps, the state dict gathered on pp rank 0 is
// the serial model's (parameters and batch norm's running statistics, which only their stage
// updates), and the gathered optimizer state the serial optimizer's.
TEST_P(StageOnly, GatheredStateIsTheSerialModelsAfterTraining) {
  const std::string kind = GetParam();
  const int64_t M = 2;
  constexpr int kSteps = 2;
  auto batch_of = [&](int s) { return make_pipeline_batch(kind, batch_size(kind), kSeq, 300 + static_cast<uint64_t>(s)); };
  auto serial_model = make_pipeline_model(kind);
  nn::optim::SGD serial_opt(serial_model->parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int s = 0; s < kSteps; ++s) {
    const models::Batch b = batch_of(s);
    const std::vector<double> counts = serial_model->loss_counts(b);
    for (const models::Batch& mb : b.split(M)) serial_model->loss(serial_model->layers().run(mb), mb, counts).backward();
    serial_opt.step();
    serial_opt.zero_grad();
  }
  auto model = make_pipeline_model(kind);
  Pipeline pipe(*model, fresh_group("pp"), {.micro_batches = M, .schedule = Schedule::OneFOneB});
  nn::optim::SGD opt(pipe.parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int s = 0; s < kSteps; ++s) {
    pipe.step(batch_of(s));
    opt.step();
    pipe.zero_grad();
  }
  const nn::StateDict got = gather_state_dict(pipe, pipe.state_dict());
  const ParamGroups stage_groups{pipe.parameters()}, whole_groups{model->parameters()};
  const nn::optim::OptimizerState got_opt =
      gather_optimizer_state(pipe, opt.state_dict(), stage_groups, whole_groups, opt.slot_names());
  if (pipe.pp()->rank() != 0) {
    EXPECT_TRUE(got.empty());
    EXPECT_TRUE(got_opt.tensors.empty());
    return;
  }
  // The attention key bias's gradient is rounding noise (see close_rel), so its value and its
  // momentum are compared against the largest entry of all parameters, or of all momenta.
  const nn::StateDict want = serial_model->state_dict();
  double param_scale = 0, momentum_scale = 0;
  for (const Tensor& p : serial_model->parameters()) param_scale = std::max(param_scale, max_abs(p));
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(got.count(name) != 0) << name;
    ASSERT_EQ(got.at(name).device(), Device::cpu());
    if (is_floating(t.dtype())) {
      EXPECT_TRUE(close_rel(got.at(name), t, name, param_scale)) << name;
    } else {
      EXPECT_TRUE(trident::testing::all_close(got.at(name), t, 0, 0)) << name;  // num_batches_tracked
    }
  }
  const nn::optim::OptimizerState want_opt = serial_opt.state_dict();
  for (const auto& [key, t] : want_opt.tensors) momentum_scale = std::max(momentum_scale, max_abs(t));
  ASSERT_EQ(got_opt.tensors.size(), want_opt.tensors.size());
  for (const auto& [key, t] : want_opt.tensors) {
    ASSERT_TRUE(got_opt.tensors.count(key) != 0) << key;
    EXPECT_TRUE(trident::testing::all_close(got_opt.tensors.at(key), t, 1e-5,
                                            std::max(1e-5 * max_abs(t), 1e-6 * momentum_scale)))
        << key;
  }
}

INSTANTIATE_TEST_SUITE_P(All, StageOnly, ::testing::Values("gpt2", "bert", "amoebanet"));

}  // namespace
