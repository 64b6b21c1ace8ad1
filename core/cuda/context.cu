// The CUDA side of core/device.h. Built only when TRIDENT_HAVE_CUDA.
#include <cuda_runtime.h>

#include "core/cuda/check.h"
#include "core/device.h"
#include "core/device_info.h"
#include "core/error.h"

namespace trident {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: clear the sticky error, report none
    return 0;
  }
  return n;
}

CudaDeviceInfo cuda_device_info(int index) {
  const int n = cuda_device_count();
  TRIDENT_CHECK(index >= 0 && index < n, "cuda_device_info: no CUDA device ", index, " (", n, " visible)");
  cudaDeviceProp p{};
  TRIDENT_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  // CUDA 13 dropped cudaDeviceProp::clockRate: the attribute gives it.
  int clock_khz = 0;
  TRIDENT_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, index));
  return {p.name, p.major, p.minor, static_cast<int64_t>(p.totalGlobalMem), p.multiProcessorCount, clock_khz};
}

}  // namespace trident
