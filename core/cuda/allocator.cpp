#include "core/cuda/allocator.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "core/copy.h"
#include "core/cuda/check.h"
#include "core/factory.h"

namespace trident::cuda {

namespace {

constexpr int kMaxDevices = 64;

std::atomic<bool> g_poison{std::getenv("TRIDENT_CUDA_POISON") != nullptr && std::getenv("TRIDENT_CUDA_POISON")[0] == '1'};

// cudaMalloc and CUDA events on one device, for the CachingAllocator.
class CudaRaw final : public RawDeviceAllocator {
 public:
  explicit CudaRaw(int index) : index_(index) {}
  void* malloc(size_t n) override {
    DeviceGuard g(index_);
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, n);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: clear it, the caller retries or reports
      return nullptr;
    }
    TRIDENT_CUDA_CHECK(e);
    return p;
  }
  void free(void* p) override {
    DeviceGuard g(index_);
    TRIDENT_CUDA_CHECK(cudaFree(p));
  }
  void* record_event(StreamId s) override {
    DeviceGuard g(index_);
    cudaEvent_t e = nullptr;
    TRIDENT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    TRIDENT_CUDA_CHECK(cudaEventRecord(e, reinterpret_cast<cudaStream_t>(s)));
    return e;
  }
  bool event_done(void* e) override {
    const cudaError_t r = cudaEventQuery(static_cast<cudaEvent_t>(e));
    if (r == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    TRIDENT_CUDA_CHECK(r);
    return true;
  }
  void destroy_event(void* e) override {
    DeviceGuard g(index_);
    TRIDENT_CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(e)));
  }
  void synchronize() override {
    DeviceGuard g(index_);
    TRIDENT_CUDA_CHECK(cudaDeviceSynchronize());
  }

 private:
  int index_;
};

class CudaDeviceAllocator final : public Allocator {
 public:
  explicit CudaDeviceAllocator(int index)
      : index_(index), cache_(std::make_unique<CudaRaw>(index), Device::cuda(index)) {}
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) {
      // Keep memory_stats' allocation counts the same as on the CPU; no device memory.
      trident::detail::record_alloc(device(), 0);
      return nullptr;
    }
    const cudaStream_t stream = current_stream(index_).handle();
    void* p = cache_.allocate(nbytes, reinterpret_cast<StreamId>(stream));
    if (g_poison.load(std::memory_order_relaxed)) {
      DeviceGuard g(index_);
      TRIDENT_CUDA_CHECK(cudaMemsetAsync(p, 0xFF, nbytes, stream));
    }
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    if (!ptr) {
      trident::detail::record_free(device(), 0);
      return;
    }
    cache_.free(ptr);
  }
  void empty_cache() override { cache_.empty_cache(); }
  Device device() const override { return Device::cuda(index_); }
  CachingAllocator& cache() { return cache_; }

 private:
  int index_;
  CachingAllocator cache_;
};

CudaDeviceAllocator& allocator_for(int index) {
  TRIDENT_CHECK(index >= 0 && index < cuda_device_count(), "no allocator for ", Device::cuda(index), ": ",
                cuda_device_count(), " CUDA devices visible");
  // Never destroyed: tensors in static storage may be freed after every other static object.
  static std::array<CudaDeviceAllocator*, kMaxDevices> all{};
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  auto& a = all[static_cast<size_t>(index)];
  if (!a) a = new CudaDeviceAllocator(index);
  return *a;
}

}  // namespace

void set_poison_allocations(bool on) { g_poison.store(on); }
bool poison_allocations() { return g_poison.load(); }

CachingAllocator& caching_allocator(int index) { return allocator_for(index).cache(); }
Allocator* device_allocator(int index) { return &allocator_for(index); }

void record_stream(const Tensor& t, const Stream& s) {
  TRIDENT_CHECK(t.device().is_cuda(), "record_stream: tensor is on ", t.device(), ", not a CUDA device");
  TRIDENT_CHECK(t.device() == s.device(), "record_stream: tensor on ", t.device(), " but stream on ", s.device());
  if (!t.storage()->data()) return;
  caching_allocator(t.device().index).record_stream(t.storage()->data(), reinterpret_cast<StreamId>(s.handle()));
}

Tensor empty_pinned(const Shape& sizes, DType dtype) {
  const size_t n = static_cast<size_t>(shape_numel(sizes)) * itemsize(dtype);
  void* p = nullptr;
  if (n > 0) TRIDENT_CUDA_CHECK(cudaHostAlloc(&p, n, cudaHostAllocDefault));
  auto storage = std::make_shared<Storage>(p, n, kCPU, [](void* q) {
    if (q) cudaFreeHost(q);
  });
  return make_tensor(std::move(storage), dtype, sizes, contiguous_strides(sizes), 0);
}

Tensor pin_memory(const Tensor& t) {
  TRIDENT_CHECK(t.device().is_cpu(), "pin_memory: tensor is on ", t.device(), "; only CPU tensors can be pinned");
  Tensor out = empty_pinned(t.sizes(), t.dtype());
  copy_(out, t);
  return out;
}

bool is_pinned(const Tensor& t) {
  if (!t.device().is_cpu() || !t.storage()->data()) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, t.storage()->data()) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

}  // namespace trident::cuda
