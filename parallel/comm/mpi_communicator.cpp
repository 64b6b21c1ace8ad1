#include "parallel/comm/mpi_communicator.h"

#include <climits>

#include "core/copy.h"
#include "core/factory.h"
#include "parallel/comm/mpi_env.h"
#include "trident_config.h"

#if TRIDENT_HAVE_MPI
#include <mpi.h>
#endif

namespace trident::parallel::comm {

#if !TRIDENT_HAVE_MPI

std::shared_ptr<Communicator> make_mpi_world(const CommOptions&) {
  TRIDENT_FAIL("the MPI backend is not built (TRIDENT_MPI found no MPI): install OpenMPI (libopenmpi-dev) and "
               "reconfigure");
}

#else

namespace {

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<size_t>(len));
}

#define TRIDENT_MPI_CALL(call, what)                                                               \
  do {                                                                                             \
    const int rc_ = (call);                                                                        \
    TRIDENT_CHECK(rc_ == MPI_SUCCESS, what, " failed: ", mpi_error_string(rc_), " (", #call, ")"); \
  } while (0)

// The MPI type that carries a dtype's bits. f16 and bf16 travel as 16-bit integers when they are
// only moved; reductions never see them (NOTE [Half reductions]).
MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::U8:
    case DType::Bool: return MPI_UINT8_T;
    case DType::F16:
    case DType::BF16: return MPI_UINT16_T;
  }
  TRIDENT_FAIL("no MPI type for dtype ", d);
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }

int mpi_count(int64_t n, const char* what) {
  TRIDENT_CHECK(n <= INT_MAX, what, ": ", n, " elements exceed MPI's int count (", INT_MAX,
                "); split the tensor into smaller transfers");
  return static_cast<int>(n);
}

// NOTE [Half reductions]: MPI has no f16 or bf16 type, and a user-defined MPI_Op that adds two
// bf16 buffers would round every partial sum back to 8 bits of mantissa: with a ring or a tree of
// n ranks each element would be rounded n - 1 times, in an order that depends on the algorithm
// MPI picks. Instead a half-precision reduction converts its input to f32 (exact), reduces in f32
// (MPI_FLOAT, MPI_SUM or MPI_MAX), divides there for an average, and rounds to the half type once
// (round to nearest even, core/half.h): the result is the f32 sum rounded once, as a serial f32
// accumulation would give, at the price of twice the bytes on the wire (the counters still count
// the half-precision payload, NOTE [Communication counters]). NCCL reduces bf16 natively.
Tensor f32_copy(const Tensor& t) {
  Tensor f = empty(t.sizes(), DType::F32);
  copy_(f, t);
  return f;
}

// x /= n in place on a contiguous f32/f64 tensor (an average: the sum divided by the group size,
// divided rather than multiplied by 1/n so a 3-rank average rounds like a serial mean).
void divide_in_place(const Tensor& t, int n) {
  const int64_t count = t.numel();
  if (t.dtype() == DType::F64) {
    double* p = t.data<double>();
    for (int64_t i = 0; i < count; ++i) p[i] /= n;
  } else {
    TRIDENT_ASSERT(t.dtype() == DType::F32, "average of ", t.dtype(), " should have been staged in f32");
    float* p = t.data<float>();
    const float fn = static_cast<float>(n);
    for (int64_t i = 0; i < count; ++i) p[i] /= fn;
  }
}

struct MpiWork final : Work::Impl {
  std::vector<MPI_Request> requests;
  // Receives of a batch: (index into requests, expected element count, dtype, peer), checked on
  // completion so that a sender's smaller tensor is an error, not silent garbage.
  struct RecvCheck {
    size_t request;
    int64_t count;
    DType dtype;
    int peer;
  };
  std::vector<RecvCheck> recv_checks;

  // Statuses of the requests, filled as each completes (receives are checked from them).
  std::vector<MPI_Status> statuses;
  size_t remaining = 0;

  bool poll() override {
    if (statuses.size() != requests.size()) {
      statuses.resize(requests.size());
      remaining = requests.size();
    }
    // MPI_Test per request rather than MPI_Testall: each status is kept from the call that
    // completed its request, and completed requests are not tested again (they are
    // MPI_REQUEST_NULL then).
    for (size_t i = 0; i < requests.size() && remaining > 0; ++i) {
      if (requests[i] == MPI_REQUEST_NULL) continue;
      int flag = 0;
      TRIDENT_MPI_CALL(MPI_Test(&requests[i], &flag, &statuses[i]), description);
      if (flag) --remaining;
    }
    if (remaining > 0) return false;
    // Reported once: the failed operation is complete, and later polls (the communicator reaps
    // its in-flight list) see it done.
    const std::vector<RecvCheck> checks = std::move(recv_checks);
    recv_checks.clear();
    for (const RecvCheck& c : checks) {
      int got = 0;
      MPI_Get_count(&statuses[c.request], mpi_type(c.dtype), &got);
      TRIDENT_CHECK(got == c.count, description, ": received ", got, " elements from rank ", c.peer, " but the tensor has ",
                    c.count, " (the sender's tensor has another size)");
    }
    return true;
  }
};

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of comm (freed on destruction).
  MpiCommunicator(MPI_Comm comm, const CommOptions& options) : Communicator(make_state(comm, options), world_ranks_of(comm)), comm_(comm) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }

  ~MpiCommunicator() override {
    if (!mpi_initialized()) return;  // MPI already finalized: nothing can be freed
    const auto& s = state();
    if (!s->aborted) {
      try {
        synchronize();
      } catch (const Error&) {
        // A timeout in a destructor cannot be thrown; the communicator is now aborted.
      }
    }
    if (s->aborted) {
      // NOTE [Work and timeouts]: MPI may still write into the buffers of the operation that
      // never completed, so they (and the MPI communicator) are deliberately leaked; the process
      // ends the job at exit anyway.
      new std::vector<std::shared_ptr<Work::Impl>>(s->in_flight);
      return;
    }
    MPI_Comm_free(&comm_);
  }

 protected:
  std::shared_ptr<Work::Impl> do_all_reduce(const Tensor& tensor, ReduceOp op) override {
    auto w = std::make_shared<MpiWork>();
    const bool staged = is_reduced_float(tensor.dtype());
    const Tensor buf = staged ? f32_copy(tensor) : tensor;
    const int n = mpi_count(buf.numel(), "all_reduce");
    w->requests.resize(1);
    TRIDENT_MPI_CALL(MPI_Iallreduce(MPI_IN_PLACE, buf.data_ptr(), n, mpi_type(buf.dtype()), mpi_op(op), comm_,
                                    &w->requests[0]),
                     "MPI_Iallreduce on " + state()->where());
    w->keep_alive = {tensor, buf};
    const int size = this->size();
    w->on_complete = [tensor, buf, op, staged, size] {
      if (op == ReduceOp::Average) divide_in_place(buf, size);
      if (staged) copy_(tensor, buf);
    };
    return w;
  }

  std::shared_ptr<Work::Impl> do_all_gather(const Tensor& output, const Tensor& input,
                                            const std::vector<int64_t>& counts) override {
    auto w = std::make_shared<MpiWork>();
    const MPI_Datatype type = mpi_type(output.dtype());
    const size_t elt = output.element_size();
    std::vector<int> rcounts, displs;
    int64_t off = 0;
    bool even = true;
    for (int64_t c : counts) {
      rcounts.push_back(mpi_count(c, "all_gather"));
      displs.push_back(mpi_count(off, "all_gather"));
      off += c;
      even = even && c == counts[0];
    }
    char* out = static_cast<char*>(output.data_ptr());
    const bool in_place = output.numel() > 0 &&
                          input.data_ptr() == out + static_cast<size_t>(displs[static_cast<size_t>(rank())]) * elt;
    const void* send = in_place ? MPI_IN_PLACE : input.data_ptr();
    w->requests.resize(1);
    if (even) {
      TRIDENT_MPI_CALL(MPI_Iallgather(send, rcounts[0], type, out, rcounts[0], type, comm_, &w->requests[0]),
                       "MPI_Iallgather on " + state()->where());
    } else {
      TRIDENT_MPI_CALL(MPI_Iallgatherv(send, rcounts[static_cast<size_t>(rank())], type, out, rcounts.data(),
                                       displs.data(), type, comm_, &w->requests[0]),
                       "MPI_Iallgatherv on " + state()->where());
    }
    w->keep_alive = {output, input};
    return w;
  }

  std::shared_ptr<Work::Impl> do_reduce_scatter(const Tensor& output, const Tensor& input,
                                                const std::vector<int64_t>& counts, ReduceOp op) override {
    auto w = std::make_shared<MpiWork>();
    const bool staged = is_reduced_float(input.dtype());
    const Tensor in = staged ? f32_copy(input) : input;
    const Tensor out = staged ? empty(output.sizes(), DType::F32) : output;
    const MPI_Datatype type = mpi_type(in.dtype());
    std::vector<int> rcounts;
    bool even = true;
    for (int64_t c : counts) {
      rcounts.push_back(mpi_count(c, "reduce_scatter"));
      even = even && c == counts[0];
    }
    (void)mpi_count(input.numel(), "reduce_scatter");
    w->requests.resize(1);
    if (even) {
      TRIDENT_MPI_CALL(MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(), rcounts[0], type, mpi_op(op), comm_,
                                                 &w->requests[0]),
                       "MPI_Ireduce_scatter_block on " + state()->where());
    } else {
      TRIDENT_MPI_CALL(MPI_Ireduce_scatter(in.data_ptr(), out.data_ptr(), rcounts.data(), type, mpi_op(op), comm_,
                                           &w->requests[0]),
                       "MPI_Ireduce_scatter on " + state()->where());
    }
    w->keep_alive = {input, in, output, out};
    const int size = this->size();
    w->on_complete = [output, out, op, staged, size] {
      if (op == ReduceOp::Average) divide_in_place(out, size);
      if (staged) copy_(output, out);
    };
    return w;
  }

  std::shared_ptr<Work::Impl> do_broadcast(const Tensor& tensor, int root) override {
    auto w = std::make_shared<MpiWork>();
    w->requests.resize(1);
    TRIDENT_MPI_CALL(MPI_Ibcast(tensor.data_ptr(), mpi_count(tensor.numel(), "broadcast"), mpi_type(tensor.dtype()), root,
                                comm_, &w->requests[0]),
                     "MPI_Ibcast on " + state()->where());
    w->keep_alive = {tensor};
    return w;
  }

  std::shared_ptr<Work::Impl> do_barrier() override {
    auto w = std::make_shared<MpiWork>();
    w->requests.resize(1);
    TRIDENT_MPI_CALL(MPI_Ibarrier(comm_, &w->requests[0]), "MPI_Ibarrier on " + state()->where());
    return w;
  }

  std::shared_ptr<Work::Impl> do_send_recv(const std::vector<P2POp>& ops) override {
    auto w = std::make_shared<MpiWork>();
    w->requests.resize(ops.size());
    // One tag for everything: transfers between two ranks match in issue order (MPI's
    // non-overtaking rule), as NCCL's do.
    constexpr int kTag = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      const P2POp& op = ops[i];
      const int n = mpi_count(op.tensor.numel(), "send/recv");
      if (op.kind == P2POp::Kind::Send) {
        TRIDENT_MPI_CALL(MPI_Isend(op.tensor.data_ptr(), n, mpi_type(op.tensor.dtype()), op.peer, kTag, comm_,
                                   &w->requests[i]),
                         "MPI_Isend on " + state()->where());
      } else {
        TRIDENT_MPI_CALL(MPI_Irecv(op.tensor.data_ptr(), n, mpi_type(op.tensor.dtype()), op.peer, kTag, comm_,
                                   &w->requests[i]),
                         "MPI_Irecv on " + state()->where());
        w->recv_checks.push_back({i, op.tensor.numel(), op.tensor.dtype(), op.peer});
      }
      w->keep_alive.push_back(op.tensor);
    }
    return w;
  }

  std::shared_ptr<Communicator> do_split(int color, int key, const std::vector<int>&, const std::vector<int>&,
                                         const std::string& name) override {
    MPI_Comm child = MPI_COMM_NULL;
    TRIDENT_MPI_CALL(MPI_Comm_split(comm_, color, key, &child), "MPI_Comm_split of " + state()->where());
    return std::make_shared<MpiCommunicator>(child, CommOptions{name, state()->timeout});
  }

 private:
  static std::shared_ptr<CommState> make_state(MPI_Comm comm, const CommOptions& options) {
    auto s = std::make_shared<CommState>();
    s->name = options.name.empty() ? "mpi" : options.name;
    s->backend = Backend::MPI;
    MPI_Comm_rank(comm, &s->rank);
    MPI_Comm_size(comm, &s->size);
    MPI_Comm_rank(MPI_COMM_WORLD, &s->world_rank);
    s->timeout = options.timeout ? *options.timeout : default_timeout();
    return s;
  }

  static std::vector<int> world_ranks_of(MPI_Comm comm) {
    int n = 0;
    MPI_Comm_size(comm, &n);
    MPI_Group group, world;
    MPI_Comm_group(comm, &group);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    std::vector<int> mine(static_cast<size_t>(n)), theirs(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) mine[static_cast<size_t>(r)] = r;
    MPI_Group_translate_ranks(group, n, mine.data(), world, theirs.data());
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    return theirs;
  }

  MPI_Comm comm_;
};

}  // namespace

std::shared_ptr<Communicator> make_mpi_world(const CommOptions& options) {
  ensure_mpi_initialized();
  MPI_Comm comm = MPI_COMM_NULL;
  TRIDENT_MPI_CALL(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup of MPI_COMM_WORLD");
  return std::make_shared<MpiCommunicator>(comm, options);
}

#endif  // TRIDENT_HAVE_MPI

}  // namespace trident::parallel::comm
