// CPU kernels of the comparison family (ops/compare.h holds the public functions). Every kernel
// returns a new contiguous tensor (masked_fill_ writes in place).
#pragma once

#include "core/tensor.h"
#include "ops/math/compare.h"

namespace trident::cpu {

// a op b with broadcasting, a and b of one dtype (any); a bool result.
Tensor compare(CompareOp op, const Tensor& a, const Tensor& b);
// a op s: floating tensors compare with s rounded to their dtype, integer and bool tensors
// compare in f64.
Tensor compare_scalar(CompareOp op, const Tensor& a, double s);
// On bool tensors (the wrapper converts others), with broadcasting.
Tensor logical(LogicalOp op, const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& a);
// isnan / isinf / isfinite, any dtype.
Tensor float_class(FloatClass c, const Tensor& x);

// cond ? a : b with three-way broadcasting to `shape`; cond is bool, a and b share a dtype.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, const Shape& shape);
// cond ? x : s (x_when_true) or cond ? s : x, broadcast to `shape`, in x's dtype.
Tensor where_scalar(const Tensor& cond, const Tensor& x, double s, bool x_when_true, const Shape& shape);
// self = mask ? s : self; mask broadcasts to self's shape.
void masked_fill_(const Tensor& self, const Tensor& mask, double s);

}  // namespace trident::cpu
