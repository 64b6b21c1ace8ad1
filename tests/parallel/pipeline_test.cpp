// The single-process parts of the pipeline: partitions, schedules, the timeline's arithmetic,
// and a pipeline of one stage (a world of one), which must be serial training itself.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

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
