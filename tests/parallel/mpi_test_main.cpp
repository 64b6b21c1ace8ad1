// main() of the test programs that ctest runs under mpirun (tests/CMakeLists.txt,
// trident_mpi_test): every rank runs every test; rank 0 prints GoogleTest's usual report and the
// other ranks print only their failures, prefixed with their rank. A rank whose test fails exits
// non-zero, which fails the whole mpirun. A test that fails on one rank only and leaves the
// others waiting in a collective ends at the communication timeout (TRIDENT_COMM_TIMEOUT, set
// short by ctest), not in a hang.
#include <gtest/gtest.h>

#include <cstdio>

#include "parallel/comm/communicator.h"

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                 r.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const auto world = trident::parallel::comm::Communicator::world();
  if (world->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(world->rank()));
  }
  return RUN_ALL_TESTS();
}
