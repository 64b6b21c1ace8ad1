// The op profiler (NOTE [Op profiler] in core/profiler.h) on the CPU: kernel entry points are
// counted and timed between start() and stop() only, an op inside another counts as part of it,
// threads add up, and misuse is an error.
#include "core/profiler.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "test_util.h"
#include "trident.h"

using namespace trident;

namespace {

const profiler::OpTime* find(const profiler::Report& r, const std::string& name) {
  for (const profiler::OpTime& o : r.ops)
    if (o.name == name) return &o;
  return nullptr;
}

TEST(Profiler, CountsAndTimesKernelCallsBetweenStartAndStop) {
  const Tensor a = randn({64, 64}), b = randn({64, 64});
  (void)matmul(a, b);  // before the profile: not counted
  profiler::start();
  EXPECT_TRUE(profiler::active());
  for (int i = 0; i < 3; ++i) (void)matmul(a, b);
  for (int i = 0; i < 2; ++i) (void)add(a, b);
  const profiler::Report r = profiler::stop();
  EXPECT_FALSE(profiler::active());
  (void)matmul(a, b);  // after: not counted either
  const profiler::OpTime* mm = find(r, "matmul");
  const profiler::OpTime* add_op = find(r, "binary");
  ASSERT_NE(mm, nullptr) << r.table();
  ASSERT_NE(add_op, nullptr) << r.table();
  EXPECT_EQ(mm->calls, 3);
  EXPECT_EQ(add_op->calls, 2);
  EXPECT_FALSE(mm->cuda);
  EXPECT_GT(mm->ms, 0.0);
  for (size_t i = 1; i < r.ops.size(); ++i) EXPECT_GE(r.ops[i - 1].ms, r.ops[i].ms) << "largest first";
  EXPECT_GE(r.wall_ms, r.total_ms()) << "one thread's ops fit in the profile's wall time";
  const std::string t = r.table();
  EXPECT_NE(t.find("matmul"), std::string::npos) << t;
  EXPECT_NE(t.find("total"), std::string::npos) << t;
  // A table cut to one row sums the rest.
  EXPECT_NE(r.table(1).find("more ops"), std::string::npos) << r.table(1);
}

TEST(Profiler, AnOpInsideAnotherCountsAsPartOfIt) {
  profiler::start();
  {
    profiler::Scope outer("outer");
    profiler::Scope inner("inner");
    (void)matmul(ones({8, 8}), ones({8, 8}));
  }
  const profiler::Report r = profiler::stop();
  ASSERT_EQ(r.ops.size(), 1u) << r.table();
  EXPECT_EQ(r.ops[0].name, "outer");
  EXPECT_EQ(r.ops[0].calls, 1);
}

TEST(Profiler, ThreadsAddUpAndAScopeOpenAcrossProfilesCountsInNeither) {
  profiler::start();
  std::thread t([] { profiler::Scope s("work"); });
  { profiler::Scope s("work"); }
  t.join();
  {
    profiler::Scope open("straddles");
    const profiler::Report r = profiler::stop();
    ASSERT_NE(find(r, "work"), nullptr) << r.table();
    EXPECT_EQ(find(r, "work")->calls, 2);
    profiler::start();
  }
  const profiler::Report second = profiler::stop();
  EXPECT_EQ(find(second, "straddles"), nullptr) << second.table();
}

TEST(Profiler, StartingTwiceOrStoppingWithoutAProfileIsAnError) {
  trident::testing::expect_error([] { (void)profiler::stop(); }, {"no profile is running"});
  profiler::start();
  trident::testing::expect_error([] { profiler::start(); }, {"already running"});
  (void)profiler::stop();
}

}  // namespace
