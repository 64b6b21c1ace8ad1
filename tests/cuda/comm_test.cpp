// CUDA tensors on the MPI and Local backends, staged through pinned host memory (NOTE [Host
// staging], parallel/comm/communicator.h): every operation on contiguous and non-contiguous
// device tensors gives the values computed here (tests/parallel/staged_collectives.h), inputs a
// kernel has just written are read after it, results are on the device when wait() returns, and
// arguments on different devices in one call work. In cuda_tests (a plain process: the world is
// the Local backend) and, as cuda_comm_mpi_tests, under mpirun -np 2 and -np 4 (the MPI
// backend; every rank on cuda:0 is fine for staging). Skips without a GPU.
#include <gtest/gtest.h>

#include "core/cuda/stream.h"
#include "cuda/cuda_test_util.h"
#include "parallel/comm/local_communicator.h"
#include "parallel/staged_collectives.h"
#include "test_util.h"

using namespace trident;
using namespace trident::parallel::comm;
using namespace trident::testing::staging;

namespace {

const Device kGPU = Device::cuda(0);

std::shared_ptr<Communicator> local() { return make_local_communicator({"local", std::nullopt}); }

}  // namespace

TEST(CudaComm, EveryOperationInEveryLayoutOnTheLocalBackend) {
  TRIDENT_REQUIRE_CUDA();
  auto c = local();
  run_all_layouts(*c, kGPU, {kF32, kBF16, kI64});
  run_in_place(*c, kGPU, kF32);
  run_written_on_completion(*c, kGPU);
}

TEST(CudaComm, EveryOperationInEveryLayoutOnTheWorld) {
  // Local in a plain process; MPI under mpirun (cuda_comm_mpi_tests).
  TRIDENT_REQUIRE_CUDA();
  auto w = Communicator::world();
  run_all_layouts(*w, kGPU, {kF32, kBF16, kI64});
  for (DType d : {kF32, kBF16, kI64}) run_in_place(*w, kGPU, d);
  run_written_on_completion(*w, kGPU);
}

TEST(CudaComm, InputsAreReadAfterTheKernelsThatWroteThem) {
  // A large input computed by a kernel queued just before the collective: staging must wait for
  // it before the backend reads the host buffer.
  TRIDENT_REQUIRE_CUDA();
  auto w = Communicator::world();
  const int n = w->size(), r = w->rank();
  const int64_t len = int64_t{1} << 22;
  Tensor x = full({len}, static_cast<double>(r + 1), TensorOptions(kF32).device(kGPU));
  Tensor y = mul(add(x, x), 3.0);  // 6 (r + 1), queued on the current stream
  w->all_reduce(y, ReduceOp::Sum).wait();
  const std::vector<float> v = y.to_vector<float>();
  const float expected = 6.0f * static_cast<float>(n * (n + 1) / 2);
  for (size_t i = 0; i < v.size(); i += 4099) ASSERT_EQ(v[i], expected) << "element " << i;
  EXPECT_EQ(v.back(), expected);
}

TEST(CudaComm, ResultsAreOnTheDeviceWhenWaitReturns) {
  // Read right after wait() from another, non-blocking stream (which does not wait for the
  // default stream): the copy back into the user's tensor must be complete, contiguous or a view.
  TRIDENT_REQUIRE_CUDA();
  auto w = Communicator::world();
  const int n = w->size(), r = w->rank();
  const int64_t len = int64_t{1} << 21;
  Tensor base = full({2 * len}, static_cast<double>(r + 1), TensorOptions(kF32).device(kGPU));
  Tensor strided = base.as_strided({len}, {2}, 0);
  Tensor dense = full({len}, static_cast<double>(r + 1), TensorOptions(kF32).device(kGPU));
  Tensor own = full({len}, static_cast<double>(r + 1), TensorOptions(kF32).device(kGPU));
  Tensor gathered = full({n * len}, -1.0, TensorOptions(kF32).device(kGPU));
  w->all_reduce(strided, ReduceOp::Sum).wait();
  w->broadcast(dense, n - 1).wait();
  w->all_gather(gathered, own).wait();
  cuda::Stream s = cuda::Stream::create(0);
  Tensor a, b, g;
  {
    cuda::StreamGuard sg(s);
    a = strided.clone();
    b = dense.clone();
    g = gathered.clone();
  }
  s.synchronize();
  const float sum = static_cast<float>(n * (n + 1) / 2);
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>(), gv = g.to_vector<float>();
  for (size_t i = 0; i < av.size(); i += 997) ASSERT_EQ(av[i], sum) << "all_reduce of a view, element " << i;
  for (size_t i = 0; i < bv.size(); i += 997) ASSERT_EQ(bv[i], static_cast<float>(n)) << "broadcast, element " << i;
  for (size_t i = 0; i < gv.size(); i += 997)
    ASSERT_EQ(gv[i], static_cast<float>(i / static_cast<size_t>(len) + 1)) << "all_gather, element " << i;
  // The other half of the strided view's storage is untouched.
  const std::vector<float> all = base.to_vector<float>();
  for (size_t i = 1; i < all.size(); i += 2 * 997) ASSERT_EQ(all[i], static_cast<float>(r + 1)) << i;
}

TEST(CudaComm, ArgumentsOnDifferentDevicesInOneCall) {
  // Each argument is staged (CUDA) or not (CPU) on its own.
  TRIDENT_REQUIRE_CUDA();
  auto w = Communicator::world();
  const int n = w->size(), r = w->rank();
  const int64_t per = 6;
  auto mine = [&](int64_t i) { return value(r, i); };
  std::vector<double> gathered;
  for (int k = 0; k < n; ++k)
    for (int64_t i = 0; i < per; ++i) gathered.push_back(value(k, i));
  std::vector<double> reduced(static_cast<size_t>(per), 0.0);
  for (int64_t i = 0; i < per; ++i)
    for (int k = 0; k < n; ++k) reduced[static_cast<size_t>(i)] += value(k, r * per + i);
  for (const auto& [in_dev, out_dev] : {std::pair{kCPU, kGPU}, std::pair{kGPU, kCPU}}) {
    SCOPED_TRACE(detail::str("input on ", in_dev, ", output on ", out_dev));
    Laid in = make(Layout::Contiguous, 1, per, kF32, in_dev, mine);
    Laid out = filled(Layout::Transposed, n, per, kF32, out_dev, -1);
    w->all_gather(out.t, in.t).wait();
    expect_values(out, gathered, "all_gather");
    Laid rin = make(Layout::Strided, n, per, kF32, in_dev, mine);
    Laid rout = filled(Layout::Contiguous, 1, per, kF32, out_dev, -1);
    w->reduce_scatter(rout.t, rin.t).wait();
    expect_values(rout, reduced, "reduce_scatter");
  }
  if (n > 1) {
    // A CPU send and a CUDA receive in one batch.
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    Laid out = make(Layout::Contiguous, 2, 3, kI64, kCPU, mine);
    Laid in = filled(Layout::Transposed, 2, 3, kI64, kGPU, -1);
    w->batch_send_recv({recv_op(in.t, prev), send_op(out.t, next)}).wait();
    std::vector<double> e;
    for (int64_t i = 0; i < 6; ++i) e.push_back(value(prev, i));
    expect_values(in, e, "batch receive on the device");
  }
  w->barrier().wait();
}

TEST(CudaComm, CountersCountTheUsersBytes) {
  TRIDENT_REQUIRE_CUDA();
  auto c = local();
  Tensor t = zeros({3, 5}, TensorOptions(kBF16).device(kGPU));
  c->all_reduce(t.as_strided({5, 3}, {1, 5}, 0)).wait();
  c->broadcast(t, 0).wait();
  EXPECT_EQ(c->stats()[CommOp::AllReduce].bytes, 30);
  EXPECT_EQ(c->stats()[CommOp::Broadcast].bytes, 30);
}
