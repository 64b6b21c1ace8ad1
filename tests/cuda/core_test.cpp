// The CUDA core on a real device: streams and events, the caching allocator under tensors,
// pinned memory, copies in every direction (with conversion, views and broadcasting), fill_,
// add_into_ and factories. Skips without a GPU.
#include <gtest/gtest.h>

#include "core/cuda/allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "cuda/cuda_test_util.h"
#include "test_util.h"
#include "trident_config.h"
#if TRIDENT_HAVE_DATA
#include "data/loader.h"
#endif

using namespace trident;

namespace {
const Device kGPU = Device::cuda(0);

Tensor randn_cpu(const Shape& s, DType dt, uint64_t seed) {
  Generator g(seed);
  return randn(s, kF64, &g).to(dt);
}
}  // namespace

TEST(CudaCore, ErrorsNameTheCallAndTheLocation) {
  // Needs no device: the error path of the macro.
  try {
    TRIDENT_CUDA_CHECK(cudaErrorInvalidValue);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("cudaErrorInvalidValue"), std::string::npos) << e.message();
    EXPECT_NE(std::string(e.what()).find("core_test.cpp"), std::string::npos) << e.what();
  }
  EXPECT_THROW(TRIDENT_CUBLAS_CHECK(7), Error);
  EXPECT_THROW(TRIDENT_CUDNN_CHECK(3), Error);
  EXPECT_THROW(TRIDENT_NCCL_CHECK(2), Error);
}

TEST(CudaCore, DeviceGuardAndCurrentStream) {
  TRIDENT_REQUIRE_CUDA();
  {
    cuda::DeviceGuard g(0);
    EXPECT_EQ(cuda::current_device(), 0);
  }
  EXPECT_THROW(cuda::DeviceGuard g(cuda_device_count()), Error);
  EXPECT_TRUE(cuda::current_stream(0).is_default());
  cuda::Stream s = cuda::Stream::create(0);
  EXPECT_FALSE(s.is_default());
  {
    cuda::StreamGuard sg(s);
    EXPECT_EQ(cuda::current_stream(0), s);
  }
  EXPECT_TRUE(cuda::current_stream(0).is_default());
}

TEST(CudaCore, EventsOrderStreamsAndTime) {
  TRIDENT_REQUIRE_CUDA();
  cuda::Stream s = cuda::Stream::create(0);
  Tensor host = randn_cpu({1 << 20}, kF32, 1);
  Tensor a = host.to(kGPU);
  Tensor b;
  cuda::Event start(true), stop(true);
  {
    cuda::StreamGuard sg(s);
    start.record();
    b = empty({1 << 20}, TensorOptions(kF32).device(kGPU));
    copy_(b, a);
    stop.record();
  }
  stop.wait(cuda::current_stream(0));
  stop.synchronize();
  EXPECT_TRUE(stop.query());
  EXPECT_GE(start.elapsed_ms(stop), 0.0f);
  EXPECT_EQ(b.to(kCPU).to_vector<float>(), host.to_vector<float>());
  cuda::Event untimed;
  untimed.record(s);
  EXPECT_THROW(untimed.elapsed_ms(stop), Error);
}

TEST(CudaCore, TensorsComeFromTheCachingAllocatorAndAreCounted) {
  TRIDENT_REQUIRE_CUDA();
  const MemoryStats before = memory_stats(kGPU);
  reset_peak_memory_stats(kGPU);
  void* first = nullptr;
  {
    Tensor t = empty({1000}, TensorOptions(kF32).device(kGPU));
    first = t.data_ptr();
    EXPECT_EQ(memory_stats(kGPU).current_bytes - before.current_bytes, 4000);
    EXPECT_GE(memory_stats(kGPU).reserved_bytes, memory_stats(kGPU).current_bytes);
  }
  EXPECT_EQ(memory_stats(kGPU).current_bytes, before.current_bytes);
  EXPECT_EQ(memory_stats(kGPU).peak_bytes - before.current_bytes, 4000);
  Tensor again = empty({1000}, TensorOptions(kF32).device(kGPU));
  EXPECT_EQ(again.data_ptr(), first);  // served from the cache
  again = Tensor();
  empty_cache(kGPU);
  EXPECT_EQ(cuda::caching_allocator(0).stats().cached_blocks, 0);
}

TEST(CudaCore, OutOfMemoryIsANamedError) {
  TRIDENT_REQUIRE_CUDA();
  const std::string msg = trident::testing::error_message([] { empty({int64_t{1} << 50}, TensorOptions(kU8).device(kGPU)); });
  EXPECT_NE(msg.find("out of memory on cuda:0"), std::string::npos) << msg;
  // The device is still usable afterwards.
  EXPECT_EQ(ones({4}, TensorOptions(kF32).device(kGPU)).to(kCPU).to_vector<float>(), std::vector<float>(4, 1.f));
}

TEST(CudaCore, CopiesInEveryDirectionWithConversionViewsAndBroadcast) {
  TRIDENT_REQUIRE_CUDA();
  Tensor x = randn_cpu({5, 7, 3}, kF32, 2);
  // Round trip, plain.
  EXPECT_EQ(x.to(kGPU).to(kCPU).to_vector<float>(), x.to_vector<float>());
  // Dtype conversions on the device match the CPU's bit for bit.
  for (DType dt : {kF64, kF16, kBF16, kI32, kI64, kU8, kBool}) {
    Tensor want = x.to(dt);
    Tensor got = x.to(kGPU).to(dt).to(kCPU);
    EXPECT_EQ(got.dtype(), dt);
    EXPECT_EQ(got.to(kF64).to_vector<double>(), want.to(kF64).to_vector<double>()) << dt;
    EXPECT_EQ(want.to(kGPU).to(kF32).to(kCPU).to_vector<float>(), want.to(kF32).to_vector<float>()) << dt;
  }
  // Non-contiguous source and destination, on each side.
  Tensor xt = permute(x, {2, 0, 1});
  EXPECT_EQ(xt.to(kGPU).to(kCPU).to_vector<float>(), xt.to_vector<float>());
  Tensor g = x.to(kGPU);
  Tensor gt = permute(g, {2, 0, 1});
  EXPECT_EQ(gt.contiguous().to(kCPU).to_vector<float>(), xt.to_vector<float>());
  Tensor host_dst = empty({3, 5, 7}, kF64);
  Tensor host_view = permute(host_dst, {1, 2, 0});  // [5, 7, 3], non-contiguous
  copy_(host_view, g);
  EXPECT_EQ(host_view.to(kF32).to_vector<float>(), x.to_vector<float>());
  // Broadcasting: a row copied into every row of a device matrix, from the host and the device.
  Tensor row = randn_cpu({7}, kF32, 3);
  Tensor m = empty({4, 7}, TensorOptions(kF32).device(kGPU));
  copy_(m, row);
  for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(select(m, 0, r).to(kCPU).to_vector<float>(), row.to_vector<float>());
  Tensor m2 = empty({4, 7}, TensorOptions(kBF16).device(kGPU));
  copy_(m2, row.to(kGPU));
  EXPECT_EQ(select(m2, 0, 3).to(kCPU).to(kF32).to_vector<float>(), row.to(kBF16).to(kF32).to_vector<float>());
}

TEST(CudaCore, FillAddIntoAndFactories) {
  TRIDENT_REQUIRE_CUDA();
  for (DType dt : {kF32, kF16, kBF16, kF64, kI32, kI64, kU8, kBool}) {
    Tensor t = full({3, 5}, 1.0, TensorOptions(dt).device(kGPU));
    EXPECT_EQ(t.device(), kGPU);
    EXPECT_EQ(t.to(kCPU).to(kF64).to_vector<double>(), std::vector<double>(15, 1.0)) << dt;
  }
  Tensor z = zeros({2, 3}, TensorOptions(kF32).device(kGPU));
  add_into_(z, from_vector<float>({1, 2, 3}).to(kGPU));
  add_into_(z, from_vector<float>({1, 2, 3}).to(kGPU));
  EXPECT_EQ(z.to(kCPU).to_vector<float>(), (std::vector<float>{2, 4, 6, 2, 4, 6}));
  Generator g1(7), g2(7);
  EXPECT_EQ(randn({9}, TensorOptions(kF32).device(kGPU), &g1).to(kCPU).to_vector<float>(),
            randn({9}, kF32, &g2).to_vector<float>());
  EXPECT_EQ(arange(5.0, TensorOptions(kI64).device(kGPU)).to(kCPU).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(scalar_tensor(2.5, TensorOptions(kF32).device(kGPU)).item<float>(), 2.5f);
}

TEST(CudaCore, PinnedMemory) {
  TRIDENT_REQUIRE_CUDA();
  Tensor x = randn_cpu({1000}, kF32, 4);
  EXPECT_FALSE(cuda::is_pinned(x));
  Tensor p = cuda::pin_memory(x);
  EXPECT_TRUE(cuda::is_pinned(p));
  EXPECT_EQ(p.device(), kCPU);
  EXPECT_EQ(p.to(kGPU).to(kCPU).to_vector<float>(), x.to_vector<float>());
  EXPECT_THROW(cuda::pin_memory(x.to(kGPU)), Error);
}

#if TRIDENT_HAVE_DATA
// NOTE [Pinned batches]: with pin_memory and no hook registered, a CUDA build with a GPU pins
// every tensor of every batch through cuda::pin_memory.
TEST(CudaCore, LoaderPinsBatchesWithoutAHook) {
  TRIDENT_REQUIRE_CUDA();
  struct Numbers : data::Dataset {
    int64_t size() const override { return 6; }
    data::Example get(int64_t i, Generator&) const override { return {full({3}, static_cast<double>(i))}; }
  };
  ASSERT_FALSE(data::has_pin_memory_hook());
  data::LoaderOptions o;
  o.batch_size = 2;
  o.num_workers = 2;
  o.pin_memory = true;
  data::Loader loader(std::make_shared<Numbers>(), o);
  int batches = 0;
  while (std::optional<data::Example> b = loader.next()) {
    EXPECT_TRUE(cuda::is_pinned(b->at(0)));
    EXPECT_EQ(b->at(0).to_vector<float>()[3], static_cast<float>(2 * batches + 1));
    ++batches;
  }
  EXPECT_EQ(batches, 3);
}
#endif

TEST(CudaCore, RecordStreamKeepsABlockFromReuseUntilTheStreamIsDone) {
  TRIDENT_REQUIRE_CUDA();
  cuda::Stream side = cuda::Stream::create(0);
  Tensor t = empty({1 << 20}, TensorOptions(kF32).device(kGPU));
  void* p = t.data_ptr();
  cuda::record_stream(t, side);
  t = Tensor();
  Tensor u = empty({1 << 20}, TensorOptions(kF32).device(kGPU));
  // The side stream has no queued work, so its event may already be done; either way the
  // allocator must hand out valid memory and the stats must balance.
  EXPECT_NE(u.data_ptr(), nullptr);
  (void)p;
  side.synchronize();
  u = Tensor();
  empty_cache(kGPU);
  EXPECT_EQ(cuda::caching_allocator(0).stats().active_blocks, memory_stats(kGPU).live_allocations);
}
