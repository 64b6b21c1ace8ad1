#include "ops/cuda/cudnn_util.h"

#include <mutex>
#include <vector>

#include "core/cuda/stream.h"
#include "core/error.h"

namespace trident::cuda {
namespace {

// The handles no thread holds, per device (NOTE [cuDNN handles]). Leaked on purpose: it must
// outlive every thread's lease, including the main thread's at exit.
struct HandlePool {
  std::mutex mu;
  std::vector<std::vector<cudnnHandle_t>> free_by_device;

  cudnnHandle_t acquire(int device) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (free_by_device.size() <= static_cast<size_t>(device)) free_by_device.resize(static_cast<size_t>(device) + 1);
      std::vector<cudnnHandle_t>& free = free_by_device[static_cast<size_t>(device)];
      if (!free.empty()) {
        cudnnHandle_t h = free.back();
        free.pop_back();
        return h;
      }
    }
    DeviceGuard g(device);
    cudnnHandle_t h = nullptr;
    TRIDENT_CUDNN_CHECK(cudnnCreate(&h));
    return h;
  }

  void release(int device, cudnnHandle_t h) {
    std::lock_guard<std::mutex> lock(mu);
    free_by_device[static_cast<size_t>(device)].push_back(h);
  }
};

HandlePool& pool() {
  static HandlePool* p = new HandlePool();
  return *p;
}

// One thread's borrowed handles, returned to the pool when the thread exits.
struct ThreadHandles {
  std::vector<cudnnHandle_t> by_device;
  ~ThreadHandles() {
    for (size_t d = 0; d < by_device.size(); ++d)
      if (by_device[d] != nullptr) pool().release(static_cast<int>(d), by_device[d]);
  }
};

}  // namespace

cudnnHandle_t cudnn_handle(int device) {
  TRIDENT_CHECK(device >= 0, "cuDNN: invalid device index ", device);
  thread_local ThreadHandles mine;
  if (mine.by_device.size() <= static_cast<size_t>(device)) mine.by_device.resize(static_cast<size_t>(device) + 1, nullptr);
  cudnnHandle_t& h = mine.by_device[static_cast<size_t>(device)];
  if (h == nullptr) h = pool().acquire(device);
  TRIDENT_CUDNN_CHECK(cudnnSetStream(h, current_stream(device).handle()));
  return h;
}

cudnnDataType_t cudnn_dtype(DType dt, const char* op) {
  switch (dt) {
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::F16: return CUDNN_DATA_HALF;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    default: break;
  }
  TRIDENT_CHECK(false, op, " (CUDA): dtype ", dt, " is not supported; expected f32, f16 or bf16 (f64 stays on the CPU)");
  return CUDNN_DATA_FLOAT;
}

}  // namespace trident::cuda
