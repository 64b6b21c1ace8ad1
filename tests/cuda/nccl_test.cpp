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

TEST(NcclOneRank, ATimedOutOperationAbortsTheCommunicatorForGood) {
  // The compute stream is held by a host function for 1.5 s, so the all-reduce (which waits for
  // it) cannot finish within the 0.2 s timeout: wait() throws CommTimeout, ncclCommAbort runs,
  // every later call is refused, and the timed-out Work never reports success, even after its
  // event has fired.
  TRIDENT_REQUIRE_CUDA();
  auto c = nccl_of_one();
  c->set_timeout(Seconds(0.2));
  Tensor t = iota(64, kF32);
  auto sleep_host = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(1500)); };
  ASSERT_EQ(cudaLaunchHostFunc(cuda::current_stream(0).handle(), sleep_host, nullptr), cudaSuccess);
  Work w = c->all_reduce(t);
  EXPECT_THROW(w.wait(), CommTimeout);
  EXPECT_TRUE(c->aborted());
  trident::testing::expect_error([&] { c->all_reduce(t); }, {"aborted"});
  cuda::synchronize(0);
  EXPECT_THROW(w.wait(), Error);
  EXPECT_FALSE(w.completed());
}
