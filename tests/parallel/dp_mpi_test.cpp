// Data parallelism and ZeRO-1 against serial training, run by ctest under mpirun -np 2 and -np 4.
// Every rank also trains the serial reference itself (the same model on the whole global batch),
// so no rank depends on another for the expected values. Losses are means over the batch, so the
// dp average of the ranks' gradients on equal shares of the rows is the global batch's gradient.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <unistd.h>

#include "core/allocator.h"
#include "dp_models.h"
#include "parallel/checkpoint.h"
#include "test_util.h"

using namespace trident;
using namespace trident::parallel;
using namespace trident::parallel::comm;
using trident::testing::all_close;
using trident::testing::DpBatch;
using trident::testing::ModelCase;

namespace {

constexpr int kSteps = 3;
constexpr int64_t kGlobalBatch = 8;  // divisible by 2 and 4 ranks
// Small buckets, so every model has several and the order and overlap logic is exercised.
constexpr int64_t kSmallBuckets = 2048;

std::shared_ptr<Communicator> fresh_dp_group(const std::string& name) {
  // Its own communicator per test, so the counters start at zero.
  auto w = Communicator::world();
  return w->split(0, w->rank(), name);
}

std::unique_ptr<nn::optim::Optimizer> make_adamw(const std::vector<Tensor>& params) {
  return std::make_unique<nn::optim::AdamW>(params, nn::optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.01});
}

// The serial-equivalence tests train with SGD + momentum: its step is linear in the gradient, so
// gradients equal up to rounding give parameters equal up to rounding. Adam divides by sqrt(v),
// which turns the pure rounding noise of a gradient that is zero in exact arithmetic (the
// attention key bias: softmax ignores a shift common to every key) into full-size steps of either
// sign, so no tolerance would be meaningful there. ZeRO-1 is compared with plain data parallelism
// under AdamW, whose moments are the state it shards.
std::unique_ptr<nn::optim::Optimizer> make_sgd(const std::vector<Tensor>& params) {
  return std::make_unique<nn::optim::SGD>(params, nn::optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
}

OptimizerFactory adamw_factory() {
  return [](const ParamGroups& g) { return make_adamw(g.at(0)); };
}

// The mean of this rank's loss over the dp group: the global batch's loss.
double global_loss(Communicator& dp, const Tensor& local_loss) {
  Tensor l = local_loss.detach().to(kF64).clone();
  dp.all_reduce(l, ReduceOp::Average).wait();
  return l.item<double>();
}

// Serial training on the global batch: losses per step, final parameters.
struct TrainRun {
  std::vector<double> losses;
  std::vector<Tensor> params;
};

TrainRun train_serial(const ModelCase& c, int steps, int64_t batch, int micro = 1) {
  auto model = c.make();
  auto opt = make_sgd(model->parameters());
  TrainRun r;
  for (int s = 0; s < steps; ++s) {
    DpBatch b = c.batch(s, batch * micro);
    Tensor loss = c.loss(*model, b);
    loss.backward();
    opt->step();
    opt->zero_grad();
    r.losses.push_back(loss.item<double>());
  }
  r.params = model->parameters();
  return r;
}

void expect_same_run(const TrainRun& got, const TrainRun& want, double rtol, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < got.losses.size(); ++s)
    EXPECT_NEAR(got.losses[s], want.losses[s], rtol * std::fabs(want.losses[s])) << what << ": loss of step " << s;
  ASSERT_EQ(got.params.size(), want.params.size());
  for (size_t i = 0; i < got.params.size(); ++i)
    EXPECT_TRUE(all_close(got.params[i], want.params[i], rtol, 1e-7)) << what << ": parameter " << i;
}

// Rank r's rows of the global batch.
DpBatch my_rows(const DpBatch& global, const Communicator& dp) {
  const int64_t per = global.x.size(0) / dp.size();
  return global.rows(dp.rank() * per, per);
}

}  // namespace

TEST(DataParallelMpi, TrainsLikeSerialOnTheGlobalBatch) {
  for (const ModelCase& c : trident::testing::dp_model_cases()) {
    SCOPED_TRACE(c.name);
    const TrainRun serial = train_serial(c, kSteps, kGlobalBatch);
    auto dp = fresh_dp_group("dp");
    auto model = c.make();
    {
      // Ranks other than 0 start from other weights: the wrapper's broadcast must fix that.
      NoGradGuard no_grad;
      if (dp->rank() != 0)
        for (Tensor p : model->parameters()) add_(p, 0.5 * dp->rank());
    }
    DataParallel ddp(*model, dp, {.bucket_bytes = kSmallBuckets});
    EXPECT_GT(ddp.buckets().size(), 1u);
    auto opt = make_sgd(model->parameters());
    TrainRun r;
    for (int s = 0; s < kSteps; ++s) {
      Tensor loss = c.loss(*model, my_rows(c.batch(s, kGlobalBatch), *dp));
      loss.backward();  // reduced and averaged when it returns
      opt->step();
      opt->zero_grad();
      r.losses.push_back(global_loss(*dp, loss));
    }
    r.params = model->parameters();
    expect_same_run(r, serial, 1e-5, c.name + " dp=" + std::to_string(dp->size()));
  }
}

TEST(DataParallelMpi, ByteCountersEqualTheGradientBytesPerStep) {
  const ModelCase c = trident::testing::mlp_case();
  auto dp = fresh_dp_group("dp-counted");
  auto model = c.make();
  int64_t grad_bytes = 0;
  for (const Tensor& p : model->parameters()) grad_bytes += static_cast<int64_t>(p.nbytes());
  DataParallel ddp(*model, dp, {.bucket_bytes = kSmallBuckets});
  dp->reset_stats();  // leave out the initial broadcast
  c.loss(*model, my_rows(c.batch(0, kGlobalBatch), *dp)).backward();
  const CommStats& st = dp->stats();
  EXPECT_EQ(st[CommOp::AllReduce].bytes, grad_bytes) << st.str();
  EXPECT_EQ(st[CommOp::AllReduce].calls, static_cast<int64_t>(ddp.buckets().size())) << st.str();
  EXPECT_EQ(st.total_bytes(), grad_bytes) << "nothing but the gradient all-reduce: " << st.str();
  // A second step moves the same bytes again.
  c.loss(*model, my_rows(c.batch(1, kGlobalBatch), *dp)).backward();
  EXPECT_EQ(dp->stats()[CommOp::AllReduce].bytes, 2 * grad_bytes);
}

TEST(DataParallelMpi, BucketsAreInReverseRegistrationOrder) {
  auto dp = fresh_dp_group("dp-order");
  auto model = trident::testing::mlp_case().make();
  const std::vector<Tensor> params = model->parameters();
  DataParallel ddp(*model, dp, {.bucket_bytes = kSmallBuckets});
  std::vector<const TensorImpl*> order;
  for (const auto& b : ddp.buckets())
    for (const auto& s : b.slots) order.push_back(s.param.impl());
  ASSERT_EQ(order.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) EXPECT_EQ(order[i], params[params.size() - 1 - i].impl()) << i;
}

// DataParallelOptions::reduce_last: those parameters after all the others, from a bucket of
// their own on, each part in reverse registration order; one that is not a parameter is refused.
TEST(DataParallelMpi, ReduceLastParametersAreBucketedAfterTheOthers) {
  auto dp = fresh_dp_group("dp-last");
  auto model = trident::testing::mlp_case().make();
  const std::vector<Tensor> params = model->parameters();
  ASSERT_GE(params.size(), 4u);
  const std::vector<Tensor> last{params[0], params[2]};
  DataParallel ddp(params, dp, {.bucket_bytes = 1 << 20, .reduce_last = last});  // large: one bucket would hold all
  std::vector<const TensorImpl*> order;
  for (const auto& b : ddp.buckets())
    for (const auto& s : b.slots) order.push_back(s.param.impl());
  std::vector<const TensorImpl*> want;
  for (size_t i = params.size(); i-- > 0;)
    if (i != 0 && i != 2) want.push_back(params[i].impl());
  want.push_back(params[2].impl());
  want.push_back(params[0].impl());
  EXPECT_EQ(order, want);
  ASSERT_EQ(ddp.buckets().size(), 2u) << "the others in one bucket, the held ones in a second";
  EXPECT_EQ(ddp.buckets()[1].slots.size(), 2u);
  trident::testing::expect_error(
      [&] { DataParallel bad(params, dp, {.broadcast_from_rank0 = false, .reduce_last = {zeros({3, 4}).set_requires_grad()}}); },
      {"parameter 0 of those to reduce last", "[3, 4]", "is not one of the parameters"});
}

// kMicro micro-batches per step: all but the last backward under no_sync and the last one
// reducing, or every backward under no_sync and DataParallel::reduce() after them (a pipeline
// stage's way, NOTE [Pipeline on GPUs]), or reduce_async() then finish() (NOTE [Overlapped
// pipeline gradients]). Each equals one big batch.
// AsyncHoldLast: reduce_async(hold_last) with two parameters to reduce last, whose gradients are
// still being completed after it (zeroed before, restored after: a bucket filled early would
// reduce the zeros).
enum class GradSync { InLastBackward, After, AsyncAfter, AsyncHoldLast };
static void expect_accumulation_equals_one_big_batch(GradSync how) {
  const bool reduce_after = how != GradSync::InLastBackward;
  constexpr int kMicro = 2;
  for (const ModelCase& c : trident::testing::dp_model_cases()) {
    SCOPED_TRACE(c.name);
    const TrainRun serial = train_serial(c, kSteps, kGlobalBatch, kMicro);
    auto dp = fresh_dp_group("dp-accumulate");
    auto model = c.make();
    std::vector<Tensor> held;
    if (how == GradSync::AsyncHoldLast) held = {model->parameters().front(), model->parameters().back()};
    DataParallel ddp(*model, dp, {.bucket_bytes = kSmallBuckets, .reduce_last = held});
    // The buckets before the first that holds a held parameter; none of them after it.
    int64_t first_held = static_cast<int64_t>(ddp.buckets().size());
    for (size_t b = 0; b < ddp.buckets().size(); ++b) {
      bool holds = false;
      for (const auto& slot : ddp.buckets()[b].slots)
        for (const Tensor& h : held) holds = holds || slot.param.is_same(h);
      if (holds) first_held = std::min(first_held, static_cast<int64_t>(b));
      EXPECT_EQ(holds, static_cast<int64_t>(b) >= first_held) << "bucket " << b;
    }
    if (!held.empty()) {
      EXPECT_GT(first_held, 0);
    }
    auto opt = make_sgd(model->parameters());
    TrainRun r;
    for (int s = 0; s < kSteps; ++s) {
      // The global batch of kMicro * kGlobalBatch rows: each rank takes its share, in kMicro
      // micro-batches; each micro-batch's loss is scaled by 1 / kMicro.
      const DpBatch mine = my_rows(c.batch(s, kGlobalBatch * kMicro), *dp);
      const int64_t per = mine.x.size(0) / kMicro;
      const int64_t calls_before = dp->stats()[CommOp::AllReduce].calls;
      double loss_sum = 0;
      for (int m = 0; m < kMicro; ++m) {
        Tensor loss = div(c.loss(*model, mine.rows(m * per, per)), static_cast<double>(kMicro));
        if (m + 1 < kMicro || reduce_after) {
          auto scope = ddp.no_sync();
          loss.backward();
          EXPECT_EQ(dp->stats()[CommOp::AllReduce].calls, calls_before) << "no communication under no_sync";
        } else {
          loss.backward();
        }
        loss_sum += loss.item<double>();
      }
      if (how == GradSync::After) ddp.reduce();
      if (how == GradSync::AsyncAfter) {
        ddp.reduce_async();
        EXPECT_EQ(dp->stats()[CommOp::AllReduce].calls, calls_before + static_cast<int64_t>(ddp.buckets().size()))
            << "every bucket launched";
        ddp.finish();
      }
      if (how == GradSync::AsyncHoldLast) {
        std::vector<Tensor> kept;
        for (Tensor& p : held) {
          kept.push_back(p.grad().clone());
          fill_(p.grad(), 0.0);
        }
        ddp.reduce_async(/*hold_last=*/true);
        EXPECT_EQ(dp->stats()[CommOp::AllReduce].calls, calls_before + first_held) << "every bucket but the held one";
        for (size_t i = 0; i < held.size(); ++i) copy_(held[i].grad(), kept[i]);
        ddp.finish();
      }
      EXPECT_EQ(dp->stats()[CommOp::AllReduce].calls, calls_before + static_cast<int64_t>(ddp.buckets().size()))
          << "one all-reduce per bucket per step";
      opt->step();
      opt->zero_grad();
      r.losses.push_back(global_loss(*dp, scalar_tensor(loss_sum, kF64)));
    }
    r.params = model->parameters();
    const char* what = how == GradSync::After           ? " reduce()"
                       : how == GradSync::AsyncAfter    ? " reduce_async()"
                       : how == GradSync::AsyncHoldLast ? " reduce_async(hold_last)"
                                                        : " no_sync";
    expect_same_run(r, serial, 1e-5, c.name + what);
  }
}

TEST(DataParallelMpi, NoSyncAccumulationEqualsOneBigBatch) {
  expect_accumulation_equals_one_big_batch(GradSync::InLastBackward);
}

TEST(DataParallelMpi, ReduceAfterBackwardsUnderNoSyncEqualsOneBigBatch) { expect_accumulation_equals_one_big_batch(GradSync::After); }

TEST(DataParallelMpi, ReduceAsyncThenFinishEqualsOneBigBatch) {
  expect_accumulation_equals_one_big_batch(GradSync::AsyncAfter);
}

TEST(DataParallelMpi, ReduceAsyncHoldingTheLastBucketsThenFinishEqualsOneBigBatch) {
  expect_accumulation_equals_one_big_batch(GradSync::AsyncHoldLast);
}

TEST(DataParallelMpi, BackwardWithSyncOnDuringReduceAsyncIsAnError) {
  const ModelCase c = trident::testing::mlp_case();
  auto dp = fresh_dp_group("dp-async");
  auto model = c.make();
  DataParallel ddp(*model, dp, {.bucket_bytes = kSmallBuckets});
  const DpBatch mine = my_rows(c.batch(0, kGlobalBatch), *dp);
  {
    auto scope = ddp.no_sync();
    c.loss(*model, mine).backward();
  }
  ddp.reduce_async();
  // It would add into the buckets in flight (and its hooks would start another round).
  trident::testing::expect_error([&] { c.loss(*model, mine).backward(); }, {"reduce_async()", "call finish() first"});
  ddp.finish();  // still completes, on every rank
  trident::testing::expect_error([&] { ddp.reduce(); ddp.reduce_async(); ddp.reduce_async(); },
                                 {"reduce_async() while a reduction is in progress"});
  ddp.finish();
}

TEST(ZeroMpi, Stage1TrainsLikePlainDataParallel) {
  for (const ModelCase& c : trident::testing::dp_model_cases()) {
    SCOPED_TRACE(c.name);
    auto dp_plain = fresh_dp_group("dp-plain");
    auto plain = c.make();
    DataParallel ddp(*plain, dp_plain, {.bucket_bytes = kSmallBuckets});
    auto opt = make_adamw(plain->parameters());

    auto dp_zero = fresh_dp_group("dp-zero");
    auto sharded = c.make();
    ZeroOptimizer zero(*sharded, dp_zero, adamw_factory(), {.bucket_bytes = kSmallBuckets});
    TrainRun a, b;
    for (int s = 0; s < kSteps; ++s) {
      const DpBatch mine = my_rows(c.batch(s, kGlobalBatch), *dp_plain);
      Tensor la = c.loss(*plain, mine);
      la.backward();
      opt->step();
      opt->zero_grad();
      a.losses.push_back(global_loss(*dp_plain, la));
      Tensor lb = c.loss(*sharded, mine);
      lb.backward();
      zero.step();
      zero.zero_grad();
      b.losses.push_back(global_loss(*dp_zero, lb));
    }
    a.params = plain->parameters();
    b.params = sharded->parameters();
    expect_same_run(b, a, 1e-5, c.name + " ZeRO-1 vs DP");
    // The gathered optimizer state is the unsharded optimizer's.
    const nn::optim::OptimizerState sa = opt->state_dict(), sb = zero.state_dict();
    EXPECT_EQ(sb.optimizer, sa.optimizer);
    ASSERT_EQ(sb.tensors.size(), sa.tensors.size());
    for (const auto& [key, t] : sa.tensors) {
      ASSERT_TRUE(sb.tensors.count(key)) << key;
      EXPECT_TRUE(all_close(sb.tensors.at(key), t, 1e-5, 1e-9)) << key;
    }
  }
}

TEST(ZeroMpi, CheckpointResumesExactlyOnTheSameDpSize) {
  for (const ModelCase& c : trident::testing::dp_model_cases()) {
    SCOPED_TRACE(c.name);
    auto dp = fresh_dp_group("dp-ckpt");
    // One directory for every rank: rank 0's pid names it.
    Tensor pid = scalar_tensor(static_cast<double>(::getpid()), DType::I64);
    dp->broadcast(pid, 0).wait();
    const std::string dir = (std::filesystem::temp_directory_path() /
                             ("trident_zero_ckpt_" + std::to_string(pid.item<int64_t>()))).string();
    auto train = [&](nn::Module& m, ZeroOptimizer& z, int from, int to) {
      for (int s = from; s < to; ++s) {
        c.loss(m, my_rows(c.batch(s, kGlobalBatch), *dp)).backward();
        z.step();
        z.zero_grad();
      }
    };
    auto a = c.make();
    ZeroOptimizer za(*a, dp, adamw_factory(), {.bucket_bytes = kSmallBuckets});
    train(*a, za, 0, 2);
    nn::TrainingCheckpointParts parts_a;
    parts_a.model = a.get();
    nn::TrainingProgress progress;
    progress.step = 2;
    save_training_checkpoint(dir, *dp, parts_a, progress, &za);
    train(*a, za, 2, 4);

    auto b = c.make();  // fresh weights and optimizer: everything must come from the checkpoint
    ZeroOptimizer zb(*b, dp, adamw_factory(), {.bucket_bytes = kSmallBuckets});
    nn::TrainingCheckpointParts parts_b;
    parts_b.model = b.get();
    const nn::TrainingProgress p = load_training_checkpoint(dir, parts_b, &zb);
    EXPECT_EQ(p.step, 2);
    train(*b, zb, 2, 4);
    const auto pa = a->parameters(), pb = b->parameters();
    for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(pa[i].to_vector<float>(), pb[i].to_vector<float>()) << "parameter " << i;
    dp->barrier().wait();
    if (dp->rank() == 0) std::filesystem::remove_all(dir);
  }
}

// NOTE [ZeRO-1 with loss scaling]: ZeRO-1 under a GradScaler against plain data parallelism under
// one, with an inf injected into one element of rank 0's gradient at step 1 (the loss gains
// inf x that element, whose value the recorded loss leaves out). Plain data parallelism's
// all-reduce shows the inf to every rank; ZeRO's reduce-scatter leaves it in one rank's shard
// only, so every other rank sees finite shards and must still skip the step with it: the
// parameters stay as they were on every rank, both scalers back off alike and then grow after
// two clean steps, and the runs stay equal.
TEST(ZeroMpi, LossScalingSkipsAnOverflowOnEveryRankAsPlainDataParallel) {
  constexpr int kOverflowStep = 1, kScaledSteps = 5;
  const nn::GradScalerOptions scaling{.init_scale = 1024.0, .growth_interval = 2};
  // The scale after each step's update(): clean, overflow (halved), clean, clean (grown), clean.
  const std::vector<double> want_scales = {1024, 512, 512, 1024, 1024};
  for (const ModelCase& c : trident::testing::dp_model_cases()) {
    SCOPED_TRACE(c.name);
    auto dp_plain = fresh_dp_group("dp-plain-scaled");
    auto plain = c.make();
    DataParallel ddp(*plain, dp_plain, {.bucket_bytes = kSmallBuckets});
    auto opt = make_adamw(plain->parameters());
    nn::GradScaler scaler_a(scaling);

    auto dp_zero = fresh_dp_group("dp-zero-scaled");
    auto sharded = c.make();
    ZeroOptimizer zero(*sharded, dp_zero, adamw_factory(), {.bucket_bytes = kSmallBuckets});
    nn::GradScaler scaler_b(scaling);

    // The loss to backpropagate (with the injected inf at the overflow step on rank 0) and the
    // loss to record.
    auto losses = [&](nn::Module& m, const DpBatch& mine, int step, const Communicator& dp) {
      Tensor l = c.loss(m, mine);
      Tensor total = l;
      if (step == kOverflowStep && dp.rank() == 0) {
        const Tensor first = narrow(reshape(m.parameters().front(), {-1}), 0, 0, 1);
        total = add(l, sum(mul(first, std::numeric_limits<double>::infinity())));
      }
      return std::pair{total, l};
    };
    TrainRun a, b;
    for (int s = 0; s < kScaledSteps; ++s) {
      const DpBatch mine = my_rows(c.batch(s, kGlobalBatch), *dp_plain);
      auto [ta, la] = losses(*plain, mine, s, *dp_plain);
      scaler_a.scale(ta).backward();
      if (s >= 3) scaler_a.unscale_(*opt);  // the optional early unscale, on both sides
      scaler_a.step(*opt);
      scaler_a.update();
      opt->zero_grad();
      a.losses.push_back(global_loss(*dp_plain, la));

      std::vector<std::vector<float>> before;
      for (const Tensor& p : sharded->parameters()) before.push_back(p.to_vector<float>());
      auto [tb, lb] = losses(*sharded, mine, s, *dp_zero);
      scaler_b.scale(tb).backward();
      if (s >= 3) {
        EXPECT_TRUE(zero.unscale_(scaler_b)) << "step " << s;
      }
      const bool stepped = zero.step(scaler_b);
      EXPECT_EQ(stepped, s != kOverflowStep) << "step " << s << " on rank " << dp_zero->rank();
      EXPECT_EQ(scaler_b.last_step_skipped(), s == kOverflowStep) << "step " << s;
      EXPECT_EQ(scaler_a.last_step_skipped(), s == kOverflowStep) << "step " << s;
      scaler_b.update();
      zero.zero_grad();
      b.losses.push_back(global_loss(*dp_zero, lb));
      EXPECT_EQ(scaler_a.get_scale(), want_scales[static_cast<size_t>(s)]) << "step " << s;
      EXPECT_EQ(scaler_b.get_scale(), want_scales[static_cast<size_t>(s)]) << "step " << s;
      if (s == kOverflowStep) {
        const auto params = sharded->parameters();
        for (size_t i = 0; i < params.size(); ++i)
          EXPECT_EQ(params[i].to_vector<float>(), before[i]) << "parameter " << i << " changed in the skipped step";
      }
    }
    a.params = plain->parameters();
    b.params = sharded->parameters();
    expect_same_run(b, a, 1e-5, c.name + " ZeRO-1 vs DP under loss scaling");
  }
}

// NOTE [ZeRO-1 layout]: what a rank holds after a step (before zero_grad) besides the model, P being the parameter
// bytes: plain data parallelism its gradient buckets (.grad are views of them) and AdamW's two
// moments, 3P; ZeRO-1 its gradient buckets (.grad are views of them too) and 1/dp of the moments,
// (1 + 2/dp) P, plus the buckets' padding. A second copy of the gradients would add P.
TEST(ZeroMpi, HoldsOneGradientBufferAndItsShareOfTheOptimizerState) {
  const ModelCase c = trident::testing::gpt2_case();
  const Device cpu = Device::cpu();
  auto state_bytes = [&](bool sharded) {
    auto dp = fresh_dp_group(sharded ? "dp-zero-memory" : "dp-plain-memory");
    const int64_t before = memory_stats(cpu).current_bytes;
    auto model = c.make();
    int64_t param_bytes = 0;
    for (const Tensor& p : model->parameters()) param_bytes += static_cast<int64_t>(p.nbytes());
    const int64_t with_model = memory_stats(cpu).current_bytes;
    EXPECT_GE(with_model - before, param_bytes);
    int64_t held = 0;
    auto train_step = [&](auto&& step, auto&& zero_grad) {
      for (int s = 0; s < 2; ++s) {
        c.loss(*model, my_rows(c.batch(s, kGlobalBatch), *dp)).backward();
        step();
        held = memory_stats(cpu).current_bytes - with_model;  // the gradients still there
        zero_grad();
      }
    };
    if (sharded) {
      ZeroOptimizer zero(*model, dp, adamw_factory(), {.bucket_bytes = kSmallBuckets});
      train_step([&] { zero.step(); }, [&] { zero.zero_grad(); });
    } else {
      DataParallel ddp(*model, dp, {.bucket_bytes = kSmallBuckets});
      auto opt = make_adamw(model->parameters());
      train_step([&] { opt->step(); }, [&] { opt->zero_grad(false); });
    }
    return std::pair{held, param_bytes};
  };
  const auto [plain, p] = state_bytes(false);
  const auto [sharded, p2] = state_bytes(true);
  ASSERT_EQ(p, p2);
  const double dp = Communicator::world()->size();
  const double slack = 0.01 * static_cast<double>(p) + 4096;  // padding to dp elements per bucket, scalars
  EXPECT_NEAR(static_cast<double>(plain), 3.0 * static_cast<double>(p), slack) << "plain data parallelism, P = " << p;
  EXPECT_NEAR(static_cast<double>(sharded), (1.0 + 2.0 / dp) * static_cast<double>(p), slack) << "ZeRO-1, P = " << p;
}

// NOTE [ZeRO-1 checkpoints]: saving gathers the optimizer state on the writing rank (dp rank 0)
// alone; the others send their shards and never hold the whole state (AdamW's two moments, 2P
// bytes). Their peak while saving stays below half of it; the writer's reaches it. And
// state_dict_to(0) on the writer equals state_dict(). Loading it back, no rank holds more than
// twice its share of the state (the shard optimizer copies what it is given) and a bucket.
TEST(ZeroMpi, CheckpointGathersTheStateOnTheWritingRankOnly) {
  const ModelCase c = trident::testing::gpt2_case();
  auto dp = fresh_dp_group("dp-ckpt-memory");
  Tensor pid = scalar_tensor(static_cast<double>(::getpid()), DType::I64);
  dp->broadcast(pid, 0).wait();
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("trident_zero_gather_" + std::to_string(pid.item<int64_t>()))).string();
  auto model = c.make();
  ZeroOptimizer zero(*model, dp, adamw_factory(), {.bucket_bytes = kSmallBuckets});
  c.loss(*model, my_rows(c.batch(0, kGlobalBatch), *dp)).backward();
  zero.step();
  zero.zero_grad();
  int64_t state_bytes = 0;  // the unsharded moments
  for (const Tensor& p : model->parameters()) state_bytes += 2 * static_cast<int64_t>(p.nbytes());

  const Device cpu = Device::cpu();
  reset_peak_memory_stats(cpu);
  const int64_t before = memory_stats(cpu).current_bytes;
  std::optional<nn::optim::OptimizerState> gathered = zero.state_dict_to(0);
  const int64_t peak = memory_stats(cpu).peak_bytes - before;
  if (dp->rank() == 0) {
    ASSERT_TRUE(gathered.has_value());
    EXPECT_GE(peak, state_bytes);
  } else {
    EXPECT_FALSE(gathered.has_value());
    EXPECT_LT(peak, state_bytes / 2) << "rank " << dp->rank() << " held the gathered state";
  }
  const nn::optim::OptimizerState everywhere = zero.state_dict();  // all-gathered on every rank
  if (dp->rank() == 0) {
    ASSERT_EQ(gathered->tensors.size(), everywhere.tensors.size());
    for (const auto& [key, t] : everywhere.tensors) EXPECT_EQ(gathered->tensors.at(key).to_vector<float>(), t.to_vector<float>()) << key;
    EXPECT_EQ(gathered->scalars, everywhere.scalars);
  }
  gathered.reset();

  nn::TrainingCheckpointParts parts;
  parts.model = model.get();
  reset_peak_memory_stats(cpu);
  const int64_t before_save = memory_stats(cpu).current_bytes;
  save_training_checkpoint(dir, *dp, parts, nn::TrainingProgress{}, &zero);
  const int64_t save_peak = memory_stats(cpu).peak_bytes - before_save;
  if (dp->rank() != 0) {
    EXPECT_LT(save_peak, state_bytes / 2) << "rank " << dp->rank() << " held the state while saving";
  }
  // Loading: every rank maps the file and keeps its shards, one bucket at a time; the state it
  // ends with is its share of the moments, never the whole.
  auto fresh = c.make();
  ZeroOptimizer loaded(*fresh, dp, adamw_factory(), {.bucket_bytes = kSmallBuckets});
  reset_peak_memory_stats(cpu);
  const int64_t before_load = memory_stats(cpu).current_bytes;
  nn::TrainingCheckpointParts into;
  into.model = fresh.get();
  load_training_checkpoint(dir, into, &loaded);
  // Its shard of the moments, twice at most (the shard optimizer's load_state_dict copies the
  // state it is given), plus a bucket.
  const int64_t share = state_bytes / dp->size();
  EXPECT_LE(memory_stats(cpu).peak_bytes - before_load, 2 * share + 4096) << "rank " << dp->rank() << " while loading";
  const nn::optim::OptimizerState a = zero.state_dict(), b = loaded.state_dict();
  for (const auto& [key, t] : a.tensors) EXPECT_EQ(b.tensors.at(key).to_vector<float>(), t.to_vector<float>()) << key;
  dp->barrier().wait();
  if (dp->rank() == 0) std::filesystem::remove_all(dir);
}

// A state that does not fit the parameters is refused before anything changes, as the unsharded
// optimizer refuses it: another group count, another parameter count, an entry of a parameter
// that does not exist, a moment of another shape, a buffer the optimizer does not have.
TEST(ZeroMpi, LoadStateDictRefusesAStateOfOtherParameters) {
  const ModelCase c = trident::testing::mlp_case();
  auto dp = fresh_dp_group("dp-load-checks");
  auto m = c.make();
  ZeroOptimizer z(*m, dp, adamw_factory());
  c.loss(*m, my_rows(c.batch(0, kGlobalBatch), *dp)).backward();
  z.step();
  const nn::optim::OptimizerState good = z.state_dict();
  const size_t n = m->parameters().size();
  auto refused = [&](const std::string& what, const std::function<void(nn::optim::OptimizerState&)>& spoil,
                     const std::vector<std::string>& words) {
    SCOPED_TRACE(what);
    nn::optim::OptimizerState bad = good;
    for (auto& [k, t] : bad.tensors) t = t.clone();
    spoil(bad);
    const nn::optim::OptimizerState before = z.shard_optimizer().state_dict();
    trident::testing::expect_error([&] { z.load_state_dict(bad); }, words);
    const nn::optim::OptimizerState after = z.shard_optimizer().state_dict();
    EXPECT_EQ(after.scalars, before.scalars);
    for (const auto& [k, t] : before.tensors) EXPECT_EQ(after.tensors.at(k).to_vector<float>(), t.to_vector<float>()) << k;
  };
  refused("groups", [](auto& s) { s.scalars["num_groups"] = 2; }, {"2 parameter groups"});
  refused("parameters", [](auto& s) { s.scalars["group.0.num_params"] += 1; }, {"parameters"});
  refused("a parameter that does not exist", [&](auto& s) { s.scalars["state." + std::to_string(n) + ".step"] = 1; },
          {"state." + std::to_string(n) + ".step", "names no parameter"});
  refused("shape", [](auto& s) { s.tensors["state.0.exp_avg"] = zeros({3}); }, {"state.0.exp_avg", "its parameter"});
  refused("buffer", [](auto& s) { s.tensors["state.0.momentum_buffer"] = zeros({1}); }, {"unexpected tensor", "momentum_buffer"});
  z.load_state_dict(good);  // and the good state still loads
}

TEST(ZeroMpi, StepWithoutASynchronizedBackwardIsAnError) {
  const ModelCase c = trident::testing::mlp_case();
  auto dp = fresh_dp_group("dp-nosync-step");
  auto m = c.make();
  ZeroOptimizer z(*m, dp, adamw_factory());
  {
    auto scope = z.no_sync();
    c.loss(*m, my_rows(c.batch(0, kGlobalBatch), *dp)).backward();
  }
  trident::testing::expect_error([&] { z.step(); }, {"no synchronized backward"});
}

TEST(LaunchMpi, MeshAndBatchRowsOfTheLaunch) {
  const int n = Communicator::world()->size();
  Mesh mesh = launch_mesh({.dp = n, .pp = 1, .tp = 1});
  Communicator& dp = mesh.group(Axis::DP);
  EXPECT_EQ(dp.size(), n);
  EXPECT_EQ(dp_batch_rows(4 * n, dp), (std::pair<int64_t, int64_t>{4 * dp.rank(), 4}));
  trident::testing::expect_error([&] { dp_batch_rows(4 * n + 1, dp); }, {"does not split evenly", std::to_string(n)});
  trident::testing::expect_error([&] { launch_mesh({.dp = 2 * n, .pp = 1, .tp = 1}); },
                                 {"mpirun started " + std::to_string(n) + " ranks", "is " + std::to_string(2 * n)});
}
