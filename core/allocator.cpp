#include "core/allocator.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "core/error.h"

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

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    // 64-byte alignment: whole cache lines, and any SIMD width.
    size_t rounded = ((nbytes + 63) / 64) * 64;
    if (rounded == 0) rounded = 64;
    void* p = std::aligned_alloc(64, rounded);
    TRIDENT_CHECK(p != nullptr, "out of CPU memory allocating ", nbytes, " bytes");
    detail::record_alloc(kCPU, nbytes);
    detail::record_reserved(kCPU, static_cast<int64_t>(nbytes));
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    std::free(ptr);
    detail::record_free(kCPU, nbytes);
    detail::record_reserved(kCPU, -static_cast<int64_t>(nbytes));
  }
  Device device() const override { return kCPU; }
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

Allocator* get_allocator(Device d) {
  static CpuAllocator cpu;
  if (d.is_cpu()) return &cpu;
  std::lock_guard<std::mutex> lock(g_factory_mutex);
  TRIDENT_CHECK(g_cuda_factory != nullptr, "no allocator for ", d,
                cuda_built() ? ": the CUDA backend is not initialized" : ": Trident was built without CUDA (TRIDENT_CUDA=OFF or CUDA not found)");
  return g_cuda_factory(d.index);
}

}  // namespace trident
