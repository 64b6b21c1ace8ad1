// CPU kernels of the arithmetic family (ops/arith.h holds the differentiable wrappers).
#pragma once

#include "core/tensor.h"
#include "ops/math/arith.h"

namespace trident::cpu {

// a op b with broadcasting; a and b have the same dtype. Returns a new contiguous tensor.
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
// a op s (or s op a when scalar_first).
Tensor binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first);
// self = self op other (other broadcasts to self's shape).
void binary_inplace(BinaryOp op, const Tensor& self, const Tensor& other);
void binary_scalar_inplace(BinaryOp op, const Tensor& self, double s);
Tensor neg(const Tensor& a);

}  // namespace trident::cpu
