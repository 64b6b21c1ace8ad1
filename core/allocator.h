// Allocators and per-device memory statistics.
//
// Every byte a Storage holds comes from the Allocator of its device, and every allocator
// reports to the same statistics, so `memory_stats(d)` means the same thing on every device:
// bytes currently held by live tensors, the peak since the last reset, and counts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "core/device.h"

namespace trident {

struct MemoryStats {
  int64_t current_bytes = 0;     // bytes held by live storages now
  int64_t peak_bytes = 0;        // the most held at once since the last reset
  int64_t live_allocations = 0;  // storages alive now
  int64_t total_allocations = 0; // allocations since the process started
  // Device memory the allocator holds from the system (>= current_bytes when it caches).
  int64_t reserved_bytes = 0;
};

MemoryStats memory_stats(Device d);
void reset_peak_memory_stats(Device d);
// Frees the blocks a device's allocator keeps for reuse (NOTE [CPU caching allocator]).
void empty_cache(Device d);

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory for nbytes (nbytes may be 0: a valid, unique, non-null pointer is not
  // required then). Throws trident::Error when memory runs out, naming the size and device.
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  // Returns cached, unused blocks to the system (caching allocators).
  virtual void empty_cache() {}
  virtual Device device() const = 0;
};

// The allocator for a device. CPU memory is 64-byte aligned. The CUDA backend registers its
// caching allocator; asking for a CUDA allocator in a build without CUDA is an Error.
Allocator* get_allocator(Device d);
using AllocatorFactory = std::function<Allocator*(int index)>;
void register_allocator_factory(DeviceType type, AllocatorFactory factory);

namespace detail {
// Called by allocators: keeps memory_stats() right.
void record_alloc(Device d, size_t nbytes);
void record_free(Device d, size_t nbytes);
void record_reserved(Device d, int64_t delta_bytes);
}  // namespace detail

}  // namespace trident
