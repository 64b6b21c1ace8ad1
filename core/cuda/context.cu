// The CUDA side of core/device.h. Built only when TRIDENT_HAVE_CUDA.
#include <cuda_runtime.h>

#include "core/device.h"

namespace trident {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: clear the sticky error, report none
    return 0;
  }
  return n;
}

}  // namespace trident
