// CUDA kernels of the unary family: the contracts of ops/cpu/unary.h, for tensors on a CUDA device
// in f32, f16 and bf16 (NOTE [CUDA dtypes]), with the per-element math of ops/math/unary.h.
#pragma once

#include "core/tensor.h"
#include "ops/cpu/unary.h"

namespace trident::cuda {

using cpu::UnaryOp;
Tensor unary(UnaryOp op, const Tensor& x);
Tensor unary_backward(UnaryOp op, const Tensor& g, const Tensor& saved);
Tensor relu_to(const Tensor& x, DType dtype);
Tensor relu_to_backward(const Tensor& g, const Tensor& y, DType dtype);
Tensor pow(const Tensor& x, double p);
Tensor pow_backward(const Tensor& g, const Tensor& x, double p);
Tensor clamp(const Tensor& x, double lo, double hi);
Tensor clamp_backward(const Tensor& g, const Tensor& x, double lo, double hi);

}  // namespace trident::cuda
