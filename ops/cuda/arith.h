// CUDA kernels of the arithmetic family: the contracts of ops/cpu/arith.h, for tensors on a CUDA
// device in f32, f16 and bf16 (NOTE [CUDA dtypes]).
#pragma once

#include "core/tensor.h"
#include "ops/math/arith.h"

namespace trident::cuda {

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
Tensor binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first);
void binary_inplace(BinaryOp op, const Tensor& self, const Tensor& other);
void binary_scalar_inplace(BinaryOp op, const Tensor& self, double s);
Tensor neg(const Tensor& a);
Tensor max_min_grad(BinaryOp op, bool first, const Tensor& g, const Tensor& a, const Tensor& b);
Tensor max_min_grad_scalar(BinaryOp op, const Tensor& g, const Tensor& a, double s);

}  // namespace trident::cuda
