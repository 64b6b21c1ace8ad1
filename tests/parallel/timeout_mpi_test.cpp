// A rank that skips a collective: the others must fail with the timeout error (naming the
// operation, the group, their rank and the bytes) within the short timeout set here, and the job
// must end instead of hanging (NOTE [Ending after a timeout]). Not GoogleTest: the job ends with
// MPI_Abort by design, so ctest judges this program by its output and by how long it ran
// (run_timeout_test.sh), not by its exit code.
#include <chrono>
#include <cstdio>
#include <string>

#include "core/factory.h"
#include "parallel/comm/communicator.h"

using namespace trident;
using namespace trident::parallel::comm;

namespace {
int fail(int rank, const std::string& why) {
  std::printf("TIMEOUT-TEST rank %d: FAILED: %s\n", rank, why.c_str());
  std::fflush(stdout);
  return 1;
}
}  // namespace

int main() {
  auto world = Communicator::world();
  const int rank = world->rank(), n = world->size();
  if (n < 2) return fail(rank, "needs at least 2 ranks");
  // The ranks that will time out, in a healthy group of their own: they report together before
  // any of them exits, since the first exit ends the job (MPI_Abort) and could swallow another
  // rank's report.
  auto reporters = world->split(rank == n - 1 ? 1 : 0, rank, "reporters");
  reporters->set_timeout(Seconds(10.0));
  world->set_timeout(Seconds(1.0));
  Tensor t = full({1024}, 1.0, DType::F32);
  world->all_reduce(t).wait();  // a healthy collective first
  if (rank == n - 1) {
    // Skips the next collective and goes to exit (where MPI_Finalize waits for the others, until
    // a timed-out rank ends the job).
    std::printf("TIMEOUT-TEST rank %d: skipping the all_reduce\n", rank);
    std::fflush(stdout);
    return 0;
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    world->all_reduce(t).wait();
    return fail(rank, "the all_reduce completed without the last rank");
  } catch (const CommTimeout& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string m = e.message();
    const std::string where = "rank " + std::to_string(rank) + " of " + std::to_string(n);
    for (const std::string& part : {std::string("all_reduce"), std::string("4096 bytes"), std::string("group 'world'"),
                                    where, std::string("timed out after 1 s")}) {
      if (m.find(part) == std::string::npos) return fail(rank, "\"" + part + "\" missing in: " + m);
    }
    if (s < 0.9 || s > 10.0) return fail(rank, "timed out after " + std::to_string(s) + " s, not about 1 s");
    try {
      world->barrier();
      return fail(rank, "the aborted communicator accepted another operation");
    } catch (const Error& e2) {
      if (e2.message().find("aborted") == std::string::npos) return fail(rank, "unexpected error: " + e2.message());
    }
    reporters->barrier().wait();
    std::printf("TIMEOUT-TEST rank %d: ok, timed out after %.2f s: %s\n", rank, s, m.c_str());
    std::fflush(stdout);
    reporters->barrier().wait();
  }
  return 0;  // the exit handler ends the job with MPI_Abort (a timeout was seen)
}
