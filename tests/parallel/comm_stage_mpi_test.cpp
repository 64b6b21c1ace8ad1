// NOTE [Host staging] without a GPU: with the testing hook on, the MPI backend gets CPU tensors
// through separate host buffers exactly as it gets CUDA tensors through pinned ones (the same
// code in the base Communicator; only the allocation and the copies differ). Run by ctest under
// mpirun -np 2 and -np 4; the checks (staged_collectives.h) compute their expected values
// themselves.
#include <gtest/gtest.h>

#include "parallel/staged_collectives.h"
#include "test_util.h"

using namespace trident;
using namespace trident::parallel::comm;
using namespace trident::testing::staging;

namespace {

std::shared_ptr<Communicator> world() { return Communicator::world(); }

// Turns the testing hook on for one test, restoring what it was after.
class CommStage : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = host_staging_test_mode();
    set_host_staging_test_mode(true);
  }
  void TearDown() override { set_host_staging_test_mode(previous_); }

 private:
  bool previous_ = false;
};

}  // namespace

TEST_F(CommStage, EveryOperationInEveryLayout) {
  ASSERT_EQ(world()->backend(), Backend::MPI);
  run_all_layouts(*world(), kCPU, {kF32, kBF16, kI64});
}

TEST_F(CommStage, EveryOperationOnASplitGroup) {
  // Pairs of ranks (0, 1), (2, 3): group ranks differ from world ranks on the second pair.
  auto w = world();
  auto pair = w->split(w->rank() / 2, w->rank(), "pair");
  run_all_layouts(*pair, kCPU, {kF32, kI64});
}

TEST_F(CommStage, InPlaceAndOverlappingBuffers) {
  for (DType d : {kF32, kBF16, kI64}) run_in_place(*world(), kCPU, d);
}

TEST_F(CommStage, OutputsAreWrittenOnlyOnCompletion) { run_written_on_completion(*world(), kCPU); }

TEST_F(CommStage, CountersCountTheUsersBytes) {
  auto c = world()->split(0, world()->rank(), "counted");
  const int n = c->size();
  Laid a = make(Layout::Strided, 3, 5, kBF16, kCPU, [](int64_t) { return 1.0; });
  Laid g = filled(Layout::Transposed, 2 * n, 3, kF32, kCPU, 0);
  Laid s = make(Layout::Contiguous, 2, 3, kF32, kCPU, [](int64_t) { return 1.0; });
  c->all_reduce(a.t).wait();
  c->all_gather(g.t, s.t).wait();
  c->reduce_scatter(s.t, g.t).wait();
  c->broadcast(a.t, 0).wait();
  const CommStats& st = c->stats();
  EXPECT_EQ(st[CommOp::AllReduce].bytes, 15 * 2) << "the bf16 payload";
  EXPECT_EQ(st[CommOp::AllGather].bytes, 6 * n * 4) << "the gathered output";
  EXPECT_EQ(st[CommOp::ReduceScatter].bytes, 6 * n * 4) << "the unreduced input";
  EXPECT_EQ(st[CommOp::Broadcast].bytes, 15 * 2);
  EXPECT_EQ(st.total_calls(), 4);
}

TEST_F(CommStage, BadArgumentsStillFailBeforeCommunicating) {
  auto c = world();
  trident::testing::expect_error([&] { c->all_reduce(zeros({2}, kI64), ReduceOp::Average); }, {"average", "i64"});
  trident::testing::expect_error([&] { c->all_gather(zeros({3}), zeros({2})); }, {"all_gather", "elements"});
  c->barrier().wait();
}

// The same checks with the hook off (the user's contiguous tensors go to MPI directly): the
// expectations hold on both paths.
TEST(CommStageOff, TheSameChecksPassWithoutStaging) {
  const bool previous = host_staging_test_mode();
  set_host_staging_test_mode(false);
  run_all_layouts(*world(), kCPU, {kF32, kI64});
  run_in_place(*world(), kCPU, kF64);
  set_host_staging_test_mode(previous);
}
