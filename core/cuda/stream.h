// The CUDA stream a kernel written outside Trident launches on (NOTE [Kernel arguments] in
// core/tensor_arg.h). Declared only in builds with the CUDA backend (trident_config.h's
// TRIDENT_HAVE_CUDA); include it from .cu files.
//
// NOTE [Current stream]: Trident enqueues the work of the calling host thread for a device on one
// stream, current_stream(device). A custom kernel launched on that stream is ordered after the
// Trident ops that produced its inputs and before those that consume its outputs, with no
// synchronization; a kernel launched elsewhere must synchronize itself. Until the CUDA tensor
// backend (its own issue) brings stream pools and guards, this is the legacy default stream.
// UNTESTED until a GPU run: compiled in CUDA builds, never executed in CI (no GPU there).
#pragma once

#include "core/device.h"
#include "core/error.h"
#include "trident_config.h"

#if TRIDENT_HAVE_CUDA
#include <cuda_runtime_api.h>

namespace trident::cuda {

// The stream for work on `device` (a CUDA device) from this thread.
cudaStream_t current_stream(Device device);

}  // namespace trident::cuda

// Checks a CUDA runtime call (or cudaGetLastError() after a launch), throwing trident::Error with
// the call and CUDA's message.
#define TRIDENT_CUDA_CHECK(expr)                                                                 \
  do {                                                                                           \
    const cudaError_t trident_cuda_err_ = (expr);                                                \
    TRIDENT_CHECK(trident_cuda_err_ == cudaSuccess, #expr, " failed: ", cudaGetErrorString(trident_cuda_err_)); \
  } while (0)

#endif  // TRIDENT_HAVE_CUDA
