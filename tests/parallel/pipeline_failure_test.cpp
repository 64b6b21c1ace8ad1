// An exception inside one pipeline stage must end the step on every rank with that stage's
// message, at once, not after the communication timeout (NOTE [Pipeline failures]). The last
// stage's loss meets a target id out of the vocabulary; the other stages are waiting for its
// gradients by then. Not GoogleTest: the job ends with MPI_Abort by design (the communicators
// hold transfers that never complete), so ctest judges this program by its output and by how
// long it ran (run_pipeline_failure_test.sh).
#include <chrono>
#include <cstdio>
#include <string>

#include "parallel/comm/communicator.h"
#include "parallel/pipeline/pipeline.h"
#include "pipeline_models.h"

using namespace trident;
using namespace trident::parallel::pipeline;
using trident::parallel::comm::Communicator;
using trident::parallel::comm::Seconds;

namespace {
int fail(int rank, const std::string& why) {
  std::printf("PIPE-FAIL-TEST rank %d: FAILED: %s\n", rank, why.c_str());
  std::fflush(stdout);
  return 1;
}
}  // namespace

int main() {
  auto world = Communicator::world();
  const int rank = world->rank(), n = world->size();
  if (n < 2) return fail(rank, "needs at least 2 ranks");
  // The ranks report through a healthy group of their own before any exits (the first exit ends
  // the job).
  auto reporters = world->split(0, rank, "reporters");
  auto pp = world->split(0, rank, "pp");
  auto model = trident::testing::make_pipeline_model("gpt2");
  models::Batch batch = trident::testing::make_pipeline_batch("gpt2", 8, 8, 7);
  Pipeline pipe(*model, pp, {.micro_batches = 4, .schedule = Schedule::OneFOneB});
  pipe.step(batch);  // a healthy step first
  // Row 5 (micro-batch 2) gets a target outside the vocabulary of 61.
  Tensor targets = batch.at("targets").clone();
  std::vector<int64_t> t = targets.to_vector<int64_t>();
  t[5 * 8 + 3] = 99;
  batch.set("targets", from_vector<int64_t>(t, {8, 8}));
  const auto start = std::chrono::steady_clock::now();
  try {
    pipe.step(batch);
    return fail(rank, "the step with a bad target succeeded");
  } catch (const Error& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string m = e.message();
    const std::string stage = "pipeline stage " + std::to_string(n - 1) + " of " + std::to_string(n);
    for (const std::string& part : {stage, std::string("failed"), std::string("target 99")})
      if (m.find(part) == std::string::npos) return fail(rank, "\"" + part + "\" missing in: " + m);
    if (s > 10.0) return fail(rank, "the error came after " + std::to_string(s) + " s");
    try {
      pipe.step(batch);
      return fail(rank, "the failed pipeline accepted another step");
    } catch (const Error& e2) {
      if (e2.message().find("failed in an earlier step") == std::string::npos)
        return fail(rank, "unexpected error: " + e2.message());
    }
    reporters->barrier().wait();
    std::printf("PIPE-FAIL-TEST rank %d: ok after %.2f s: %s\n", rank, s, m.c_str());
    std::fflush(stdout);
    reporters->barrier().wait();
  }
  return 0;  // the exit handler ends the job with MPI_Abort (NOTE [Pipeline failures])
}
