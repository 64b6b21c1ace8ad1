#include "core/allocator.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <array>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>

#include "core/error.h"
#include "trident_config.h"

#if TRIDENT_HAVE_CUDA
namespace trident::cuda {
Allocator* device_allocator(int index);  // core/cuda/allocator.cpp
}
#endif

namespace trident {
namespace {

constexpr int kMaxCudaDevices = 64;

struct Counters {
  std::atomic<int64_t> current{0}, peak{0}, live{0}, total{0}, reserved{0};
};

Counters& counters(Device d) {
  static Counters cpu;
  static std::array<Counters, kMaxCudaDevices> cuda;
  if (d.is_cpu()) return cpu;
  TRIDENT_CHECK(d.index >= 0 && d.index < kMaxCudaDevices, "device index ", d.index, " out of range");
  return cuda[d.index];
}

// NOTE [CPU caching allocator]: large blocks (>= 256 KiB) are kept after free and handed out
// again to requests that fit them with at most 25% to spare. Without this, glibc returns big
// blocks to the system and every step's activations and gradients fault their pages in afresh
// (about a millisecond per 4 MB). Small blocks go straight to malloc, which already caches
// them. The cache holds at most TRIDENT_CPU_CACHE_MB (default 2048) MiB; empty_cache() frees it
// and, with glibc, returns malloc's free heap pages to the system (malloc_trim).
// memory_stats' current_bytes counts live storages, reserved_bytes adds the cached blocks.
class CpuAllocator final : public Allocator {
 public:
  CpuAllocator() {
    if (const char* env = std::getenv("TRIDENT_CPU_CACHE_MB")) cache_limit_ = static_cast<size_t>(std::atoll(env)) << 20;
  }

  void* allocate(size_t nbytes) override {
    const size_t size = block_size(nbytes);
    void* p = nullptr;
    if (size >= kCacheMin) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.lower_bound(size);
      if (it != free_.end() && it->first <= size + size / 4) {
        p = it->second;
        live_[p] = it->first;
        cached_bytes_ -= it->first;
        free_.erase(it);
      }
    }
    if (!p) {
      p = std::aligned_alloc(64, size);  // 64 bytes: whole cache lines, any SIMD width
      if (!p) {
        empty_cache();
        p = std::aligned_alloc(64, size);
      }
      TRIDENT_CHECK(p != nullptr, "out of CPU memory allocating ", nbytes, " bytes");
      detail::record_reserved(kCPU, static_cast<int64_t>(size));
      if (size >= kCacheMin) {
        std::lock_guard<std::mutex> lock(mu_);
        live_[p] = size;
      }
    }
    detail::record_alloc(kCPU, nbytes);
    return p;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    detail::record_free(kCPU, nbytes);
    const size_t size = block_size(nbytes);
    if (size >= kCacheMin) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = live_.find(ptr);
      TRIDENT_ASSERT(it != live_.end(), "freeing a CPU block the allocator does not know");
      const size_t bsize = it->second;
      live_.erase(it);
      if (bsize <= cache_limit_) {
        free_.emplace(bsize, ptr);
        cached_bytes_ += bsize;
        // Over the limit: drop the largest cached blocks first.
        while (cached_bytes_ > cache_limit_ && !free_.empty()) {
          auto last = std::prev(free_.end());
          cached_bytes_ -= last->first;
          detail::record_reserved(kCPU, -static_cast<int64_t>(last->first));
          std::free(last->second);
          free_.erase(last);
        }
        return;
      }
      std::free(ptr);
      detail::record_reserved(kCPU, -static_cast<int64_t>(bsize));
      return;
    }
    std::free(ptr);
    detail::record_reserved(kCPU, -static_cast<int64_t>(size));
  }

  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, p] : free_) {
      std::free(p);
      detail::record_reserved(kCPU, -static_cast<int64_t>(size));
    }
    free_.clear();
    cached_bytes_ = 0;
#if defined(__GLIBC__)
    // glibc keeps freed heap memory (blocks below its adaptive mmap threshold) for reuse by this
    // process; hand its free pages back to the system too.
    malloc_trim(0);
#endif
  }

  Device device() const override { return kCPU; }

 private:
  static constexpr size_t kCacheMin = size_t{256} << 10;
  static constexpr size_t kGranule = size_t{64} << 10;
  static size_t block_size(size_t nbytes) {
    const size_t rounded = std::max<size_t>(64, (nbytes + 63) / 64 * 64);
    return rounded >= kCacheMin ? (rounded + kGranule - 1) / kGranule * kGranule : rounded;
  }

  std::mutex mu_;
  std::multimap<size_t, void*> free_;      // cached blocks by size
  std::unordered_map<void*, size_t> live_;  // large blocks in use -> their size
  size_t cached_bytes_ = 0;
  size_t cache_limit_ = size_t{2048} << 20;
};

std::mutex g_factory_mutex;
AllocatorFactory g_cuda_factory;

}  // namespace

namespace detail {
void record_alloc(Device d, size_t nbytes) {
  Counters& c = counters(d);
  const int64_t now = c.current.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
  int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
  c.live.fetch_add(1);
  c.total.fetch_add(1);
}
void record_free(Device d, size_t nbytes) {
  Counters& c = counters(d);
  c.current.fetch_sub(static_cast<int64_t>(nbytes));
  c.live.fetch_sub(1);
}
void record_reserved(Device d, int64_t delta) { counters(d).reserved.fetch_add(delta); }
}  // namespace detail

MemoryStats memory_stats(Device d) {
  Counters& c = counters(d);
  MemoryStats s;
  s.current_bytes = c.current.load();
  s.peak_bytes = c.peak.load();
  s.live_allocations = c.live.load();
  s.total_allocations = c.total.load();
  s.reserved_bytes = c.reserved.load();
  return s;
}

void reset_peak_memory_stats(Device d) {
  Counters& c = counters(d);
  c.peak.store(c.current.load());
}

void register_allocator_factory(DeviceType type, AllocatorFactory factory) {
  TRIDENT_CHECK(type == DeviceType::CUDA, "only the CUDA allocator can be registered");
  std::lock_guard<std::mutex> lock(g_factory_mutex);
  g_cuda_factory = std::move(factory);
}

void empty_cache(Device d) { get_allocator(d)->empty_cache(); }

Allocator* get_allocator(Device d) {
  // Never destroyed: tensors in static storage may be freed after every other static object.
  static CpuAllocator* cpu = new CpuAllocator();
  if (d.is_cpu()) return cpu;
  std::lock_guard<std::mutex> lock(g_factory_mutex);
#if TRIDENT_HAVE_CUDA
  // The CUDA backend's caching allocator, unless a test or an extension registered another.
  if (g_cuda_factory == nullptr) return cuda::device_allocator(d.index);
#endif
  TRIDENT_CHECK(g_cuda_factory != nullptr, "no allocator for ", d,
                cuda_built() ? ": the CUDA backend is not initialized" : ": Trident was built without CUDA (TRIDENT_CUDA=OFF or CUDA not found)");
  return g_cuda_factory(d.index);
}

}  // namespace trident
