// Work: the handle an asynchronous communication returns.
//
// NOTE [Work and timeouts]: every Communicator operation starts the transfer and returns a Work
// at once. wait() blocks until it is complete; test() progresses it without blocking and says
// whether it is. Output tensors hold their result only after one of them has reported
// completion, and no tensor the operation reads or writes may be changed (or, for outputs, read)
// before then; the Work keeps them alive, so dropping the handle early is allowed: the operation
// still completes (its communicator keeps progressing it) but nobody learns when.
// A Work carries a deadline: launch time plus its communicator's timeout (NOTE [Communicator
// timeout]). When wait() or test() finds the deadline passed and the operation still incomplete
// (a rank of the group never joined: it skipped the collective, hung, or died), it throws
// CommTimeout naming the operation, the group, this rank and the bytes, and marks the
// communicator aborted: MPI cannot cancel a collective, so the buffers stay in use by MPI and
// every later operation on that communicator is refused (as NCCL is unusable after
// ncclCommAbort). The process should then end; at exit it ends the whole job (NOTE [Ending after
// a timeout], mpi_env.h), so no rank waits forever for the one that never came.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace trident::parallel::comm {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

// Thrown by Work::wait() / test() when an operation misses its deadline. A trident::Error, so
// code that catches those catches this; message() names op, group, rank and bytes.
class CommTimeout : public Error {
 public:
  using Error::Error;
};

struct CommState;  // a communicator's shared bookkeeping (communicator.h)

class Work {
 public:
  // A completed no-op (what an operation on zero bytes with nothing to wait for may return).
  Work() = default;

  // Blocks until complete; throws CommTimeout at the deadline, and Error if the operation
  // failed. Calling it again after completion returns at once.
  void wait();
  // Progresses the operation without blocking; true once complete. Throws as wait() does when
  // the deadline has passed.
  bool test();
  bool completed() const;
  // "all_reduce of 4096 bytes (f32 [1024], sum) on group 'world' (rank 0 of 2)".
  std::string description() const;

  // ---- for backends ----
  struct Impl {
    virtual ~Impl() = default;
    // Tries to complete the transfer without blocking; true once it is. Never throws for a
    // not-yet-complete transfer; throws Error if the transport reports a failure.
    virtual bool poll() = 0;
    // Called once when the deadline passes first, before CommTimeout is thrown: a backend that
    // can abort its transport does it here (NCCL: ncclCommAbort). MPI cannot; the default does
    // nothing.
    virtual void on_timeout() {}

    std::string description;
    std::shared_ptr<CommState> comm;
    Clock::time_point deadline;
    bool done = false;
    // Runs once, on completion: copies staged results back, divides for averages, converts
    // f32 accumulators back to bf16/f16 (see the backend).
    std::function<void()> on_complete;
    // Tensors that must outlive the transfer (inputs, outputs, staging buffers).
    std::vector<Tensor> keep_alive;

    // poll(), and on_complete() when it first reports completion; throws CommTimeout (and
    // aborts the communicator) when the deadline passed first.
    bool progress();
  };
  explicit Work(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  const std::shared_ptr<Impl>& impl() const { return impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

// Waits for every work in order; the first failure propagates (the rest stay with their
// communicator, which keeps progressing them).
void wait_all(std::vector<Work>& works);

}  // namespace trident::parallel::comm
