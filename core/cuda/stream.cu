// NOTE [Current stream] (core/cuda/stream.h). UNTESTED until a GPU run.
#include "core/cuda/stream.h"

namespace trident::cuda {

cudaStream_t current_stream(Device device) {
  TRIDENT_CHECK(device.is_cuda(), "cuda::current_stream: ", device, " is not a CUDA device");
  // The legacy default stream (the null handle) until the CUDA backend has per-thread streams.
  return nullptr;
}

}  // namespace trident::cuda
