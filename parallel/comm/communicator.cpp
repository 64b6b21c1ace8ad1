#include "parallel/comm/communicator.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "core/factory.h"
#include "parallel/comm/local_communicator.h"
#include "parallel/comm/mpi_communicator.h"
#include "parallel/comm/mpi_env.h"
#include "trident_config.h"

#if TRIDENT_HAVE_CUDA
#include "core/cuda/allocator.h"
#include "core/cuda/stream.h"
#endif

namespace trident::parallel::comm {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Average: return "average";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

std::string_view backend_name(Backend b) {
  switch (b) {
    case Backend::Local: return "local";
    case Backend::MPI: return "mpi";
    case Backend::NCCL: return "nccl";
  }
  return "?";
}

std::string_view comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::AllReduce: return "all_reduce";
    case CommOp::AllGather: return "all_gather";
    case CommOp::ReduceScatter: return "reduce_scatter";
    case CommOp::Broadcast: return "broadcast";
    case CommOp::Send: return "send";
    case CommOp::Recv: return "recv";
    case CommOp::Barrier: return "barrier";
  }
  return "?";
}

int64_t CommStats::total_bytes() const {
  int64_t n = 0;
  for (const OpCounters& c : ops) n += c.bytes;
  return n;
}

int64_t CommStats::total_calls() const {
  int64_t n = 0;
  for (const OpCounters& c : ops) n += c.calls;
  return n;
}

std::string CommStats::str() const {
  std::ostringstream os;
  bool first = true;
  for (size_t i = 0; i < kNumCommOps; ++i) {
    if (ops[i].calls == 0) continue;
    if (!first) os << "; ";
    first = false;
    os << comm_op_name(static_cast<CommOp>(i)) << ": " << ops[i].calls << " calls, " << ops[i].bytes << " bytes";
  }
  return first ? "no operations" : os.str();
}

std::string CommState::where() const {
  return detail::str("group '", name, "' (", backend_name(backend), ", rank ", rank, " of ", size, ", world rank ",
                     world_rank, ")");
}

namespace {

// -1: not read from the environment yet; else 0 or 1.
std::atomic<int> g_host_staging_test_mode{-1};

}  // namespace

void set_host_staging_test_mode(bool on) { g_host_staging_test_mode.store(on ? 1 : 0); }

bool host_staging_test_mode() {
  int v = g_host_staging_test_mode.load();
  if (v < 0) {
    const char* e = std::getenv("TRIDENT_COMM_STAGE_HOST");
    const std::string s = e ? e : "";
    TRIDENT_CHECK(s.empty() || s == "0" || s == "1", "TRIDENT_COMM_STAGE_HOST must be 1 (stage CPU tensors through ",
                  "host buffers, for tests) or 0, got \"", s, "\"");
    v = s == "1" ? 1 : 0;
    int expected = -1;
    g_host_staging_test_mode.compare_exchange_strong(expected, v);
    v = g_host_staging_test_mode.load();
  }
  return v == 1;
}

Seconds default_timeout() {
  const char* v = std::getenv("TRIDENT_COMM_TIMEOUT");
  if (!v || !*v) return Seconds(300.0);
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  TRIDENT_CHECK(end != v && *end == '\0' && std::isfinite(s) && s > 0, "TRIDENT_COMM_TIMEOUT must be a positive number ",
                "of seconds, got \"", v, "\"");
  return Seconds(s);
}

// ---------------------------------------------------------------------------
// The world
// ---------------------------------------------------------------------------

std::shared_ptr<Communicator> Communicator::world() {
  static std::mutex mutex;
  static std::shared_ptr<Communicator> world;
  std::lock_guard<std::mutex> lock(mutex);
  if (world) return world;
  const char* forced = std::getenv("TRIDENT_COMM_BACKEND");
  const std::string backend = forced ? forced : "";
  TRIDENT_CHECK(backend.empty() || backend == "mpi" || backend == "local",
                "TRIDENT_COMM_BACKEND must be 'mpi' or 'local', got \"", backend, "\"");
  const bool launched = launched_by_mpi_launcher();
  bool use_mpi = backend == "mpi" || (backend.empty() && (launched || mpi_initialized()));
  if (!mpi_built()) {
    TRIDENT_CHECK(backend != "mpi", "TRIDENT_COMM_BACKEND=mpi, but this build of Trident has no MPI");
    TRIDENT_CHECK(launcher_world_size() <= 1, "this process was started by an MPI launcher with ",
                  launcher_world_size(), " ranks, but this build of Trident has no MPI (install OpenMPI and reconfigure)");
    use_mpi = false;
  }
  if (backend == "local") {
    TRIDENT_CHECK(launcher_world_size() <= 1, "TRIDENT_COMM_BACKEND=local asks for a world of one, but the launcher ",
                  "started ", launcher_world_size(), " ranks");
    use_mpi = false;
  }
  world = use_mpi ? make_mpi_world({"world", std::nullopt}) : make_local_communicator({"world", std::nullopt});
  return world;
}

// ---------------------------------------------------------------------------
// Communicator
// ---------------------------------------------------------------------------

Communicator::Communicator(std::shared_ptr<CommState> state, std::vector<int> world_ranks)
    : state_(std::move(state)), world_ranks_(std::move(world_ranks)) {
  TRIDENT_ASSERT(static_cast<int>(world_ranks_.size()) == state_->size, "world rank table of ", world_ranks_.size(),
                 " entries for a group of ", state_->size);
}

Communicator::~Communicator() {
  // Each Work::Impl holds its CommState (impl->comm), and the state holds the operations still in
  // flight: a reference cycle that would keep the state, the impls, their buffers and the
  // backend's handles (an NCCL communicator, NOTE [NCCL non-blocking]) alive for good once the
  // communicator is gone, even after they completed (the list is reaped only at the next launch).
  // The backends' destructors complete what is in flight, or keep it deliberately (an operation
  // that never completed: NOTE [Work and timeouts]); here the list lets go. A Work the user still
  // holds keeps its impl and the state alive until it is dropped, with no cycle.
  state_->in_flight.clear();
}

int Communicator::world_rank(int r) const {
  TRIDENT_CHECK(r >= 0 && r < size(), "rank ", r, " is outside ", state_->where());
  return world_ranks_[static_cast<size_t>(r)];
}

void Communicator::set_timeout(Seconds t) {
  TRIDENT_CHECK(t.count() > 0 && std::isfinite(t.count()), "set_timeout on ", state_->where(),
                ": the timeout must be positive, got ", t.count(), " s");
  state_->timeout = t;
}

void Communicator::check_usable(std::string_view op) const {
  TRIDENT_CHECK(!state_->aborted, op, " on ", state_->where(), ": the communicator was aborted when ",
                state_->abort_reason, " timed out; it cannot be used again (NOTE [Work and timeouts])");
}

void Communicator::check_tensor(std::string_view op, const char* arg, const Tensor& t) const {
  TRIDENT_CHECK(t.defined(), op, " on ", state_->where(), ": ", arg, " is an undefined tensor");
  if (backend() == Backend::NCCL) {
    TRIDENT_CHECK(t.device().is_cuda(), op, " on ", state_->where(), ": ", arg, " is on ", t.device(),
                  "; the NCCL backend carries CUDA tensors");
  } else {
    // CUDA tensors are staged through pinned host memory (NOTE [Host staging]).
    TRIDENT_CHECK(t.device().is_cpu() || t.device().is_cuda(), op, " on ", state_->where(), ": ", arg, " is on ",
                  t.device(), "; the ", backend_name(backend()), " backend carries CPU and CUDA tensors");
  }
}

bool Communicator::host_staged(const Tensor& t) const {
  if (backend() == Backend::NCCL) return false;
  return t.device().is_cuda() || host_staging_test_mode();
}

namespace {

std::string tensor_str(const Tensor& t) { return detail::str(t.dtype(), " ", t.sizes()); }

void check_reducible(std::string_view op, const CommState& s, DType d, ReduceOp rop) {
  TRIDENT_CHECK(d != DType::Bool, op, " on ", s.where(), ": bool tensors cannot be reduced (", reduce_op_name(rop),
                "); convert to u8 or i32 first");
  TRIDENT_CHECK(rop != ReduceOp::Average || is_floating(d), op, " on ", s.where(),
                ": average needs a floating-point tensor, got ", d, " (sum it and divide yourself)");
}

// A contiguous tensor to hand to a backend: t itself, or a copy (its values copied for inputs).
Tensor contiguous_buffer(const Tensor& t, bool copy_values) {
  if (t.is_contiguous()) return t.detach();
  Tensor c = empty(t.sizes(), TensorOptions(t.dtype()).device(t.device()));
  if (copy_values) copy_(c, t);
  return c;
}

// NOTE [Host staging]: a contiguous host buffer for t: pinned for a CUDA tensor, plain memory for
// a CPU tensor under the testing hook.
Tensor host_buffer(const Tensor& t) {
  if (t.device().is_cuda()) {
#if TRIDENT_HAVE_CUDA
    return cuda::empty_pinned(t.sizes(), t.dtype());
#else
    TRIDENT_FAIL("a tensor on ", t.device(), " in a build of Trident without CUDA");
#endif
  }
  return empty(t.sizes(), t.dtype());
}

// Waits for the copies queued on the current stream of dev, when dev is a CUDA device. copy_
// between the host and a device synchronizes today (NOTE [Cross-device copies]); this keeps
// staging correct should those copies become asynchronous, for the price of synchronizing an
// idle stream.
void sync_copies(Device dev) {
#if TRIDENT_HAVE_CUDA
  if (dev.is_cuda()) cuda::current_stream(dev).synchronize();
#else
  (void)dev;
#endif
}

// dst (a host buffer) = src's values, complete before the backend reads dst.
void stage_in(const Tensor& dst, const Tensor& src) {
  copy_(dst, src);
  sync_copies(src.device());
}

// The byte ranges of two tensors' storage spans overlap.
bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0 || a.storage() != b.storage()) return false;
  auto span = [](const Tensor& t) {
    int64_t lo = t.storage_offset(), hi = t.storage_offset();
    for (int64_t d = 0; d < t.dim(); ++d) {
      const int64_t ext = (t.size(d) - 1) * t.stride(d);
      if (ext < 0) lo += ext; else hi += ext;
    }
    return std::pair<int64_t, int64_t>(lo * static_cast<int64_t>(t.element_size()),
                                       (hi + 1) * static_cast<int64_t>(t.element_size()));
  };
  const auto [alo, ahi] = span(a);
  const auto [blo, bhi] = span(b);
  return alo < bhi && blo < ahi;
}

// Appends "copy the staged result back into `user`, then mark it written" to the impl.
void finish_into(Work::Impl& impl, const Tensor& user, const Tensor& staged) {
  auto prev = std::move(impl.on_complete);
  impl.on_complete = [prev = std::move(prev), user, staged]() {
    if (prev) prev();
    if (staged.storage() != user.storage()) {
      copy_(user, staged);
      // A pinned buffer is released right after this (Work::Impl::progress clears keep_alive):
      // the copy must have read it by then (NOTE [Host staging]).
      sync_copies(user.device());
    } else {
      user.bump_version();  // written in place by the transport (NOTE [Version counter])
    }
  };
  impl.keep_alive.push_back(user);
  impl.keep_alive.push_back(staged);
}

std::vector<int64_t> check_counts(std::string_view op, const CommState& s, std::span<const int64_t> counts,
                                  int64_t mine, int64_t total, const char* mine_what, const char* total_what) {
  TRIDENT_CHECK(static_cast<int>(counts.size()) == s.size, op, " on ", s.where(), ": got ", counts.size(),
                " counts for a group of ", s.size);
  int64_t sum = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    TRIDENT_CHECK(counts[r] >= 0, op, " on ", s.where(), ": counts[", r, "] is negative (", counts[r], ")");
    sum += counts[r];
  }
  TRIDENT_CHECK(counts[static_cast<size_t>(s.rank)] == mine, op, " on ", s.where(), ": counts[", s.rank, "] is ",
                counts[static_cast<size_t>(s.rank)], " but ", mine_what, " has ", mine, " elements");
  TRIDENT_CHECK(sum == total, op, " on ", s.where(), ": counts sum to ", sum, " but ", total_what, " has ", total,
                " elements");
  return {counts.begin(), counts.end()};
}

}  // namespace

Tensor Communicator::buffer_for(const Tensor& t, bool copy_values) const {
  if (!host_staged(t)) return contiguous_buffer(t, copy_values);
  Tensor h = host_buffer(t);
  if (copy_values) stage_in(h, t);
  return h;
}

Work Communicator::launch(std::shared_ptr<Work::Impl> impl, std::string description) {
  TRIDENT_ASSERT(impl != nullptr, "a backend returned no work for ", description);
  impl->description = std::move(description);
  impl->comm = state_;
  impl->deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(state_->timeout);
  // Reap finished operations (their completion steps run now) and keep the new one.
  auto& fl = state_->in_flight;
  for (size_t i = 0; i < fl.size();) {
    if (fl[i]->done || fl[i]->progress()) {
      fl.erase(fl.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  fl.push_back(impl);
  return Work(impl);
}

void Communicator::synchronize() {
  // A copy: waiting may reap entries of the list.
  auto pending = state_->in_flight;
  for (auto& impl : pending) Work(impl).wait();
  std::erase_if(state_->in_flight, [](const auto& w) { return w->done; });
}

Work Communicator::all_reduce(const Tensor& tensor, ReduceOp op) {
  constexpr std::string_view name = "all_reduce";
  check_usable(name);
  check_tensor(name, "tensor", tensor);
  check_reducible(name, *state_, tensor.dtype(), op);
  NoGradGuard no_grad;
  const Tensor buf = buffer_for(tensor, true);
  OpCounters& c = state_->stats[CommOp::AllReduce];
  ++c.calls;
  c.bytes += static_cast<int64_t>(tensor.nbytes());
  auto impl = do_all_reduce(buf, op);
  finish_into(*impl, tensor, buf);
  return launch(std::move(impl), detail::str(name, " of ", tensor.nbytes(), " bytes (", tensor_str(tensor), ", ",
                                             reduce_op_name(op), ") on ", state_->where()));
}

Work Communicator::all_gather(const Tensor& output, const Tensor& input) {
  check_tensor("all_gather", "input", input);
  return gather_impl(output, input, std::vector<int64_t>(static_cast<size_t>(size()), input.numel()), true);
}

Work Communicator::all_gather(const Tensor& output, const Tensor& input, std::span<const int64_t> counts) {
  check_tensor("all_gather", "input", input);
  check_tensor("all_gather", "output", output);
  return gather_impl(output, input,
                     check_counts("all_gather", *state_, counts, input.numel(), output.numel(), "input", "output"), false);
}

Work Communicator::gather_impl(const Tensor& output, const Tensor& input, std::vector<int64_t> counts, bool even) {
  constexpr std::string_view name = "all_gather";
  check_usable(name);
  check_tensor(name, "input", input);
  check_tensor(name, "output", output);
  TRIDENT_CHECK(input.dtype() == output.dtype(), name, " on ", state_->where(), ": input is ", input.dtype(),
                " but output is ", output.dtype());
  if (even) {
    TRIDENT_CHECK(output.numel() == input.numel() * size(), name, " on ", state_->where(), ": output ",
                  tensor_str(output), " must have size() x input.numel() = ", size(), " x ", input.numel(), " = ",
                  input.numel() * size(), " elements, not ", output.numel());
  }
  NoGradGuard no_grad;
  // In place means exactly this rank's slot of a contiguous output; any other overlap is copied
  // first.
  int64_t displ = 0;
  for (int r = 0; r < rank(); ++r) displ += counts[static_cast<size_t>(r)];
  const bool in_place = output.is_contiguous() && input.is_contiguous() && input.storage() == output.storage() &&
                        input.storage_offset() == output.storage_offset() + displ;
  const Tensor out = buffer_for(output, false);
  Tensor in;
  if (in_place) {
    // The same slot of the output's buffer: the user's input itself when out is the user's
    // output, else the slot of the staged output, given the input's values (NOTE [Host staging]).
    in = out.as_strided(input.sizes(), contiguous_strides(input.sizes()), out.storage_offset() + displ);
    if (out.storage() != output.storage()) stage_in(in, input);
  } else {
    in = buffer_for(input, true);
    if (overlaps(in, out)) in = in.clone();
  }
  OpCounters& c = state_->stats[CommOp::AllGather];
  ++c.calls;
  c.bytes += static_cast<int64_t>(output.nbytes());
  auto impl = do_all_gather(out, in, counts);
  impl->keep_alive.push_back(in);
  finish_into(*impl, output, out);
  return launch(std::move(impl), detail::str(name, even ? "" : " (uneven)", " of ", output.nbytes(), " bytes (",
                                             tensor_str(input), " -> ", tensor_str(output), ") on ", state_->where()));
}

Work Communicator::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  check_tensor("reduce_scatter", "output", output);
  return scatter_impl(output, input, std::vector<int64_t>(static_cast<size_t>(size()), output.numel()), op, true);
}

Work Communicator::reduce_scatter(const Tensor& output, const Tensor& input, std::span<const int64_t> counts,
                                  ReduceOp op) {
  check_tensor("reduce_scatter", "input", input);
  check_tensor("reduce_scatter", "output", output);
  return scatter_impl(output, input,
                      check_counts("reduce_scatter", *state_, counts, output.numel(), input.numel(), "output", "input"),
                      op, false);
}

Work Communicator::scatter_impl(const Tensor& output, const Tensor& input, std::vector<int64_t> counts, ReduceOp op,
                                bool even) {
  constexpr std::string_view name = "reduce_scatter";
  check_usable(name);
  check_tensor(name, "input", input);
  check_tensor(name, "output", output);
  TRIDENT_CHECK(input.dtype() == output.dtype(), name, " on ", state_->where(), ": input is ", input.dtype(),
                " but output is ", output.dtype());
  check_reducible(name, *state_, input.dtype(), op);
  if (even) {
    TRIDENT_CHECK(input.numel() == output.numel() * size(), name, " on ", state_->where(), ": input ",
                  tensor_str(input), " must have size() x output.numel() = ", size(), " x ", output.numel(), " = ",
                  output.numel() * size(), " elements, not ", input.numel());
  }
  NoGradGuard no_grad;
  const Tensor in = buffer_for(input, true);
  Tensor out = buffer_for(output, false);
  // MPI's in-place reduce-scatter puts the result at the start of the buffer, not in this
  // rank's slot; an output inside the input is therefore received into its own buffer. (Staged
  // buffers never overlap: each argument gets its own.)
  if (overlaps(in, out)) out = empty(output.sizes(), TensorOptions(output.dtype()).device(output.device()));
  OpCounters& c = state_->stats[CommOp::ReduceScatter];
  ++c.calls;
  c.bytes += static_cast<int64_t>(input.nbytes());
  auto impl = do_reduce_scatter(out, in, counts, op);
  impl->keep_alive.push_back(in);
  finish_into(*impl, output, out);
  return launch(std::move(impl), detail::str(name, even ? "" : " (uneven)", " of ", input.nbytes(), " bytes (",
                                             tensor_str(input), " -> ", tensor_str(output), ", ", reduce_op_name(op),
                                             ") on ", state_->where()));
}

Work Communicator::broadcast(const Tensor& tensor, int root) {
  constexpr std::string_view name = "broadcast";
  check_usable(name);
  check_tensor(name, "tensor", tensor);
  TRIDENT_CHECK(root >= 0 && root < size(), name, " on ", state_->where(), ": root ", root, " is not a rank of the group");
  NoGradGuard no_grad;
  const Tensor buf = buffer_for(tensor, rank() == root);
  OpCounters& c = state_->stats[CommOp::Broadcast];
  ++c.calls;
  c.bytes += static_cast<int64_t>(tensor.nbytes());
  auto impl = do_broadcast(buf, root);
  finish_into(*impl, tensor, buf);
  return launch(std::move(impl), detail::str(name, " of ", tensor.nbytes(), " bytes (", tensor_str(tensor), ", root ",
                                             root, ") on ", state_->where()));
}

Work Communicator::barrier() {
  check_usable("barrier");
  ++state_->stats[CommOp::Barrier].calls;
  return launch(do_barrier(), detail::str("barrier on ", state_->where()));
}

Work Communicator::send(const Tensor& tensor, int peer) { return batch_send_recv({send_op(tensor, peer)}); }

Work Communicator::recv(const Tensor& tensor, int peer) { return batch_send_recv({recv_op(tensor, peer)}); }

Work Communicator::batch_send_recv(const std::vector<P2POp>& ops) {
  const std::string_view name = ops.size() == 1 ? (ops[0].kind == P2POp::Kind::Send ? "send" : "recv") : "batch_send_recv";
  check_usable(name);
  TRIDENT_CHECK(!ops.empty(), name, " on ", state_->where(), ": the batch is empty");
  NoGradGuard no_grad;
  std::vector<P2POp> staged;
  std::vector<std::pair<Tensor, Tensor>> outputs;  // (user, staged) of receives
  std::ostringstream what;
  what << name << " (";
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    const bool is_send = op.kind == P2POp::Kind::Send;
    check_tensor(name, is_send ? "a sent tensor" : "a received tensor", op.tensor);
    TRIDENT_CHECK(op.peer >= 0 && op.peer < size() && op.peer != rank(), name, " on ", state_->where(), ": peer ",
                  op.peer, " of transfer ", i, " is ", op.peer == rank() ? "this rank itself" : "not a rank of the group");
    Tensor buf = buffer_for(op.tensor, is_send);
    if (!is_send) outputs.emplace_back(op.tensor, buf);
    staged.push_back({op.kind, buf, op.peer});
    OpCounters& c = state_->stats[is_send ? CommOp::Send : CommOp::Recv];
    ++c.calls;
    c.bytes += static_cast<int64_t>(op.tensor.nbytes());
    what << (i ? ", " : "") << (is_send ? "send " : "recv ") << op.tensor.nbytes() << " bytes ("
         << tensor_str(op.tensor) << (is_send ? ") to rank " : ") from rank ") << op.peer;
  }
  what << ") on " << state_->where();
  auto impl = do_send_recv(staged);
  for (const P2POp& op : staged) impl->keep_alive.push_back(op.tensor);
  for (const auto& [user, buf] : outputs) finish_into(*impl, user, buf);
  return launch(std::move(impl), what.str());
}

std::shared_ptr<Communicator> Communicator::split(int color, int key, const std::string& name) {
  check_usable("split");
  TRIDENT_CHECK(color >= 0, "split of ", state_->where(), " into '", name, "': color must be >= 0, got ", color);
  std::vector<int> colors, keys;
  // An NCCL group carries CUDA tensors only, so it cannot all-gather these host tensors; its
  // do_split ignores colors and keys and splits its bootstrap group (MPI or Local), whose own
  // split() makes this same checked exchange (NOTE [NCCL backend]).
  if (backend() != Backend::NCCL) {
    // Exchange (color, key) through an operation that can time out (MPI_Comm_split cannot).
    Tensor mine = from_vector<int64_t>({color, key}, {2});
    Tensor all = empty({2 * static_cast<int64_t>(size())}, DType::I64);
    all_gather(all, mine).wait();
    const std::vector<int64_t> v = all.to_vector<int64_t>();
    for (int r = 0; r < size(); ++r) {
      colors.push_back(static_cast<int>(v[2 * static_cast<size_t>(r)]));
      keys.push_back(static_cast<int>(v[2 * static_cast<size_t>(r) + 1]));
    }
  }
  auto child = do_split(color, key, colors, keys, name);
  child->state_->timeout = state_->timeout;
  return child;
}

}  // namespace trident::parallel::comm
