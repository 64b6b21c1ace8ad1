// The single-process parts of the pipeline: partitions, schedules, the timeline's arithmetic,
// and a pipeline of one stage (a world of one), which must be serial training itself.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "parallel/pipeline/pipeline.h"
#include "pipeline_models.h"
#include "test_util.h"

using namespace trident;
using namespace trident::parallel::pipeline;
using trident::testing::expect_error;

TEST(PipelinePartition, MinimizesTheLargestStage) {
  // Hand-checked: {1,2,3,4,5} in 2 -> {1,2,3 | 4,5} (6 vs 9) or {1,2,3,4 | 5} (10 vs 5): 9 wins.
  EXPECT_EQ(balance_by_costs({1, 2, 3, 4, 5}, 2), (Balance{3, 2}));
  EXPECT_EQ(balance_by_costs({1, 1, 1, 1}, 4), (Balance{1, 1, 1, 1}));
  EXPECT_EQ(balance_by_costs({10, 1, 1, 1, 1, 10}, 3), (Balance{1, 4, 1}));
  EXPECT_EQ(balance_by_costs({5}, 1), (Balance{1}));
  EXPECT_EQ(stage_ranges({2, 3, 1}), (std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {2, 5}, {5, 6}}));
}

TEST(PipelinePartition, BadBalancesAreErrors) {
  expect_error([] { balance_by_costs({1, 2}, 3); }, {"3 stages", "only 2 layers"});
  expect_error([] { check_balance({2, 3}, 6); }, {"the balance {2, 3} sums to 5", "the model has 6 layers"});
  expect_error([] { check_balance({3, 0, 3}, 6); }, {"stage 1", "{3, 0, 3}", "has 0 layers"});
  expect_error([] { check_balance({1, 1, 1}, 2); }, {"3 stages", "only 2 layers"});
  expect_error([] { check_balance({}, 2); }, {"empty"});
}

TEST(PipelinePartition, RankLayerRangesOfAnInterleavedBalance) {
  // {1, 2, 3, 4}: virtual stages [0, 1), [1, 3), [3, 6), [6, 10); two chunks per rank: rank 0
  // holds virtual stages 0 and 2, rank 1 stages 1 and 3.
  using R = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(rank_layer_ranges({1, 2, 3, 4}, 0, 2), (R{{0, 1}, {3, 6}}));
  EXPECT_EQ(rank_layer_ranges({1, 2, 3, 4}, 1, 2), (R{{1, 3}, {6, 10}}));
  EXPECT_EQ(rank_layer_ranges({1, 2, 3, 4}, 2), (R{{3, 6}}));
  expect_error([] { rank_layer_ranges({1, 2, 3, 4}, 0, 3); }, {"4 stages is not 3 chunks per stage"});
  expect_error([] { rank_layer_ranges({1, 2, 3, 4}, 2, 2); }, {"stage 2 of 2"});
}

TEST(PipelineSchedule, GPipeRunsEveryForwardThenEveryBackwardReversed) {
  EXPECT_EQ(actions_str(schedule_actions(Schedule::GPipe, 0, 2, 3)), "F0 F1 F2 B2 B1 B0");
}

TEST(PipelineSchedule, OneFOneBWarmsUpThenAlternates) {
  // K = 4, M = 6: stage s warms up with 3 - s forwards.
  EXPECT_EQ(actions_str(schedule_actions(Schedule::OneFOneB, 0, 4, 6)), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(actions_str(schedule_actions(Schedule::OneFOneB, 2, 4, 6)), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  EXPECT_EQ(actions_str(schedule_actions(Schedule::OneFOneB, 3, 4, 6)), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  // Fewer micro-batches than stages: all forwards, then the backwards in order.
  EXPECT_EQ(actions_str(schedule_actions(Schedule::OneFOneB, 0, 4, 2)), "F0 F1 B0 B1");
}

TEST(PipelineSchedule, OneFOneBKeepsAtMostKMinusStageInFlight) {
  for (int64_t K : {2, 4})
    for (int64_t s = 0; s < K; ++s)
      for (int64_t M : {1, 3, 8}) {
        int64_t in_flight = 0, most = 0;
        std::set<int64_t> fwd, bwd;
        for (const Action& a : schedule_actions(Schedule::OneFOneB, s, K, M)) {
          if (a.kind == Action::Kind::Forward) {
            fwd.insert(a.micro_batch);
            most = std::max(most, ++in_flight);
          } else {
            EXPECT_TRUE(fwd.count(a.micro_batch)) << "backward before forward";
            bwd.insert(a.micro_batch);
            --in_flight;
          }
        }
        EXPECT_EQ(static_cast<int64_t>(fwd.size()), M);
        EXPECT_EQ(static_cast<int64_t>(bwd.size()), M);
        EXPECT_LE(most, std::min(K - s, M)) << "K " << K << " stage " << s << " M " << M;
      }
}

TEST(PipelineSchedule, InterleavedTakesMicroBatchesInGroupsOfKThroughEachChunk) {
  // K = 2, V = 2, M = 4 (NOTE [Interleaved schedule]), by hand: forwards in the order
  // m0.c0 m1.c0 m0.c1 m1.c1 m2.c0 m3.c0 m2.c1 m3.c1, backwards with the chunks reversed. Rank 0
  // warms up with 2 (K - 1) + (V - 1) K = 4 forwards, rank 1 (the last virtual stage's) with 2.
  EXPECT_EQ(actions_str(schedule_actions(Schedule::OneFOneB, 0, 2, 4, 2)),
            "F0 F1 F0.1 F1.1 F2 B0.1 F3 B1.1 F2.1 B0 F3.1 B1 B2.1 B3.1 B2 B3");
  EXPECT_EQ(actions_str(schedule_actions(Schedule::OneFOneB, 1, 2, 4, 2)),
            "F0 F1 F0.1 B0.1 F1.1 B1.1 F2 B0 F3 B1 F2.1 B2.1 F3.1 B3.1 B2 B3");
  EXPECT_EQ(actions_str(schedule_actions(Schedule::GPipe, 0, 2, 2, 2)), "F0 F1 F0.1 F1.1 B0.1 B1.1 B0 B1");
  expect_error([] { schedule_actions(Schedule::OneFOneB, 0, 2, 3, 2); }, {"3 is not a multiple of 2"});
  expect_error([] { schedule_actions(Schedule::OneFOneB, 0, 1, 4, 2); }, {"at least two stages"});
  expect_error([] { schedule_actions(Schedule::GPipe, 0, 2, 4, 0); }, {"0 chunks"});
}

namespace {

// Runs every rank's schedule as the pipeline does, with times: a forward of virtual stage vs
// (rank vs mod K, chunk vs / K) starts once vs - 1's forward of that micro-batch has ended, a
// backward once vs + 1's backward has (and the loss's own forward, on the last virtual stage);
// sends never block; every forward and backward takes 1 / V (a stage's work cut into V chunks).
// Also checks that each rank's sends to another rank are received there in the same order, per
// direction (NOTE [Interleaved schedule]). Fails the test on a deadlock.
PipelineTrace simulate(Schedule schedule, int64_t K, int64_t M, int64_t V) {
  using Key = std::pair<int64_t, int64_t>;  // (virtual stage, micro-batch)
  std::vector<std::vector<Action>> plan;
  for (int64_t r = 0; r < K; ++r) plan.push_back(schedule_actions(schedule, r, K, M, V));
  // Messages per (from, to, direction), in the sender's and in the receiver's order.
  std::map<std::tuple<int64_t, int64_t, bool>, std::vector<Key>> sent, received;
  for (int64_t r = 0; r < K; ++r)
    for (const Action& a : plan[static_cast<size_t>(r)]) {
      const int64_t vs = a.chunk * K + r;
      const bool fwd = a.kind == Action::Kind::Forward;
      const int64_t to = fwd ? vs + 1 : vs - 1, from = fwd ? vs - 1 : vs + 1;
      if (to >= 0 && to < K * V) sent[{r, to % K, fwd}].push_back({to, a.micro_batch});
      if (from >= 0 && from < K * V) received[{from % K, r, fwd}].push_back({vs, a.micro_batch});
    }
  EXPECT_EQ(sent, received) << "the transfers between two ranks match in order";
  std::map<Key, double> fwd_end, bwd_end;
  std::vector<size_t> next(static_cast<size_t>(K), 0);
  std::vector<double> free_at(static_cast<size_t>(K), 0.0);
  PipelineTrace trace;
  trace.micro_batches = M;
  trace.stages.resize(static_cast<size_t>(K));
  const double t = 1.0 / static_cast<double>(V);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t r = 0; r < K; ++r) {
      const auto ri = static_cast<size_t>(r);
      while (next[ri] < plan[ri].size()) {
        const Action& a = plan[ri][next[ri]];
        const int64_t vs = a.chunk * K + r;
        double ready = free_at[ri];
        if (a.kind == Action::Kind::Forward) {
          if (vs > 0) {
            const auto it = fwd_end.find({vs - 1, a.micro_batch});
            if (it == fwd_end.end()) break;
            ready = std::max(ready, it->second);
          }
        } else {
          const auto own = fwd_end.find({vs, a.micro_batch});
          EXPECT_NE(own, fwd_end.end()) << "a backward before its forward on rank " << r;
          if (vs + 1 < K * V) {
            const auto it = bwd_end.find({vs + 1, a.micro_batch});
            if (it == bwd_end.end()) break;
            ready = std::max(ready, it->second);
          }
        }
        const bool fwd = a.kind == Action::Kind::Forward;
        (fwd ? fwd_end : bwd_end)[{vs, a.micro_batch}] = ready + t;
        trace.stages[ri].push_back({fwd ? EventKind::Forward : EventKind::Backward, a.micro_batch, ready, ready + t, a.chunk});
        free_at[ri] = ready + t;
        ++next[ri];
        progress = true;
      }
    }
  }
  for (int64_t r = 0; r < K; ++r)
    EXPECT_EQ(next[static_cast<size_t>(r)], plan[static_cast<size_t>(r)].size()) << "deadlock: rank " << r << " stuck";
  EXPECT_EQ(static_cast<int64_t>(fwd_end.size()), K * V * M);
  EXPECT_EQ(static_cast<int64_t>(bwd_end.size()), K * V * M);
  return trace;
}

}  // namespace

TEST(PipelineSchedule, EveryScheduleRunsWithoutDeadlockAndInterleavingShrinksTheBubbleByV) {
  for (const Schedule schedule : {Schedule::GPipe, Schedule::OneFOneB})
    for (int64_t K : {2, 3, 4})
      for (int64_t V : {1, 2, 3})
        for (int64_t groups : {1, 2, 3}) {
          const int64_t M = groups * K;
          SCOPED_TRACE(std::string(schedule_name(schedule)) + " K " + std::to_string(K) + " V " + std::to_string(V) + " M " +
                       std::to_string(M));
          const PipelineTrace trace = simulate(schedule, K, M, V);
          // Equal forward and backward times, free transfers: the theory's bubble.
          EXPECT_NEAR(trace.bubble_fraction(), theoretical_bubble(K, M, V), 1e-12);
        }
  EXPECT_DOUBLE_EQ(theoretical_bubble(4, 8, 2), 3.0 / 19.0);  // (K - 1) / (V M + K - 1)
}

TEST(PipelineSchedule, NamesParse) {
  EXPECT_EQ(parse_schedule("1f1b"), Schedule::OneFOneB);
  EXPECT_EQ(parse_remat("except_last"), Remat::ExceptLast);
  expect_error([] { parse_schedule("zb"); }, {"unknown pipeline schedule 'zb'", "gpipe or 1f1b"});
  expect_error([] { parse_remat("some"); }, {"'some'", "always, except_last or never"});
}

TEST(PipelineTimeline, BubbleOfAnIdealGPipeStepIsTheTheory) {
  // K = 2, M = 3, every forward and backward 1 s: stage 0 F0..F2 at 0..3, stage 1 F at 1..4, B
  // at 4..7, stage 0 B at 5..8: span 8, busy 12 of 16 -> bubble 1/4 = (K-1)/(M+K-1).
  PipelineTrace t;
  t.micro_batches = 3;
  t.stages.resize(2);
  for (int m = 0; m < 3; ++m) {
    t.stages[0].push_back({EventKind::Forward, m, double(m), double(m + 1)});
    t.stages[1].push_back({EventKind::Forward, m, double(m + 1), double(m + 2)});
    t.stages[1].push_back({EventKind::Backward, 2 - m, double(4 + m), double(5 + m)});
    t.stages[0].push_back({EventKind::Backward, 2 - m, double(5 + m), double(6 + m)});
    t.stages[1].push_back({EventKind::Recv, m, double(m), double(m + 1)});  // waiting is not work
  }
  EXPECT_DOUBLE_EQ(t.span(), 8.0);
  EXPECT_DOUBLE_EQ(t.bubble_fraction(), 0.25);
  EXPECT_DOUBLE_EQ(theoretical_bubble(2, 3), 0.25);
  const std::string json = t.chrome_json();
  EXPECT_NE(json.find("\"name\": \"backward 2\", \"cat\": \"backward\", \"ph\": \"X\", \"pid\": 0, \"tid\": 1, "
                      "\"ts\": 4000000.000, \"dur\": 1000000.000"),
            std::string::npos)
      << json;
  const std::string png = (std::filesystem::temp_directory_path() / "trident_pipeline_gantt_test.png").string();
  if (t.write_gantt_png(png)) {
    EXPECT_GT(std::filesystem::file_size(png), 1000u);
    std::filesystem::remove(png);
  }
}

TEST(PipelineLocal, OneStageIsSerialTraining) {
  auto model = trident::testing::make_pipeline_model("gpt2");
  auto serial = trident::testing::make_pipeline_model("gpt2");
  const models::Batch batch = trident::testing::make_pipeline_batch("gpt2", 8, 8, 7);
  Tensor want = serial->loss(serial->layers().run(batch), batch);
  want.backward();
  Pipeline pipe(*model, parallel::comm::Communicator::world(), {.micro_batches = 4, .remat = Remat::Always});
  EXPECT_EQ(pipe.balance(), (Balance{6}));
  EXPECT_NEAR(pipe.step(batch), want.item<double>(), 1e-5 * want.item<double>());
  const auto s = serial->named_parameters();
  const auto& p = pipe.named_parameters();
  ASSERT_EQ(p.size(), s.size());
  for (size_t i = 0; i < p.size(); ++i)
    EXPECT_TRUE(trident::testing::all_close(p[i].second.grad(), s[i].second.grad(), 1e-5, 1e-7)) << p[i].first;
}
