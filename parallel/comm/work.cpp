#include "parallel/comm/work.h"

#include <cstdio>
#include <thread>

#include "parallel/comm/communicator.h"
#include "parallel/comm/mpi_env.h"

namespace trident::parallel::comm {
namespace {

std::string seconds_str(Seconds s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s.count());
  return buf;
}

}  // namespace

bool Work::Impl::progress() {
  if (done) return true;
  if (poll()) {
    done = true;
    if (on_complete) {
      auto fn = std::move(on_complete);
      on_complete = nullptr;
      fn();
    }
    keep_alive.clear();
    return true;
  }
  if (Clock::now() < deadline) return false;
  // NOTE [Work and timeouts]: the operation stays with MPI (its buffers stay alive in the
  // communicator's in-flight list); the communicator is unusable from now on.
  const Seconds timeout = comm ? comm->timeout : Seconds(0);
  if (comm && !comm->aborted) {
    comm->aborted = true;
    comm->abort_reason = description;
  }
  note_comm_timeout(description);
  on_timeout();
  const std::string msg = detail::str(
      description, " timed out after ", seconds_str(timeout),
      ": a rank of the group did not join it (it skipped the operation, hangs, or died). The communicator is "
      "aborted and refuses every later operation (as NCCL's is after ncclCommAbort); at exit this process ends "
      "the whole job (NOTE [Ending after a timeout]). The timeout is TRIDENT_COMM_TIMEOUT or "
      "Communicator::set_timeout.");
  throw CommTimeout(detail::str("trident error: ", msg), __FILE__, __LINE__, msg);
}

void Work::wait() {
  if (!impl_) return;
  // Poll: spin briefly (short messages complete within microseconds), then yield the core (ranks
  // often share cores with each other and with compute threads), then sleep in short steps.
  const Clock::time_point start = Clock::now();
  for (int spins = 0; !impl_->progress(); ++spins) {
    if (spins < 64) continue;
    if (Clock::now() - start < std::chrono::milliseconds(5)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

bool Work::test() { return !impl_ || impl_->progress(); }

bool Work::completed() const { return !impl_ || impl_->done; }

std::string Work::description() const { return impl_ ? impl_->description : "a completed no-op"; }

void wait_all(std::vector<Work>& works) {
  for (Work& w : works) w.wait();
}

}  // namespace trident::parallel::comm
