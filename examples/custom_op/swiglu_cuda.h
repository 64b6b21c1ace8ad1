// The CUDA kernels of SwiGLU (swiglu_cuda.cu), built only when Trident was built with CUDA
// (Trident_HAVE_CUDA; CMakeLists.txt defines SWIGLU_WITH_CUDA then).
// UNTESTED until a GPU run: compiled, never executed in CI (no GPU there, and Trident's CUDA
// tensor backend is its own issue).
#pragma once

#include <trident/core/tensor.h>

namespace custom_op {

// Same contracts as the CPU kernels in swiglu.h; tensors on one CUDA device, out/ga/gb contiguous.
void swiglu_forward_cuda(const trident::Tensor& a, const trident::Tensor& b, const trident::Tensor& out);
void swiglu_backward_cuda(const trident::Tensor& g, const trident::Tensor& a, const trident::Tensor& b,
                          const trident::Tensor& ga, const trident::Tensor& gb);

}  // namespace custom_op
