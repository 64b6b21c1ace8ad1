// The NCCL backend (NOTE [NCCL backend], parallel/comm/communicator.h) on one GPU: a group of one
// rank, bootstrapped over the Local backend. One rank cannot show that values cross GPUs (that
// needs two GPUs and mpirun), but it runs every code path of nccl_communicator.cpp that does not
// depend on the group size: the unique id and ncclCommInitRank, each collective's NCCL call with
// its dtype mapping and in-place or out-of-place buffers, the stream ordering (an input a kernel
// has just written is read after it; the result is there when wait() returns), the staging of
// non-contiguous tensors on the device, split, the device checks, and a timeout's ncclCommAbort.
// Expected values: with one rank every reduction (sum, average, max) of a tensor is the tensor,
// an all-gather is a copy, a broadcast keeps it. Skips without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "core/cuda/stream.h"
#include "cuda/cuda_test_util.h"
#include "parallel/comm/local_communicator.h"
#include "parallel/comm/nccl_communicator.h"
#include "test_util.h"

using namespace trident;
using namespace trident::parallel::comm;

namespace {

const Device kGPU = Device::cuda(0);

std::shared_ptr<Communicator> nccl_of_one(const std::string& name = "nccl1") {
  cuda::set_device(0);
  return make_nccl_communicator(make_local_communicator({name + ".bootstrap", std::nullopt}), {name, std::nullopt});
}

// 0, 1, ..., n - 1 (exact in every dtype for n <= 256; bool: 0, 1, 1, ...), on the GPU.
Tensor iota(int64_t n, DType d) { return arange(0, static_cast<double>(n), 1.0, kF64).to(d).to(kGPU); }

std::vector<double> iota_values(int64_t n, DType d) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(d == kBool ? (i != 0 ? 1.0 : 0.0) : static_cast<double>(i));
  return v;
}

// Threads of this process (NCCL starts proxy and service threads per communicator; a leaked
// communicator keeps them).
int64_t thread_count() {
  int64_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

struct DoneWork final : Work::Impl {
  bool poll() override { return true; }
};

// A bootstrap that claims a group of two of which this process is rank 0 while no rank 1 exists:
// rank 0's unique id "reaches" everyone (it is the root), and NCCL's init then waits for a rank
// that never comes: the init timeout of NOTE [NCCL non-blocking], provoked on one GPU.
class LonelyBootstrap final : public Communicator {
 public:
  LonelyBootstrap() : Communicator(make_state(), {0, 1}) {}

 protected:
  std::shared_ptr<Work::Impl> do_all_reduce(const Tensor&, ReduceOp) override { return unused(); }
  std::shared_ptr<Work::Impl> do_all_gather(const Tensor&, const Tensor&, const std::vector<int64_t>&) override {
    return unused();
  }
  std::shared_ptr<Work::Impl> do_reduce_scatter(const Tensor&, const Tensor&, const std::vector<int64_t>&,
                                                ReduceOp) override {
    return unused();
  }
  std::shared_ptr<Work::Impl> do_broadcast(const Tensor&, int root) override {
    EXPECT_EQ(root, 0);
    return std::make_shared<DoneWork>();  // the root keeps its own bytes
  }
  std::shared_ptr<Work::Impl> do_barrier() override { return unused(); }
  std::shared_ptr<Work::Impl> do_send_recv(const std::vector<P2POp>&) override { return unused(); }
  std::shared_ptr<Communicator> do_split(int, int, const std::vector<int>&, const std::vector<int>&,
                                         const std::string&) override {
    TRIDENT_FAIL("LonelyBootstrap cannot split");
  }

 private:
  static std::shared_ptr<CommState> make_state() {
    auto s = std::make_shared<CommState>();
    s->name = "lonely";
    s->backend = Backend::Local;
    s->size = 2;
    return s;
  }
  static std::shared_ptr<Work::Impl> unused() { TRIDENT_FAIL("LonelyBootstrap only broadcasts the unique id"); }
};

}  // namespace

TEST(NcclOneRank, CreatesAGroupOfOne) {
  TRIDENT_REQUIRE_CUDA();
  auto c = nccl_of_one();
  EXPECT_EQ(c->backend(), Backend::NCCL);
  EXPECT_EQ(c->size(), 1);
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->name(), "nccl1");
  EXPECT_FALSE(c->aborted());
}

TEST(NcclOneRank, EveryCollectiveInEveryDType) {
  TRIDENT_REQUIRE_CUDA();
  auto c = nccl_of_one();
  const int64_t n = 77;  // not a multiple of anything NCCL might round to
  for (DType d : {kF32, kF64, kF16, kBF16, DType::I32, kI64, kU8}) {
    SCOPED_TRACE(detail::str(d));
    const std::vector<double> want = iota_values(n, d);
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Average}) {
      if (op == ReduceOp::Average && !is_floating(d)) continue;
      Tensor t = iota(n, d);
      c->all_reduce(t, op).wait();
      EXPECT_EQ(t.to_vector<double>(), want) << "all_reduce " << reduce_op_name(op);
    }
    Tensor b = iota(n, d);
    c->broadcast(b, 0).wait();
    EXPECT_EQ(b.to_vector<double>(), want) << "broadcast";
    Tensor out = full({n}, -1.0, TensorOptions(d).device(kGPU));
    c->all_gather(out, iota(n, d)).wait();
    EXPECT_EQ(out.to_vector<double>(), want) << "all_gather";
    Tensor rs = full({n}, -1.0, TensorOptions(d).device(kGPU));
    c->reduce_scatter(rs, iota(n, d)).wait();
    EXPECT_EQ(rs.to_vector<double>(), want) << "reduce_scatter";
    const std::vector<int64_t> counts{n};
    Tensor outv = full({n}, -1.0, TensorOptions(d).device(kGPU));
    c->all_gather(outv, iota(n, d), counts).wait();
    EXPECT_EQ(outv.to_vector<double>(), want) << "all_gather with counts";
  }
  // Bool moves (all_gather, broadcast) as u8.
  Tensor bo = full({n}, 0.0, TensorOptions(kBool).device(kGPU));
  c->all_gather(bo, iota(n, kBool)).wait();
  EXPECT_EQ(bo.to_vector<double>(), iota_values(n, kBool));
  c->barrier().wait();
  EXPECT_EQ(c->stats()[CommOp::AllReduce].calls, 4 * 3 + 3 * 2);
  EXPECT_EQ(c->stats()[CommOp::Barrier].calls, 1);
}

TEST(NcclOneRank, InPlaceAllGatherAndReduceScatter) {
  TRIDENT_REQUIRE_CUDA();
  auto c = nccl_of_one();
  // all_gather whose input is this rank's slot of the output (NCCL's in-place form), and a
  // reduce_scatter whose output is this rank's slot of the input (copied apart by the base).
  Tensor buf = iota(40, kF32);
  c->all_gather(buf, buf.as_strided({40}, {1}, 0)).wait();
  EXPECT_EQ(buf.to_vector<double>(), iota_values(40, kF32));
  Tensor in = iota(40, kF32);
  c->reduce_scatter(in.as_strided({40}, {1}, 0), in).wait();
  EXPECT_EQ(in.to_vector<double>(), iota_values(40, kF32));
}

TEST(NcclOneRank, NonContiguousArgumentsAreStagedOnTheDevice) {
  TRIDENT_REQUIRE_CUDA();
  auto c = nccl_of_one();
  // output: a [2, 3] transposed view of a [3, 2] buffer; it receives the input in row-major
  // order of its own shape, element (i, j) = 3 i + j, at buffer position j * 2 + i.
  Tensor base = full({6}, -1.0, TensorOptions(kF32).device(kGPU));
  Tensor out = base.as_strided({2, 3}, {1, 2}, 0);
  c->all_gather(out, iota(6, kF32).as_strided({2, 3}, {3, 1}, 0)).wait();
  EXPECT_EQ(out.to_vector<double>(), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(base.to_vector<double>(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  // Every other element of a buffer, all-reduced in place: the rest stays.
  Tensor wide = iota(10, kF32);
  c->all_reduce(wide.as_strided({5}, {2}, 1), ReduceOp::Max).wait();
  EXPECT_EQ(wide.to_vector<double>(), iota_values(10, kF32));
}

TEST(NcclOneRank, InputsAreReadAfterTheKernelsThatWroteThem) {
  // A large input computed by kernels queued just before the collective on the compute stream:
  // the NCCL stream must wait for them (the ready event), and the out-of-place result must be
  // complete when wait() returns, read from another non-blocking stream.
  TRIDENT_REQUIRE_CUDA();
  auto c = nccl_of_one();
  const int64_t len = int64_t{1} << 24;
  Tensor x = full({len}, 1.0, TensorOptions(kF32).device(kGPU));
  Tensor out = full({len}, -1.0, TensorOptions(kF32).device(kGPU));
  Tensor y = mul(add(mul(x, 2.0), x), 2.0);  // 6, queued on the current stream
  c->all_gather(out, y).wait();
  cuda::Stream s = cuda::Stream::create(0);
  Tensor copy;
  {
    cuda::StreamGuard sg(s);
    copy = out.clone();
  }
  s.synchronize();
  const std::vector<float> v = copy.to_vector<float>();
  for (size_t i = 0; i < v.size(); i += 4099) ASSERT_EQ(v[i], 6.0f) << "element " << i;
  EXPECT_EQ(v.back(), 6.0f);
}

TEST(NcclOneRank, SplitGivesAnNcclGroup) {
  // split() of an NCCL group splits its bootstrap; the base's (color, key) exchange must not go
  // through NCCL with host tensors.
  TRIDENT_REQUIRE_CUDA();
  auto c = nccl_of_one();
  c->set_timeout(Seconds(42.0));
  auto child = c->split(3, 0, "child");
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(child->backend(), Backend::NCCL);
  EXPECT_EQ(child->name(), "child");
  EXPECT_EQ(child->size(), 1);
  EXPECT_EQ(child->timeout().count(), 42.0);
  Tensor t = iota(9, kBF16);
  child->all_reduce(t, ReduceOp::Average).wait();
  EXPECT_EQ(t.to_vector<double>(), iota_values(9, kBF16));
}

TEST(NcclOneRank, RefusesTensorsOffItsDevice) {
  TRIDENT_REQUIRE_CUDA();
  auto c = nccl_of_one();
  Tensor cpu = zeros({4});
  trident::testing::expect_error([&] { c->all_reduce(cpu); }, {"NCCL backend carries CUDA tensors"});
  if (cuda_device_count() >= 2) {
    Tensor other = zeros({4}, TensorOptions(kF32).device(Device::cuda(1)));
    trident::testing::expect_error([&] { c->all_reduce(other); }, {"created on cuda:0", "cuda:1"});
  }
  EXPECT_FALSE(c->aborted());
}

namespace {

// An all-reduce of t behind a compute stream held by a host function for 1.5 s, under a 0.2 s
// timeout: its wait() has thrown CommTimeout (checked) when this returns.
Work timed_out_all_reduce(Communicator& c, const Tensor& t) {
  c.set_timeout(Seconds(0.2));
  auto sleep_host = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(1500)); };
  EXPECT_EQ(cudaLaunchHostFunc(cuda::current_stream(0).handle(), sleep_host, nullptr), cudaSuccess);
  Work w = c.all_reduce(t);
  EXPECT_THROW(w.wait(), CommTimeout);
  return w;
}

}  // namespace

TEST(NcclOneRank, ATimedOutOperationAbortsTheCommunicatorForGood) {
  // The compute stream is held by a host function for 1.5 s, so the all-reduce (which waits for
  // it) cannot finish within the 0.2 s timeout: wait() throws CommTimeout, ncclCommAbort runs,
  // every later call is refused, and the timed-out Work never reports success, even after its
  // event has fired.
  TRIDENT_REQUIRE_CUDA();
  auto c = nccl_of_one();
  Tensor t = iota(64, kF32);
  Work w = timed_out_all_reduce(*c, t);
  EXPECT_TRUE(c->aborted());
  trident::testing::expect_error([&] { c->all_reduce(t); }, {"aborted"});
  cuda::synchronize(0);
  EXPECT_THROW(w.wait(), Error);
  EXPECT_FALSE(w.completed());
}

// ---- NOTE [NCCL non-blocking]: creation and destruction ----

TEST(NcclOneRank, ManyCommunicatorsCreatedAndDestroyedDoNotLeak) {
  // Each destroyed communicator must release its ncclComm_t (finalize + destroy), its stream and
  // NCCL's threads: before the Work/state cycle was broken none was ever destroyed.
  TRIDENT_REQUIRE_CUDA();
  const int64_t live0 = live_nccl_communicators();
  { nccl_of_one("warm-up")->all_reduce(iota(8, kF32)).wait(); }
  EXPECT_EQ(live_nccl_communicators(), live0);
  const int64_t threads0 = thread_count();
  for (int i = 0; i < 25; ++i) {
    auto c = nccl_of_one("loop" + std::to_string(i));
    EXPECT_EQ(live_nccl_communicators(), live0 + 1);
    Tensor t = iota(33, kF32);
    if (i % 2 == 0) {
      c->all_reduce(t).wait();
    } else {
      (void)c->all_reduce(t);  // dropped unwaited: the destructor waits for it
    }
  }
  EXPECT_EQ(live_nccl_communicators(), live0);
  EXPECT_LE(thread_count(), threads0 + 2) << "threads of destroyed NCCL communicators are still running";
}

TEST(NcclOneRank, DestroyingWaitsForAnOperationInFlight) {
  // The compute stream is held 0.4 s by a host function; the all-reduce queued behind it is in
  // flight when the communicator goes: its destructor waits for it (within the timeout), then
  // finalizes and destroys, and the result is there.
  TRIDENT_REQUIRE_CUDA();
  const int64_t live0 = live_nccl_communicators();
  auto c = nccl_of_one();
  Tensor t = iota(64, kF32);
  auto sleep_host = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(400)); };
  ASSERT_EQ(cudaLaunchHostFunc(cuda::current_stream(0).handle(), sleep_host, nullptr), cudaSuccess);
  const auto start = std::chrono::steady_clock::now();
  (void)c->all_reduce(t);
  c.reset();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(waited, 0.3) << "the communicator was destroyed before its operation completed";
  EXPECT_EQ(live_nccl_communicators(), live0);
  EXPECT_EQ(t.to_vector<double>(), iota_values(64, kF32));
}

TEST(NcclOneRank, AWorkOutlivesItsCommunicator) {
  TRIDENT_REQUIRE_CUDA();
  auto c = nccl_of_one();
  Tensor t = iota(16, kBF16);
  Work w = c->all_reduce(t, ReduceOp::Average);
  c.reset();  // waits for w's operation, destroys the NCCL communicator
  w.wait();   // completed: returns at once
  EXPECT_TRUE(w.completed());
  EXPECT_EQ(t.to_vector<double>(), iota_values(16, kBF16));
}

TEST(NcclOneRank, DestroyingAfterATimeoutAbortsWithoutWaiting) {
  // After a timeout the destructor must neither wait for the stuck operation nor finalize (which
  // would wait for it too): ncclCommAbort, at once.
  TRIDENT_REQUIRE_CUDA();
  const int64_t live0 = live_nccl_communicators();
  auto c = nccl_of_one();
  Tensor t = iota(64, kF32);
  Work w = timed_out_all_reduce(*c, t);
  const auto start = std::chrono::steady_clock::now();
  c.reset();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(took, 1.0) << "the destructor of an aborted communicator waited for its stuck operation";
  EXPECT_EQ(live_nccl_communicators(), live0);
  cuda::synchronize(0);
}

TEST(NcclOneRank, InitTimesOutWhenARankNeverJoins) {
  // NCCL's init of a group of two whose rank 1 never comes (LonelyBootstrap): without the
  // non-blocking init this hangs forever in ncclCommInitRank. With it: CommTimeout after the
  // timeout, naming the step, the group, the rank, the device and the timeout, and the
  // half-made communicator aborted. (An operation that waits in its issue for a peer to connect
  // cannot be provoked with one rank: that needs two GPUs.)
  TRIDENT_REQUIRE_CUDA();
  cuda::set_device(0);
  const int64_t live0 = live_nccl_communicators();
  const auto start = std::chrono::steady_clock::now();
  try {
    make_nccl_communicator(std::make_shared<LonelyBootstrap>(), {"lonely.nccl", Seconds(0.5)});
    ADD_FAILURE() << "the init of a group whose rank 1 never joins returned";
  } catch (const CommTimeout& e) {
    const std::string m = e.message();
    for (const char* part : {"ncclCommInitRank", "group 'lonely.nccl'", "rank 0 of 2", "cuda:0", "timed out after 0.5 s",
                             "did not create its NCCL communicator", "ncclCommAbort"})
      EXPECT_NE(m.find(part), std::string::npos) << "missing '" << part << "' in: " << m;
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(took, 10.0);
  EXPECT_EQ(live_nccl_communicators(), live0);
}
