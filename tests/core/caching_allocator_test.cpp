// The caching device allocator's logic (NOTE [Caching device allocator], NOTE [Stream pools]),
// run against a fake device, so these tests run on every machine.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>

#include "core/cuda/caching_allocator.h"
#include "test_util.h"

using namespace trident;
using namespace trident::cuda;

namespace {

constexpr size_t MiB = size_t{1} << 20;

// A device of `capacity` bytes. Memory is real host memory, so tests may write to it; events
// complete when the test says so.
struct FakeDevice {
  size_t capacity = size_t{1} << 40;
  size_t used = 0;
  std::map<void*, size_t> live;
  int mallocs = 0, frees = 0, syncs = 0;
  std::map<int*, StreamId> events;  // event -> stream it was recorded on
  std::set<StreamId> finished;      // streams whose recorded work has completed
};

class FakeRaw final : public RawDeviceAllocator {
 public:
  explicit FakeRaw(FakeDevice* d) : d_(d) {}
  void* malloc(size_t n) override {
    if (d_->used + n > d_->capacity) return nullptr;
    void* p = std::malloc(n);
    d_->live[p] = n;
    d_->used += n;
    ++d_->mallocs;
    return p;
  }
  void free(void* p) override {
    auto it = d_->live.find(p);
    ASSERT_NE(it, d_->live.end()) << "freeing memory the fake device never gave out";
    d_->used -= it->second;
    d_->live.erase(it);
    ++d_->frees;
    std::free(p);
  }
  void* record_event(StreamId s) override {
    int* e = new int(0);
    d_->events[e] = s;
    return e;
  }
  bool event_done(void* e) override { return d_->finished.count(d_->events.at(static_cast<int*>(e))) > 0; }
  void destroy_event(void* e) override {
    d_->events.erase(static_cast<int*>(e));
    delete static_cast<int*>(e);
  }
  void synchronize() override {
    ++d_->syncs;
    for (auto& [e, s] : d_->events) d_->finished.insert(s);
  }

 private:
  FakeDevice* d_;
};

// Each test reports to its own device index so memory_stats() of one does not see another's.
CachingAllocator make(FakeDevice* d, int index) {
  return CachingAllocator(std::make_unique<FakeRaw>(d), Device::cuda(index));
}

}  // namespace

TEST(CachingAllocator, RoundsSmallRequestsAndCarvesThemFromOneSegment) {
  FakeDevice dev;
  auto a = make(&dev, 40);
  void* p = a.allocate(1, 0);
  void* q = a.allocate(1000, 0);
  EXPECT_EQ(a.block_size(p), 512u);
  EXPECT_EQ(a.block_size(q), 1024u);
  EXPECT_EQ(dev.mallocs, 1);  // both from one 2 MiB small segment
  EXPECT_EQ(dev.live.begin()->second, 2 * MiB);
  EXPECT_EQ(static_cast<char*>(q) - static_cast<char*>(p), 512);  // the remainder was split off
  const CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.requested_bytes, 1001);
  EXPECT_EQ(s.allocated_bytes, 512 + 1024);
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(2 * MiB));
  EXPECT_EQ(s.active_blocks, 2);
  a.free(p);
  a.free(q);
}

TEST(CachingAllocator, ReusesAFreedBlockWithoutTouchingTheDevice) {
  FakeDevice dev;
  auto a = make(&dev, 41);
  void* p = a.allocate(3 * MiB, 0);
  a.free(p);
  void* q = a.allocate(3 * MiB - 100, 0);
  EXPECT_EQ(q, p);
  EXPECT_EQ(dev.mallocs, 1);
  EXPECT_EQ(a.stats().cache_hits, 1);
  a.free(q);
}

TEST(CachingAllocator, LargeRequestsSplitOnlyWhenTheRemainderIsOverOneMiB) {
  FakeDevice dev;
  auto a = make(&dev, 42);
  // 4 MiB from a 20 MiB segment: the 16 MiB rest is split off and serves the next request.
  void* p = a.allocate(4 * MiB, 0);
  EXPECT_EQ(dev.live.begin()->second, 20 * MiB);
  EXPECT_EQ(a.block_size(p), 4 * MiB);
  void* q = a.allocate(15 * MiB + MiB / 2, 0);
  EXPECT_EQ(dev.mallocs, 1);
  EXPECT_EQ(static_cast<char*>(q), static_cast<char*>(p) + 4 * MiB);
  // 16 MiB - 15.5 MiB = 0.5 MiB is not worth a block: q keeps it.
  EXPECT_EQ(a.block_size(q), 16 * MiB);
  // A request of 10 MiB or more gets a segment of its own size, rounded to 2 MiB.
  void* r = a.allocate(11 * MiB, 0);
  EXPECT_EQ(dev.live.at(r), 12 * MiB);
  a.free(p);
  a.free(q);
  a.free(r);
}

TEST(CachingAllocator, FreedNeighboursMergeBackIntoTheWholeSegment) {
  FakeDevice dev;
  auto a = make(&dev, 43);
  void* p = a.allocate(4 * MiB, 0);
  void* q = a.allocate(4 * MiB, 0);
  void* r = a.allocate(4 * MiB, 0);
  EXPECT_EQ(dev.mallocs, 1);
  a.free(q);  // a hole between p and r
  a.free(p);  // merges with the hole
  a.free(r);  // merges with both sides and the 8 MiB tail
  EXPECT_EQ(a.stats().cached_blocks, 1);
  // The whole segment is one block again: a 20 MiB request fits without a new segment.
  void* big = a.allocate(20 * MiB, 0);
  EXPECT_EQ(big, p);
  EXPECT_EQ(dev.mallocs, 1);
  a.free(big);
}

TEST(CachingAllocator, SmallAndLargePoolsNeverShareASegment) {
  FakeDevice dev;
  auto a = make(&dev, 44);
  void* big = a.allocate(4 * MiB, 0);
  a.free(big);  // a cached 20 MiB segment
  void* small = a.allocate(1000, 0);
  EXPECT_EQ(dev.mallocs, 2);  // the small request got its own 2 MiB segment
  EXPECT_EQ(dev.live.at(small), 2 * MiB);
  a.free(small);
}

TEST(CachingAllocator, BlocksAreReusedOnlyOnTheStreamTheyBelongTo) {
  FakeDevice dev;
  auto a = make(&dev, 45);
  const StreamId s1 = 0x1000, s2 = 0x2000;
  void* p = a.allocate(4 * MiB, s1);
  a.free(p);
  void* q = a.allocate(4 * MiB, s2);
  EXPECT_NE(q, p);
  EXPECT_EQ(dev.mallocs, 2);
  void* r = a.allocate(4 * MiB, s1);
  EXPECT_EQ(r, p);
  a.free(q);
  a.free(r);
}

TEST(CachingAllocator, RecordStreamDefersReuseUntilTheOtherStreamsWorkIsDone) {
  FakeDevice dev;
  auto a = make(&dev, 46);
  const StreamId s1 = 0x1000, s2 = 0x2000;
  void* p = a.allocate(4 * MiB, s1);
  a.record_stream(p, s2);
  a.record_stream(p, s1);  // its own stream: nothing to wait for
  a.free(p);
  EXPECT_EQ(dev.events.size(), 1u);
  void* q = a.allocate(4 * MiB, s1);
  EXPECT_NE(q, p) << "reused while s2 may still read it";
  dev.finished.insert(s2);
  a.free(q);
  void* r = a.allocate(4 * MiB, s1);
  EXPECT_TRUE(r == p || r == q);
  EXPECT_EQ(dev.events.size(), 0u);  // the event was destroyed once it completed
  a.free(r);
}

TEST(CachingAllocator, EmptyCacheReturnsWhollyFreeSegmentsOnly) {
  FakeDevice dev;
  auto a = make(&dev, 47);
  void* p = a.allocate(4 * MiB, 0);
  void* q = a.allocate(12 * MiB, 7);  // another stream: a segment of its own
  a.free(q);
  a.empty_cache();
  EXPECT_EQ(dev.frees, 1);  // q's segment; p's is still in use
  EXPECT_EQ(a.stats().reserved_bytes, static_cast<int64_t>(20 * MiB));
  EXPECT_EQ(a.stats().segments, 1);
  a.free(p);
  a.empty_cache();
  EXPECT_EQ(dev.frees, 2);
  EXPECT_EQ(dev.used, 0u);
  EXPECT_EQ(a.stats().reserved_bytes, 0);
}

TEST(CachingAllocator, EmptyCacheWaitsForPendingBlocks) {
  FakeDevice dev;
  auto a = make(&dev, 48);
  void* p = a.allocate(4 * MiB, 1);
  a.record_stream(p, 2);
  a.free(p);
  a.empty_cache();
  EXPECT_GE(dev.syncs, 1);
  EXPECT_EQ(dev.used, 0u);
}

TEST(CachingAllocator, OutOfMemoryEmptiesTheCacheRetriesThenThrowsANamedError) {
  FakeDevice dev;
  dev.capacity = 40 * MiB;
  auto a = make(&dev, 49);
  void* p = a.allocate(30 * MiB, 0);
  a.free(p);  // cached: 30 MiB of the 40 are held
  void* q = a.allocate(32 * MiB, 0);  // needs the cached segment given back first
  EXPECT_NE(q, nullptr);
  EXPECT_EQ(a.stats().oom_retries, 1);
  EXPECT_EQ(dev.frees, 1);
  const std::string msg = trident::testing::error_message([&] { a.allocate(16 * MiB, 0); });
  EXPECT_NE(msg.find("out of memory on cuda:49"), std::string::npos) << msg;
  EXPECT_NE(msg.find("16777216 bytes"), std::string::npos) << msg;
  a.free(q);
}

TEST(CachingAllocator, ReportsToMemoryStatsLikeTheCpuAllocator) {
  FakeDevice dev;
  const Device d = Device::cuda(50);
  auto a = make(&dev, 50);
  reset_peak_memory_stats(d);
  const MemoryStats before = memory_stats(d);
  void* p = a.allocate(1000, 0);
  void* q = a.allocate(5000, 0);
  MemoryStats s = memory_stats(d);
  EXPECT_EQ(s.current_bytes - before.current_bytes, 6000);
  EXPECT_EQ(s.live_allocations - before.live_allocations, 2);
  EXPECT_EQ(s.reserved_bytes - before.reserved_bytes, static_cast<int64_t>(2 * MiB));
  a.free(q);
  s = memory_stats(d);
  EXPECT_EQ(s.current_bytes - before.current_bytes, 1000);
  EXPECT_EQ(s.peak_bytes - before.current_bytes, 6000);
  reset_peak_memory_stats(d);
  EXPECT_EQ(memory_stats(d).peak_bytes, memory_stats(d).current_bytes);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_allocated_bytes, a.stats().allocated_bytes);
  a.free(p);
  a.empty_cache();
  EXPECT_EQ(memory_stats(d).reserved_bytes, before.reserved_bytes);
}

TEST(CachingAllocator, ZeroBytesAndForeignPointers) {
  FakeDevice dev;
  auto a = make(&dev, 51);
  EXPECT_EQ(a.allocate(0, 0), nullptr);
  a.free(nullptr);
  int x = 0;
  EXPECT_THROW(a.free(&x), Error);
  EXPECT_THROW(a.record_stream(&x, 1), Error);
  EXPECT_EQ(dev.mallocs, 0);
}
