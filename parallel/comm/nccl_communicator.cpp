#include "parallel/comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

#include "core/cuda/stream.h"
#include "core/factory.h"

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

// The communicator's NCCL handle and stream, shared with its Works (which may outlive it).
struct NcclHandle {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  bool aborted = false;

  ~NcclHandle() {
    if (comm) {
      if (aborted) {
        ncclCommAbort(comm);
      } else {
        ncclCommDestroy(comm);
      }
    }
    if (stream) cudaStreamDestroy(stream);
  }
  void abort() {
    if (aborted || !comm) return;
    aborted = true;
    ncclCommAbort(comm);
    comm = nullptr;
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
      TRIDENT_CHECK(async == ncclSuccess || async == ncclInProgress, description, ": NCCL reports ",
                    ncclGetErrorString(async));
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
    // NOTE [NCCL backend]: rank 0's unique id, broadcast over the bootstrap group.
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (bootstrap_->rank() == 0) TRIDENT_NCCL_CALL(ncclGetUniqueId(&id), "ncclGetUniqueId for " + where);
    Tensor bytes = empty({static_cast<int64_t>(sizeof id)}, DType::U8);
    std::memcpy(bytes.data_ptr(), &id, sizeof id);
    bootstrap_->broadcast(bytes, 0).wait();
    std::memcpy(&id, bytes.data_ptr(), sizeof id);
    TRIDENT_CUDA_CALL(cudaGetDevice(&device_), "cudaGetDevice for " + where);
    TRIDENT_CUDA_CALL(cudaStreamCreateWithFlags(&handle_->stream, cudaStreamNonBlocking), "cudaStreamCreate for " + where);
    TRIDENT_NCCL_CALL(ncclCommInitRank(&handle_->comm, size(), id, rank()), "ncclCommInitRank for " + where);
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
      for (int root = 0; root < size() && r == ncclSuccess; ++root) {
        const size_t n = static_cast<size_t>(counts[static_cast<size_t>(root)]);
        const void* send = root == rank() ? input.data_ptr() : out + displ * elt;
        r = ncclBroadcast(send, out + displ * elt, n, type, root, c, s);
        displ += n;
      }
      const ncclResult_t e = ncclGroupEnd();
      return r != ncclSuccess ? r : e;
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
      for (int root = 0; root < size() && r == ncclSuccess; ++root) {
        const size_t n = static_cast<size_t>(counts[static_cast<size_t>(root)]);
        void* recv = root == rank() ? output.data_ptr() : nullptr;
        r = ncclReduce(in + displ * elt, recv, n, type, nccl_op(op), root, c, s);
        displ += n;
      }
      const ncclResult_t e = ncclGroupEnd();
      return r != ncclSuccess ? r : e;
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
      for (size_t i = 0; i < ops.size() && r == ncclSuccess; ++i) {
        const P2POp& op = ops[i];
        const size_t n = static_cast<size_t>(op.tensor.numel());
        r = op.kind == P2POp::Kind::Send ? ncclSend(op.tensor.data_ptr(), n, nccl_type(op.tensor.dtype()), op.peer, c, s)
                                         : ncclRecv(op.tensor.data_ptr(), n, nccl_type(op.tensor.dtype()), op.peer, c, s);
      }
      const ncclResult_t e = ncclGroupEnd();
      return r != ncclSuccess ? r : e;
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
    TRIDENT_NCCL_CALL(issue(handle_->comm, handle_->stream), where);
    auto w = std::make_shared<NcclWork>();
    w->handle = handle_;
    TRIDENT_CUDA_CALL(cudaEventCreateWithFlags(&w->done_event, cudaEventDisableTiming), where);
    TRIDENT_CUDA_CALL(cudaEventRecord(w->done_event, handle_->stream), where);
    w->keep_alive = std::move(keep);
    return w;
  }

  std::shared_ptr<Communicator> bootstrap_;
  std::shared_ptr<NcclHandle> handle_;
  int device_ = 0;
  Tensor barrier_buf_;
};

}  // namespace

std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Communicator> bootstrap,
                                                     const CommOptions& options) {
  TRIDENT_CHECK(bootstrap != nullptr, "make_nccl_communicator: the bootstrap communicator is null");
  TRIDENT_CHECK(bootstrap->backend() != Backend::NCCL, "make_nccl_communicator: bootstrap over ", bootstrap->name(),
                ", which is itself NCCL; give its MPI or Local group");
  return std::make_shared<NcclCommunicator>(std::move(bootstrap), options);
}

}  // namespace trident::parallel::comm
