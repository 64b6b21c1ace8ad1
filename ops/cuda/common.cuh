// Shared by the CUDA kernels of the op families (ops/cuda/*.cu).
//
// NOTE [CUDA dtypes]: the CUDA kernels cover the training dtypes, f32, f16 and bf16, computing
// in f32 (compute_t) and accumulating reductions in f32; f64 stays a CPU dtype (gradient
// checks), so a CUDA op on f64 is an Error naming the op and the dtype. One kernel per family
// and dtype takes the op as a run-time value (a switch that every thread takes the same way, so
// it costs nothing next to the memory traffic) instead of one template per op: that keeps the
// CUDA compile of the project short on a 2-core machine.
//
// NOTE [Restrict and read-only loads]: `const T* __restrict__` lets nvcc load through the
// read-only (non-coherent) path, `ld.global.nc`, whose data may be stale for memory the same
// kernel writes. A kernel that writes a buffer and reads it back (add_layer_norm's sum row), or
// whose contract lets an input alias an output (in-place ops), must not reach that buffer
// through a `__restrict__` pointer. Checkable without a GPU: `nvcc -ptx` and look for
// `ld.global.nc` on such buffers (a review found one this way in ops/cuda/norm.cu).
#pragma once

#include "core/cuda/loops.cuh"
#include "core/dtype.h"
#include "core/factory.h"
#include "core/half.h"

#define TRIDENT_DISPATCH_CUDA_FLOATING(DTYPE, NAME, ...)              \
  [&] {                                                              \
    const ::trident::DType _dt = (DTYPE);                            \
    switch (_dt) {                                                   \
      TRIDENT_DISPATCH_CASE(F32, float, __VA_ARGS__)                 \
      TRIDENT_DISPATCH_CASE(F16, ::trident::Half, __VA_ARGS__)       \
      TRIDENT_DISPATCH_CASE(BF16, ::trident::BFloat16, __VA_ARGS__)  \
      TRIDENT_DISPATCH_DEFAULT(_dt, NAME " (CUDA)", "f32, f16, bf16") \
    }                                                                \
  }()

namespace trident::cuda {

inline Tensor empty_on(const Shape& sizes, DType dtype, Device device) {
  return empty(sizes, TensorOptions(dtype).device(device));
}

}  // namespace trident::cuda
