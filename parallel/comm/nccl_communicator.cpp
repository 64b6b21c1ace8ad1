#include "parallel/comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/cuda/stream.h"
#include "core/factory.h"
#include "parallel/comm/mpi_env.h"

namespace trident::parallel::comm {
namespace {

#define TRIDENT_CUDA_CALL(call, what)                                                                       \
  do {                                                                                                      \
    const cudaError_t e_ = (call);                                                                          \
    TRIDENT_CHECK(e_ == cudaSuccess, what, " failed: ", cudaGetErrorString(e_), " (", #call, ")");          \
  } while (0)

#define TRIDENT_NCCL_CALL(call, what)                                                                       \
  do {                                                                                                      \
    const ncclResult_t r_ = (call);                                                                         \
    TRIDENT_CHECK(r_ == ncclSuccess, what, " failed: ", ncclGetErrorString(r_), " (", #call, ")");          \
  } while (0)

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::U8:
    case DType::Bool: return ncclUint8;
  }
  TRIDENT_FAIL("no NCCL type for dtype ", d);
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Average: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
  }
  return ncclSum;
}

// NOTE [NCCL non-blocking]: every NCCL communicator is created non-blocking
// (ncclConfig_t::blocking = 0, ncclCommInitRankConfig), so that no NCCL call can wait for
// another rank without a timeout. A blocking ncclCommInitRank waits inside the call until every
// rank of the group has joined: a rank that crashed, hangs, was started with another world size
// or on another device leaves every other rank stuck there forever with no message. So does, in
// a blocking communicator, the first operation between two peers (NCCL connects them lazily,
// NCCL_RUNTIME_CONNECT) and ncclCommFinalize (a barrier with the ranks of the node).
// NCCL's contract for a non-blocking communicator, and how this file keeps it:
//   - any call on it may return ncclInProgress: the work goes on in the background, and the
//     communicator's state (ncclCommGetAsyncError) stays ncclInProgress until it is done, then
//     becomes ncclSuccess or an error; no other call may be made on the communicator before.
//     Every call here is followed by await_state(), which polls that state until it leaves
//     ncclInProgress or the communicator's timeout (NOTE [Communicator timeout]) passes; then the
//     communicator is aborted (ncclCommAbort, which may be called in any state) and CommTimeout
//     names the step, the group, the rank, the device and the timeout.
//   - inside ncclGroupStart/End the operations only queue (ncclSuccess or ncclInProgress); it
//     is ncclGroupEnd that may return ncclInProgress, and the kernels are on the stream only once
//     the state is ncclSuccess: enqueue() records the completion event after await_state().
//   - init: ncclCommInitRankConfig returns at once (ncclInProgress); the constructor polls it to
//     completion with the timeout before the communicator is used at all.
//   - split: NCCL's ncclCommSplit is not used (a child would inherit the parent's non-blocking
//     config when given none); do_split splits the bootstrap group and builds the child from a
//     new unique id with the same non-blocking init and the same timeout.
//   - destruction (~NcclCommunicator): the operations still in flight are waited for (each to its
//     deadline), then ncclCommFinalize, polled with the timeout, then ncclCommDestroy, which only
//     frees local resources after a finalize. An operation that timed out or failed, or a
//     finalize that timed out, gets ncclCommAbort instead; the buffers of operations that never
//     completed are deliberately leaked (the aborted kernels may still touch them), as the MPI
//     backend does (NOTE [Work and timeouts]).
// Polling ncclCommGetAsyncError is a host call with no GPU synchronization; operations are rarely
// in progress at issue time (only while NCCL connects peers), so the steady state costs one such
// query per issued operation.

bool in_progress_or_ok(ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; }

// ncclCommGetAsyncError until it is no longer ncclInProgress or `deadline` passes: the last state
// (ncclInProgress at the deadline), or the query's own error.
ncclResult_t poll_state(ncclComm_t comm, Clock::time_point deadline) {
  for (int spins = 0;; ++spins) {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress || Clock::now() >= deadline) return state;
    if (spins < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

std::string seconds_str(Seconds s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s.count());
  return buf;
}

// cuda::DeviceGuard, but never throwing: for destructors and abort paths (a failed cudaSetDevice
// there must not terminate the process; NCCL sets the device of its own calls anyway).
class QuietDeviceGuard {
 public:
  explicit QuietDeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      previous_ = -1;
      cudaGetLastError();
    } else if (previous_ != device) {
      cudaSetDevice(device);
    }
  }
  ~QuietDeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  QuietDeviceGuard(const QuietDeviceGuard&) = delete;
  QuietDeviceGuard& operator=(const QuietDeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// NCCL handles created and not yet destroyed or aborted (live_nccl_communicators()).
std::atomic<int64_t> g_live_handles{0};

// The communicator's NCCL handle and stream. The NcclCommunicator owns its lifetime: its
// destructor finalizes and destroys (or aborts) the ncclComm_t explicitly (NOTE [NCCL
// non-blocking]); Works hold the struct only to see whether it was aborted and to query async
// errors, so one that outlives its communicator finds comm == nullptr (its operation completed
// before the communicator was destroyed, or the communicator was aborted).
struct NcclHandle {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;
  bool aborted = false;

  NcclHandle() = default;
  NcclHandle(const NcclHandle&) = delete;
  NcclHandle& operator=(const NcclHandle&) = delete;
  ~NcclHandle() {
    // Reached with a live comm only when the constructor failed after creating it.
    if (comm) abort();
    if (stream) cudaStreamDestroy(stream);  // pending work still completes (CUDA's contract)
  }
  void abort() {
    aborted = true;
    if (!comm) return;
    QuietDeviceGuard guard(device);
    ncclCommAbort(comm);
    comm = nullptr;
    --g_live_handles;
  }
  void destroy() {
    QuietDeviceGuard guard(device);
    ncclCommDestroy(comm);
    comm = nullptr;
    --g_live_handles;
  }
  // At process exit after the CUDA runtime was unloaded nothing can be called: let go.
  void leak() {
    if (comm) --g_live_handles;
    comm = nullptr;
    stream = nullptr;
  }
};

struct NcclWork final : Work::Impl {
  std::shared_ptr<NcclHandle> handle;
  cudaEvent_t done_event = nullptr;

  ~NcclWork() override {
    if (done_event) cudaEventDestroy(done_event);
  }
  bool poll() override {
    // After ncclCommAbort nothing can be assumed about the completion or the correctness of the
    // operations that were enqueued (NCCL's error-handling contract): their events still fire
    // once the aborted kernels exit, which must not read as success (nor may a timed-out Work's
    // second wait() return normally).
    TRIDENT_CHECK(!handle->aborted, description, ": its NCCL communicator was aborted (ncclCommAbort after a ",
                  "timeout, NOTE [Work and timeouts]) before it was seen to complete; its results are undefined");
    const cudaError_t e = cudaEventQuery(done_event);
    if (e == cudaSuccess) return true;
    TRIDENT_CHECK(e == cudaErrorNotReady, description, ": CUDA reports ", cudaGetErrorString(e));
    cudaGetLastError();  // cudaErrorNotReady is not sticky, but clear it anyway
    if (handle->comm) {
      ncclResult_t async = ncclSuccess;
      TRIDENT_NCCL_CALL(ncclCommGetAsyncError(handle->comm, &async), description);
      TRIDENT_CHECK(in_progress_or_ok(async), description, ": NCCL reports ", ncclGetErrorString(async), " (",
                    ncclGetLastError(handle->comm), ")");
    }
    return false;
  }
  void on_timeout() override { handle->abort(); }
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<Communicator> bootstrap, const CommOptions& options)
      : Communicator(make_state(*bootstrap, options), bootstrap->world_ranks()),
        bootstrap_(std::move(bootstrap)),
        handle_(std::make_shared<NcclHandle>()) {
    const std::string where = state()->where();
    // NOTE [NCCL backend]: rank 0's unique id, broadcast over the bootstrap group (a Work with
    // the bootstrap's timeout: a rank that never comes makes the others fail there).
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (bootstrap_->rank() == 0) TRIDENT_NCCL_CALL(ncclGetUniqueId(&id), "ncclGetUniqueId for " + where);
    Tensor bytes = empty({static_cast<int64_t>(sizeof id)}, DType::U8);
    std::memcpy(bytes.data_ptr(), &id, sizeof id);
    bootstrap_->broadcast(bytes, 0).wait();
    std::memcpy(&id, bytes.data_ptr(), sizeof id);
    TRIDENT_CUDA_CALL(cudaGetDevice(&device_), "cudaGetDevice for " + where);
    handle_->device = device_;
    TRIDENT_CUDA_CALL(cudaStreamCreateWithFlags(&handle_->stream, cudaStreamNonBlocking), "cudaStreamCreate for " + where);
    // NOTE [NCCL non-blocking]: the init returns at once and is polled to completion here.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r = ncclCommInitRankConfig(&handle_->comm, size(), id, rank(), &config);
    if (handle_->comm) ++g_live_handles;
    if (!in_progress_or_ok(r)) {
      const std::string last = handle_->comm ? ncclGetLastError(handle_->comm) : ncclGetLastError(nullptr);
      handle_->abort();
      TRIDENT_FAIL("ncclCommInitRankConfig for ", where, " on cuda:", device_, " failed: ", ncclGetErrorString(r), " (",
                   last, ")");
    }
    await_state("ncclCommInitRank (creating the NCCL communicator: waiting for every one of the " +
                    std::to_string(size()) + " ranks of the group to join it)",
                "a rank of the group did not create its NCCL communicator (it crashed or hangs before it, was "
                "started with another world size, or created other groups in another order)");
  }

  ~NcclCommunicator() override {
    // NOTE [NCCL non-blocking]: destruction. Never throws, never waits longer than the timeout
    // per step.
    const auto& s = state();
    // At exit, after the CUDA runtime is gone (a communicator held in a static): nothing can be
    // called, and the process is ending anyway.
    const cudaError_t q = handle_->stream ? cudaStreamQuery(handle_->stream) : cudaSuccess;
    if (q == cudaErrorCudartUnloading || q == cudaErrorContextIsDestroyed) {
      handle_->leak();
      new std::vector<std::shared_ptr<Work::Impl>>(s->in_flight);  // NOLINT: their buffers may be in use
      return;
    }
    if (q != cudaSuccess) cudaGetLastError();  // cudaErrorNotReady is not sticky; clear anyway
    if (!s->aborted && handle_->comm) {
      try {
        synchronize();
      } catch (...) {
        // A timeout (the communicator is aborted now) or an NCCL error: handled below.
      }
    }
    const bool all_done =
        std::all_of(s->in_flight.begin(), s->in_flight.end(), [](const auto& w) { return w->done; });
    if (s->aborted || !all_done || !handle_->comm) {
      handle_->abort();
      // NOTE [Work and timeouts]: operations that never completed keep their buffers for good.
      if (!all_done) new std::vector<std::shared_ptr<Work::Impl>>(s->in_flight);  // NOLINT: deliberate leak
      return;
    }
    QuietDeviceGuard guard(device_);
    ncclResult_t r = ncclCommFinalize(handle_->comm);
    if (in_progress_or_ok(r)) r = poll_state(handle_->comm, Clock::now() + std::chrono::duration_cast<Clock::duration>(s->timeout));
    if (r == ncclSuccess) {
      handle_->destroy();
      return;
    }
    // A destructor cannot throw: say why the communicator is aborted instead.
    std::fprintf(stderr, "trident: ncclCommFinalize of %s on cuda:%d %s; aborting it (ncclCommAbort) instead\n",
                 s->where().c_str(), device_,
                 r == ncclInProgress ? ("did not complete within " + seconds_str(s->timeout) +
                                        " (a rank of the group on this node did not destroy its communicator)")
                                           .c_str()
                                     : (std::string("failed: ") + ncclGetErrorString(r)).c_str());
    handle_->abort();
  }

 protected:
  std::shared_ptr<Work::Impl> do_all_reduce(const Tensor& tensor, ReduceOp op) override {
    return enqueue("ncclAllReduce", {tensor}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()),
                           nccl_type(tensor.dtype()), nccl_op(op), c, s);
    });
  }

  std::shared_ptr<Work::Impl> do_all_gather(const Tensor& output, const Tensor& input,
                                            const std::vector<int64_t>& counts) override {
    bool even = true;
    for (int64_t c : counts) even = even && c == counts[0];
    const ncclDataType_t type = nccl_type(output.dtype());
    char* out = static_cast<char*>(output.data_ptr());
    const size_t elt = output.element_size();
    return enqueue("ncclAllGather", {output, input}, [&](ncclComm_t c, cudaStream_t s) {
      if (even) return ncclAllGather(input.data_ptr(), out, static_cast<size_t>(counts[0]), type, c, s);
      // Uneven: every rank broadcasts its part into its slot.
      ncclResult_t r = ncclGroupStart();
      size_t displ = 0;
      for (int root = 0; root < size() && in_progress_or_ok(r); ++root) {
        const size_t n = static_cast<size_t>(counts[static_cast<size_t>(root)]);
        const void* send = root == rank() ? input.data_ptr() : out + displ * elt;
        r = ncclBroadcast(send, out + displ * elt, n, type, root, c, s);
        displ += n;
      }
      const ncclResult_t e = ncclGroupEnd();
      return in_progress_or_ok(r) ? e : r;  // NOTE [NCCL non-blocking]: ncclGroupEnd decides
    });
  }

  std::shared_ptr<Work::Impl> do_reduce_scatter(const Tensor& output, const Tensor& input,
                                                const std::vector<int64_t>& counts, ReduceOp op) override {
    bool even = true;
    for (int64_t c : counts) even = even && c == counts[0];
    const ncclDataType_t type = nccl_type(input.dtype());
    const char* in = static_cast<const char*>(input.data_ptr());
    const size_t elt = input.element_size();
    return enqueue("ncclReduceScatter", {output, input}, [&](ncclComm_t c, cudaStream_t s) {
      if (even)
        return ncclReduceScatter(in, output.data_ptr(), static_cast<size_t>(counts[0]), type, nccl_op(op), c, s);
      // Uneven: slot r is reduced onto rank r.
      ncclResult_t r = ncclGroupStart();
      size_t displ = 0;
      for (int root = 0; root < size() && in_progress_or_ok(r); ++root) {
        const size_t n = static_cast<size_t>(counts[static_cast<size_t>(root)]);
        void* recv = root == rank() ? output.data_ptr() : nullptr;
        r = ncclReduce(in + displ * elt, recv, n, type, nccl_op(op), root, c, s);
        displ += n;
      }
      const ncclResult_t e = ncclGroupEnd();
      return in_progress_or_ok(r) ? e : r;  // NOTE [NCCL non-blocking]: ncclGroupEnd decides
    });
  }

  std::shared_ptr<Work::Impl> do_broadcast(const Tensor& tensor, int root) override {
    return enqueue("ncclBroadcast", {tensor}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()),
                           nccl_type(tensor.dtype()), root, c, s);
    });
  }

  std::shared_ptr<Work::Impl> do_barrier() override {
    // NCCL has no barrier: a one-element all-reduce on the device.
    if (!barrier_buf_.defined()) barrier_buf_ = empty({1}, TensorOptions(DType::F32).device(Device::cuda(device_)));
    return do_all_reduce(barrier_buf_, ReduceOp::Sum);
  }

  std::shared_ptr<Work::Impl> do_send_recv(const std::vector<P2POp>& ops) override {
    std::vector<Tensor> keep;
    for (const P2POp& op : ops) keep.push_back(op.tensor);
    return enqueue("ncclSend/ncclRecv", keep, [&](ncclComm_t c, cudaStream_t s) {
      ncclResult_t r = ncclGroupStart();
      for (size_t i = 0; i < ops.size() && in_progress_or_ok(r); ++i) {
        const P2POp& op = ops[i];
        const size_t n = static_cast<size_t>(op.tensor.numel());
        r = op.kind == P2POp::Kind::Send ? ncclSend(op.tensor.data_ptr(), n, nccl_type(op.tensor.dtype()), op.peer, c, s)
                                         : ncclRecv(op.tensor.data_ptr(), n, nccl_type(op.tensor.dtype()), op.peer, c, s);
      }
      const ncclResult_t e = ncclGroupEnd();
      return in_progress_or_ok(r) ? e : r;  // NOTE [NCCL non-blocking]: ncclGroupEnd decides
    });
  }

  std::shared_ptr<Communicator> do_split(int color, int key, const std::vector<int>&, const std::vector<int>&,
                                         const std::string& name) override {
    auto child_bootstrap = bootstrap_->split(color, key, name + ".bootstrap");
    return std::make_shared<NcclCommunicator>(std::move(child_bootstrap), CommOptions{name, state()->timeout});
  }

 private:
  static std::shared_ptr<CommState> make_state(const Communicator& bootstrap, const CommOptions& options) {
    auto s = std::make_shared<CommState>();
    s->name = options.name.empty() ? "nccl" : options.name;
    s->backend = Backend::NCCL;
    s->rank = bootstrap.rank();
    s->size = bootstrap.size();
    s->world_rank = bootstrap.world_rank();
    s->timeout = options.timeout ? *options.timeout : bootstrap.timeout();
    return s;
  }

  // Orders the NCCL call after the work already queued on the compute stream (the device's
  // current stream, cuda::current_stream: a training step's kernels may run on a stream of its
  // own, which the legacy default stream does not wait for), issues it on the communicator's
  // stream, and records the completion event a Work polls.
  template <typename F>
  std::shared_ptr<Work::Impl> enqueue(const char* what, std::vector<Tensor> keep, F&& issue) {
    const std::string where = std::string(what) + " on " + state()->where();
    TRIDENT_CHECK(handle_->comm != nullptr, where, ": the NCCL communicator was aborted");
    // The communicator belongs to the device current when it was created: a tensor elsewhere
    // would hand NCCL another GPU's pointer, and with another device current the events below
    // would be made on that device (and the legacy default stream, handle nullptr, would be
    // that device's), so the NCCL stream would not wait for this device's compute stream.
    for (const Tensor& t : keep)
      TRIDENT_CHECK(t.device() == Device::cuda(device_), where, ": a tensor is on ", t.device(), ", but this NCCL ",
                    "communicator was created on cuda:", device_, " (the device current then)");
    cuda::DeviceGuard device_guard(device_);
    cudaEvent_t ready = nullptr;
    TRIDENT_CUDA_CALL(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), where);
    TRIDENT_CUDA_CALL(cudaEventRecord(ready, cuda::current_stream(device_).handle()), where);
    TRIDENT_CUDA_CALL(cudaStreamWaitEvent(handle_->stream, ready, 0), where);
    cudaEventDestroy(ready);  // released once the wait is satisfied
    const ncclResult_t r = issue(handle_->comm, handle_->stream);
    TRIDENT_CHECK(in_progress_or_ok(r), where, " failed: ", ncclGetErrorString(r), " (", ncclGetLastError(handle_->comm),
                  ")");
    // NOTE [NCCL non-blocking]: the kernels are on the stream once the state is ncclSuccess
    // (NCCL may still be connecting peers in the background).
    if (r == ncclInProgress) {
      try {
        await_state(std::string(what) + " (NCCL was still connecting to the peers of this operation to issue it)",
                    "a rank of the group did not join the operation (it skipped it, hangs, or died)");
      } catch (const Error&) {
        // Kernels of the aborted operation may have been queued: its buffers are kept for good
        // (NOTE [Work and timeouts]).
        new std::vector<Tensor>(std::move(keep));  // NOLINT: deliberate leak
        throw;
      }
    }
    auto w = std::make_shared<NcclWork>();
    w->handle = handle_;
    TRIDENT_CUDA_CALL(cudaEventCreateWithFlags(&w->done_event, cudaEventDisableTiming), where);
    TRIDENT_CUDA_CALL(cudaEventRecord(w->done_event, handle_->stream), where);
    w->keep_alive = std::move(keep);
    return w;
  }

  // NOTE [NCCL non-blocking]: polls the communicator's state after a call that may have returned
  // ncclInProgress. An error: the communicator is aborted and the Error names the step and
  // NCCL's last message. The timeout: aborted as a timed-out operation aborts it (NOTE [Work and
  // timeouts]) and CommTimeout names the step, what it was waiting for, the group, the rank, the
  // device and the timeout.
  void await_state(const std::string& step, const std::string& likely_cause) {
    const auto& s = state();
    const ncclResult_t r = poll_state(handle_->comm, Clock::now() + std::chrono::duration_cast<Clock::duration>(s->timeout));
    if (r == ncclSuccess) return;
    const std::string where = s->where() + " on cuda:" + std::to_string(device_);
    if (r != ncclInProgress) {
      const std::string last = ncclGetLastError(handle_->comm);
      s->aborted = true;
      s->abort_reason = step + " on " + where;
      handle_->abort();
      TRIDENT_FAIL(step, " on ", where, " failed: ", ncclGetErrorString(r), " (", last,
                   "); the NCCL communicator is aborted");
    }
    const std::string description = step + " on " + where;
    s->aborted = true;
    s->abort_reason = description;
    note_comm_timeout(description);
    handle_->abort();
    const std::string msg = detail::str(
        description, " timed out after ", seconds_str(s->timeout), ": ", likely_cause,
        ". The NCCL communicator is aborted (ncclCommAbort) and refuses every later operation; at exit this process "
        "ends the whole job (NOTE [Ending after a timeout]). The timeout is TRIDENT_COMM_TIMEOUT, CommOptions::timeout "
        "or the bootstrap group's.");
    throw CommTimeout(detail::str("trident error: ", msg), __FILE__, __LINE__, msg);
  }

  std::shared_ptr<Communicator> bootstrap_;
  std::shared_ptr<NcclHandle> handle_;
  int device_ = 0;
  Tensor barrier_buf_;
};

}  // namespace

int64_t live_nccl_communicators() { return g_live_handles.load(); }

std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Communicator> bootstrap,
                                                     const CommOptions& options) {
  TRIDENT_CHECK(bootstrap != nullptr, "make_nccl_communicator: the bootstrap communicator is null");
  TRIDENT_CHECK(bootstrap->backend() != Backend::NCCL, "make_nccl_communicator: bootstrap over ", bootstrap->name(),
                ", which is itself NCCL; give its MPI or Local group");
  return std::make_shared<NcclCommunicator>(std::move(bootstrap), options);
}

}  // namespace trident::parallel::comm
