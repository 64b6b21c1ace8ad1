// Communicator: a group of ranks and the collective and point-to-point operations among them.
//
// Every operation is asynchronous: it starts the transfer and returns a Work (work.h, NOTE [Work
// and timeouts]) to wait() on or test(). Tensors are on the CPU or a CUDA device for the MPI and
// local backends (CUDA tensors go through pinned host memory, NOTE [Host staging]) and on a CUDA
// device for NCCL; any shape; contiguous or not (a non-contiguous tensor is staged through a
// contiguous copy, which the Work copies back on completion). Reductions: f32, f64, f16, bf16, i32, i64, u8
// (Average only for floating types; f16 and bf16 accumulate in f32, NOTE [Half reductions] in
// mpi_communicator.cpp); bool can be moved (all_gather, broadcast, send, receive) but not
// reduced. Ranks are numbered within the group, 0 .. size() - 1; world_rank(r) translates.
//
// Matching rules are MPI's and NCCL's: every rank of the group issues the same collectives in the
// same order with matching sizes and dtypes; point-to-point transfers between two ranks match in
// the order they were issued (no tags, as NCCL has none). A communicator is used from one thread
// at a time.
//
// NOTE [Communicator timeout]: each communicator has a timeout, 300 s unless the environment
// variable TRIDENT_COMM_TIMEOUT (seconds, fractions allowed) says otherwise when it is created, or
// set_timeout() changes it; an operation not complete that long after launch throws CommTimeout
// from wait()/test(), and the communicator is aborted for good (work.h).
//
// NOTE [Communication counters]: per communicator (that is, per group: the tp, pp, dp groups of a
// mesh each have their own), calls and bytes per kind of operation, counted at launch. Bytes are
// the payload as the user sees it, the size of the full, unsharded buffer, as nccl-tests counts
// sizes: all_reduce and broadcast the tensor; all_gather the gathered output; reduce_scatter the
// unreduced input; send and receive the tensor; barrier 0. (A bf16 all-reduce moves f32 on the
// wire, twice these bytes; the counters keep the formula's view.) A batch of point-to-point
// transfers counts one call per send and per receive in it.
//
// NOTE [NCCL backend]: the backend for CUDA tensors, parallel/comm/nccl_communicator.{h,cpp},
// compiled when TRIDENT_HAVE_CUDA (it compiles; no test has run it on a GPU yet), implementing the do_* functions below with one ncclComm_t per group:
//   - created by make_nccl_communicator(bootstrap, options): rank 0 of the MPI
//     bootstrap group calls ncclGetUniqueId and broadcasts it over that group, every rank calls
//     ncclCommInitRankConfig, non-blocking and polled with the communicator's timeout (NOTE [NCCL
//     non-blocking] in nccl_communicator.cpp; a mesh creates the tp/pp/dp NCCL groups from its MPI
//     groups the same way);
//   - operations run on the communicator's own stream, after an event recorded on the current
//     compute stream (so inputs are ready) and record a completion event; Work::Impl::poll() is
//     cudaEventQuery and wait() polls it (so that it can time out); making the compute stream
//     wait on the event instead of the host is for when the CUDA backend defines that stream;
//   - Average is ncclAvg, bf16 sums are native; batch_send_recv is ncclGroupStart/End around
//     ncclSend/ncclRecv;
//   - the timeout: poll() also checks ncclCommGetAsyncError, and a missed deadline calls
//     ncclCommAbort (Work::Impl::on_timeout), after which the communicator is aborted exactly as
//     the MPI one is.
// CUDA tensors given to the MPI (or Local) backend are staged through pinned host memory by the
// base Communicator, always, CUDA-aware MPI or not (NOTE [Host staging]); NCCL is the GPU path.
//
// NOTE [Host staging]: the MPI and Local backends move bytes the host reads and writes, so the
// base Communicator hands them host buffers for CUDA tensor arguments (all_reduce, all_gather,
// reduce_scatter, even or not, broadcast, send, recv, batch_send_recv):
//   - every CUDA argument gets its own contiguous page-locked buffer (cuda::empty_pinned; if
//     pinning fails the allocator's error propagates: there is no silent fallback to pageable
//     memory); an input's values are copied in, and the device's current stream is synchronized
//     before the backend sees the buffer, so MPI never reads bytes the GPU has not written;
//   - the backend runs on the host buffers exactly as on CPU tensors;
//   - on completion (before wait() returns or test() reports true) the result is copied into the
//     user's tensor, a view or a non-contiguous tensor alike, and the stream is synchronized
//     before the pinned buffer is released, so the copy never reads freed or reused memory;
//   - aliasing: an all_gather whose input is this rank's slot of its (contiguous) output stages
//     the output once and makes the staged input that slot of it (still in place for the
//     backend); every other overlap gets separate buffers, as on the CPU path;
//   - arguments on different devices in one call (a CPU input, a CUDA output) work: each is
//     staged or not on its own;
//   - counters count the user's bytes (NOTE [Communication counters]), staging or not.
// Device pointers are never given to MPI, even when it is CUDA-aware (OpenMPI's
// MPIX_Query_cuda_support): that path cannot be tested here, and NCCL is the GPU path.
// For tests without a GPU, set_host_staging_test_mode(true) (or TRIDENT_COMM_STAGE_HOST=1 in the
// environment) stages CPU tensors the same way through separate pageable host buffers: the same
// code path; only the allocation and the copies (host to host) differ.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "parallel/comm/work.h"

namespace trident::parallel::comm {

enum class ReduceOp : uint8_t { Sum, Average, Max };
std::string_view reduce_op_name(ReduceOp op);

// Local: a world of one process, no MPI. MPI: host memory over MPI (CUDA tensors staged, NOTE
// [Host staging]). NCCL: CUDA tensors (NOTE [NCCL backend]; built with CUDA).
enum class Backend : uint8_t { Local, MPI, NCCL };
std::string_view backend_name(Backend b);

enum class CommOp : uint8_t { AllReduce, AllGather, ReduceScatter, Broadcast, Send, Recv, Barrier };
inline constexpr size_t kNumCommOps = 7;
std::string_view comm_op_name(CommOp op);  // "all_reduce", "all_gather", ...

struct OpCounters {
  int64_t calls = 0;
  int64_t bytes = 0;
};

// NOTE [Communication counters]
struct CommStats {
  std::array<OpCounters, kNumCommOps> ops{};
  const OpCounters& operator[](CommOp op) const { return ops[static_cast<size_t>(op)]; }
  OpCounters& operator[](CommOp op) { return ops[static_cast<size_t>(op)]; }
  int64_t total_bytes() const;
  int64_t total_calls() const;
  // "all_reduce: 3 calls, 12288 bytes; broadcast: ..." (operations never called are left out).
  std::string str() const;
};

// One transfer of a batch (batch_send_recv): send `tensor` to `peer`, or receive into it.
struct P2POp {
  enum class Kind : uint8_t { Send, Recv };
  Kind kind;
  Tensor tensor;
  int peer;
};
inline P2POp send_op(Tensor t, int peer) { return {P2POp::Kind::Send, std::move(t), peer}; }
inline P2POp recv_op(Tensor t, int peer) { return {P2POp::Kind::Recv, std::move(t), peer}; }

// What the communicator and its Works share: identity, timeout, abort state, counters, and the
// operations still in flight.
struct CommState {
  std::string name;
  Backend backend = Backend::Local;
  int rank = 0;
  int size = 1;
  int world_rank = 0;
  Seconds timeout{300.0};
  bool aborted = false;
  std::string abort_reason;  // the description of the operation that timed out
  CommStats stats;
  std::vector<std::shared_ptr<Work::Impl>> in_flight;

  // "group 'tp[dp=0,pp=1]' (rank 1 of 2, world rank 3)"
  std::string where() const;
};

struct CommOptions {
  std::string name;                // for errors and counters: "world", "tp", ...
  std::optional<Seconds> timeout;  // default: NOTE [Communicator timeout]
};

// The testing hook of NOTE [Host staging]: while on, the MPI and Local backends stage CPU tensors
// through separate host buffers as they stage CUDA tensors through pinned ones. Process-wide;
// read when an operation is launched (a Work in flight keeps the buffers it was given). Its
// initial value is TRIDENT_COMM_STAGE_HOST ("1" on; unset, empty or "0" off; anything else an
// error naming the value), read on first use.
void set_host_staging_test_mode(bool on);
bool host_staging_test_mode();

// The timeout a new communicator gets: TRIDENT_COMM_TIMEOUT (seconds, > 0) or 300 s. An invalid
// value is an error naming it.
Seconds default_timeout();

class Communicator : public std::enable_shared_from_this<Communicator> {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // The process-wide world group, created on the first call. Launched by mpirun (or srun, or
  // any launcher that sets OpenMPI's, PMIx's or PMI's variables), or with MPI already
  // initialized by the program, it is MPI_COMM_WORLD (MPI is initialized here when needed and
  // finalized at exit). A plain process is a world of one on the Local backend, with no MPI and
  // no launcher; TRIDENT_COMM_BACKEND=mpi makes it an MPI singleton instead (MPI_Init without
  // mpirun). A launch of several ranks in a build without MPI is an error.
  static std::shared_ptr<Communicator> world();

  Backend backend() const { return state_->backend; }
  const std::string& name() const { return state_->name; }
  int rank() const { return state_->rank; }
  int size() const { return state_->size; }
  // The world rank of group rank r (this rank's when r is omitted).
  int world_rank() const { return state_->world_rank; }
  int world_rank(int r) const;
  const std::vector<int>& world_ranks() const { return world_ranks_; }

  Seconds timeout() const { return state_->timeout; }
  void set_timeout(Seconds t);
  // True once an operation timed out (NOTE [Work and timeouts]): every later call throws.
  bool aborted() const { return state_->aborted; }

  const CommStats& stats() const { return state_->stats; }
  void reset_stats() { state_->stats = CommStats{}; }

  // ---- collectives: every rank of the group calls them, in the same order ----
  // In place: tensor becomes the element-wise reduction over the group.
  Work all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  // output (numel = size() * input.numel()) receives every rank's input, rank after rank, in
  // row-major order (for [size * n, ...] that is along dim 0). input may be this rank's slot
  // of output (in place).
  Work all_gather(const Tensor& output, const Tensor& input);
  // Uneven: rank r contributes counts[r] elements (counts has size() entries, counts[rank()]
  // == input.numel(), their sum == output.numel()); zeros allowed.
  Work all_gather(const Tensor& output, const Tensor& input, std::span<const int64_t> counts);
  // input (numel = size() * output.numel()) is reduced over the group, and this rank keeps
  // slot rank() of the result. output may be slot rank() of input (in place).
  Work reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum);
  // Uneven: slot r has counts[r] elements (counts[rank()] == output.numel(), their sum ==
  // input.numel()).
  Work reduce_scatter(const Tensor& output, const Tensor& input, std::span<const int64_t> counts,
                      ReduceOp op = ReduceOp::Sum);
  // Every rank's tensor becomes root's.
  Work broadcast(const Tensor& tensor, int root);
  Work barrier();

  // ---- point to point: tensors of the same numel and dtype on both sides ----
  Work send(const Tensor& tensor, int peer);
  Work recv(const Tensor& tensor, int peer);
  // Starts every transfer of the batch at once (a pipeline stage's send to the next stage and
  // receive from the previous one, in any order on either side, without deadlock) and returns
  // one Work for all of them.
  Work batch_send_recv(const std::vector<P2POp>& ops);

  // Waits for every operation launched on this communicator that is still in flight,
  // including those whose Work was dropped.
  void synchronize();

  // Collective over this group: ranks with the same color form a new group, ordered by key
  // (then by rank). The new communicator is named `name` and inherits this one's timeout.
  // MPI_Comm_split itself cannot time out, so the (color, key) pairs are first exchanged with
  // an all-gather that can: a rank that never calls split makes the others fail there.
  std::shared_ptr<Communicator> split(int color, int key, const std::string& name);

 protected:
  explicit Communicator(std::shared_ptr<CommState> state, std::vector<int> world_ranks);

  // ---- what a backend provides: tensors are contiguous, on its device, arguments checked,
  // counted; the result's Impl gets description, deadline and comm filled in by the caller ----
  virtual std::shared_ptr<Work::Impl> do_all_reduce(const Tensor& tensor, ReduceOp op) = 0;
  // counts: elements per rank (size() entries), even or not.
  virtual std::shared_ptr<Work::Impl> do_all_gather(const Tensor& output, const Tensor& input,
                                                    const std::vector<int64_t>& counts) = 0;
  virtual std::shared_ptr<Work::Impl> do_reduce_scatter(const Tensor& output, const Tensor& input,
                                                        const std::vector<int64_t>& counts, ReduceOp op) = 0;
  virtual std::shared_ptr<Work::Impl> do_broadcast(const Tensor& tensor, int root) = 0;
  virtual std::shared_ptr<Work::Impl> do_barrier() = 0;
  virtual std::shared_ptr<Work::Impl> do_send_recv(const std::vector<P2POp>& ops) = 0;
  // Called by split() after the checked exchange; colors[r], keys[r] of every rank (empty for
  // NCCL, whose split is its bootstrap group's, exchange included).
  virtual std::shared_ptr<Communicator> do_split(int color, int key, const std::vector<int>& colors,
                                                 const std::vector<int>& keys, const std::string& name) = 0;

  const std::shared_ptr<CommState>& state() const { return state_; }

 private:
  void check_usable(std::string_view op) const;
  void check_tensor(std::string_view op, const char* arg, const Tensor& t) const;
  // Whether t goes through a host buffer (NOTE [Host staging]).
  bool host_staged(const Tensor& t) const;
  // The contiguous buffer the backend gets for t: t itself, a contiguous copy on t's device, or a
  // host buffer (NOTE [Host staging]); holding t's values when copy_values.
  Tensor buffer_for(const Tensor& t, bool copy_values) const;
  // Finishes a launch: fills description and deadline, registers it in flight, reaps finished
  // ones.
  Work launch(std::shared_ptr<Work::Impl> impl, std::string description);
  Work gather_impl(const Tensor& output, const Tensor& input, std::vector<int64_t> counts, bool even);
  Work scatter_impl(const Tensor& output, const Tensor& input, std::vector<int64_t> counts, ReduceOp op, bool even);

  std::shared_ptr<CommState> state_;
  std::vector<int> world_ranks_;
};

}  // namespace trident::parallel::comm
