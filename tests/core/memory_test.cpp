#include <gtest/gtest.h>

#include "trident.h"

using namespace trident;

TEST(MemoryStats, CountsCurrentAndPeakBytes) {
  const MemoryStats before = memory_stats(kCPU);
  reset_peak_memory_stats(kCPU);
  {
    Tensor a = empty({1000}, kF32);  // 4000 bytes
    Tensor b = empty({500}, kF64);   // 4000 bytes
    const MemoryStats s = memory_stats(kCPU);
    EXPECT_EQ(s.current_bytes - before.current_bytes, 8000);
    EXPECT_EQ(s.live_allocations - before.live_allocations, 2);
    EXPECT_GE(s.peak_bytes, s.current_bytes);
    Tensor v = reshape(a, {10, 100});  // a view allocates nothing
    EXPECT_EQ(memory_stats(kCPU).current_bytes, s.current_bytes);
  }
  const MemoryStats after = memory_stats(kCPU);
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  EXPECT_GE(after.peak_bytes - before.current_bytes, 8000);
  reset_peak_memory_stats(kCPU);
  EXPECT_EQ(memory_stats(kCPU).peak_bytes, memory_stats(kCPU).current_bytes);
}

TEST(MemoryStats, PeakTracksTheHighWaterMark) {
  reset_peak_memory_stats(kCPU);
  const int64_t base = memory_stats(kCPU).current_bytes;
  { Tensor big = empty({1 << 20}, kF32); }
  { Tensor small = empty({16}, kF32); }
  EXPECT_EQ(memory_stats(kCPU).peak_bytes - base, 4 << 20);
}

TEST(MemoryStats, ExternalStorageIsNotCounted) {
  std::vector<float> buf(64, 1.f);
  const int64_t before = memory_stats(kCPU).current_bytes;
  bool deleted = false;
  {
    auto st = std::make_shared<Storage>(buf.data(), buf.size() * 4, kCPU, [&](void*) { deleted = true; });
    Tensor t = make_tensor(st, kF32, {8, 8}, {8, 1}, 0);
    EXPECT_EQ(sum(t).item<float>(), 64.f);
    EXPECT_EQ(memory_stats(kCPU).current_bytes, before);  // the wrapped buffer is not counted
  }
  EXPECT_TRUE(deleted);
}

TEST(MemoryStats, CudaWithoutBackendIsAClearError) {
  if (cuda_is_available()) GTEST_SKIP() << "a GPU is present";
  try {
    get_allocator(Device::cuda(0));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
}

TEST(MemoryStats, LargeBlocksAreCachedAndReused) {
  empty_cache(kCPU);
  const MemoryStats s0 = memory_stats(kCPU);
  void* first = nullptr;
  {
    Tensor a = empty({1 << 20}, kF32);  // 4 MiB
    first = a.data_ptr();
  }
  const MemoryStats s1 = memory_stats(kCPU);
  EXPECT_EQ(s1.current_bytes, s0.current_bytes);
  EXPECT_GE(s1.reserved_bytes - s0.reserved_bytes, 4 << 20) << "the freed block stays cached";
  {
    Tensor b = empty({(1 << 20) - 1000}, kF32);  // a little smaller: reuses the cached block
    EXPECT_EQ(b.data_ptr(), first);
    Tensor c = empty({1 << 21}, kF32);  // twice as large: a new block
    EXPECT_NE(c.data_ptr(), first);
  }
  empty_cache(kCPU);
  EXPECT_EQ(memory_stats(kCPU).reserved_bytes, s0.reserved_bytes);
}
