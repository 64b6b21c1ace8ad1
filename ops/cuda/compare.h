// CUDA kernels of the comparison family: the contracts of ops/cpu/compare.h for compare,
// compare_scalar, where, where_scalar and masked_fill_, on tensors on a CUDA device in f32, f16
// and bf16 (NOTE [CUDA dtypes]). The logical ops and isnan/isinf/isfinite have no CUDA kernel yet.
#pragma once

#include "core/tensor.h"
#include "ops/math/compare.h"

namespace trident::cuda {

Tensor compare(CompareOp op, const Tensor& a, const Tensor& b);
Tensor compare_scalar(CompareOp op, const Tensor& a, double s);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, const Shape& shape);
Tensor where_scalar(const Tensor& cond, const Tensor& x, double s, bool x_when_true, const Shape& shape);
void masked_fill_(const Tensor& self, const Tensor& mask, double s);

}  // namespace trident::cuda
