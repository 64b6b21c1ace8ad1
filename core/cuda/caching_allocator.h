// The caching device allocator's logic, written against an abstract raw allocator so that it is
// plain C++: the CUDA backend plugs in cudaMalloc/cudaFree and CUDA events
// (core/cuda/allocator.cpp), and the unit tests plug in a fake that runs on any machine.
//
// NOTE [Caching device allocator]: cudaMalloc and cudaFree are slow (cudaFree synchronizes the
// device), and a training step allocates and frees the same sizes every step. So memory freed by
// a tensor stays with the allocator and is handed out again:
// - Requests are rounded up to a multiple of 512 bytes (`round`). Those of at most 1 MiB
//   (`small_size`) come from the small pool, carved out of 2 MiB segments; the others from the
//   large pool: requests under 10 MiB from 20 MiB segments, larger ones from segments of their
//   size rounded to 2 MiB. Keeping small blocks apart stops them from pinning large segments.
// - A free block that fits (the smallest that does) is split when the remainder is worth
//   keeping: at least `round` bytes in the small pool, more than `min_split_large` (1 MiB) in
//   the large pool (smaller leftovers stay inside the block and are counted as allocated).
// - A freed block merges with its free neighbours in the same segment, so that the pieces of a
//   segment become one block again.
// - empty_cache() returns every segment that is wholly free to the device; when the device
//   runs out of memory the allocator does that itself and retries once before throwing.
//
// NOTE [Stream pools]: a block belongs to the stream that was current when it was first
// allocated, and is reused only for requests on that stream: work queued on one stream is ordered
// behind earlier work on it, so a block freed there (while kernels that use it may still be
// queued) can be handed to the next allocation on the same stream without any synchronization.
// A tensor used on another stream must say so with record_stream(); its block is then reused
// only after an event recorded on each such stream at free time has completed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "core/device.h"

namespace trident::cuda {

// A stream as the allocator sees it: an opaque id (the cudaStream_t's bits on a real device).
using StreamId = std::uintptr_t;

// What the caching allocator needs from a device. Implementations: core/cuda/allocator.cpp
// (CUDA), and the fake in tests/core/caching_allocator_test.cpp.
class RawDeviceAllocator {
 public:
  virtual ~RawDeviceAllocator() = default;
  // Fresh device memory, or nullptr when the device is out of memory.
  virtual void* malloc(size_t nbytes) = 0;
  virtual void free(void* ptr) = 0;
  // An event recorded now on `stream`; event_done says whether the work before it finished.
  virtual void* record_event(StreamId stream) = 0;
  virtual bool event_done(void* event) = 0;
  virtual void destroy_event(void* event) = 0;
  // Waits for all work on the device (before cached memory goes back to it).
  virtual void synchronize() = 0;
};

struct CachingAllocatorOptions {
  size_t round = 512;
  size_t small_size = size_t{1} << 20;
  size_t small_segment = size_t{2} << 20;
  size_t medium_limit = size_t{10} << 20;
  size_t large_segment = size_t{20} << 20;
  size_t large_round = size_t{2} << 20;
  size_t min_split_large = size_t{1} << 20;
};

// The allocator's own account, beyond the device-wide memory_stats() it also reports to.
struct CachingAllocatorStats {
  int64_t requested_bytes = 0;       // bytes asked for by live allocations
  int64_t allocated_bytes = 0;       // bytes of the blocks handed out (rounded, unsplit leftovers)
  int64_t peak_allocated_bytes = 0;  // since the last reset_peak()
  int64_t reserved_bytes = 0;        // bytes of all segments held from the device
  int64_t peak_reserved_bytes = 0;
  int64_t active_blocks = 0;         // blocks handed out now
  int64_t cached_blocks = 0;         // free blocks held for reuse
  int64_t segments = 0;              // segments held from the device
  int64_t device_mallocs = 0;        // raw malloc calls that succeeded, ever
  int64_t device_frees = 0;          // raw free calls, ever
  int64_t cache_hits = 0;            // allocations served from a cached block
  int64_t oom_retries = 0;           // times the cache was emptied to retry a failed malloc
};

class CachingAllocator {
 public:
  // `device` names the device in errors and in memory_stats(), to which the allocator reports
  // requested bytes (current_bytes) and segment bytes (reserved_bytes).
  CachingAllocator(std::unique_ptr<RawDeviceAllocator> raw, Device device, CachingAllocatorOptions options = {});
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least nbytes for use on `stream`; nullptr for 0 bytes. Throws trident::Error
  // naming the size, the device and the allocator's holdings when the device is out of memory.
  void* allocate(size_t nbytes, StreamId stream);
  // Returns a pointer from allocate (nullptr is ignored). Throws for a pointer it never gave out.
  void free(void* ptr);
  // Marks the block holding ptr as used on another stream too (NOTE [Stream pools]).
  void record_stream(void* ptr, StreamId stream);
  // Returns every wholly free segment to the device.
  void empty_cache();
  CachingAllocatorStats stats() const;
  void reset_peak();
  Device device() const { return device_; }
  // The size of the block serving ptr (for tests and diagnostics); 0 when unknown.
  size_t block_size(void* ptr) const;

 private:
  struct Block;
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockLess>;

  size_t round_size(size_t nbytes) const;
  size_t segment_size(size_t rounded) const;
  Pool& pool_for(size_t rounded) { return rounded <= opt_.small_size ? small_ : large_; }
  Block* find_free(Pool& pool, size_t size, StreamId stream);
  void* raw_malloc_or_retry(size_t seg_size, size_t nbytes);
  void free_block(Block* b);
  void process_events(bool wait_all);
  void release_cached();
  void note_reserved(int64_t delta);

  std::unique_ptr<RawDeviceAllocator> raw_;
  Device device_;
  CachingAllocatorOptions opt_;
  mutable std::mutex mu_;
  Pool small_, large_;
  std::unordered_map<void*, Block*> active_;
  struct Pending {
    Block* block;
    std::vector<void*> events;
  };
  std::vector<Pending> pending_;
  CachingAllocatorStats stats_;
};

}  // namespace trident::cuda
