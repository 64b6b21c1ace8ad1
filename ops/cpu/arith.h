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
// The gradient of maximum or minimum (op) with respect to a (first) or b, at the broadcast
// shape of g: g, g / 2 on ties, or 0 (math::MaxMinGrad). Floating dtypes.
Tensor max_min_grad(BinaryOp op, bool first, const Tensor& g, const Tensor& a, const Tensor& b);
// The same for maximum(a, s) / minimum(a, s), with respect to a.
Tensor max_min_grad_scalar(BinaryOp op, const Tensor& g, const Tensor& a, double s);

}  // namespace trident::cpu
