// Comparisons, logical ops, selection and float classification, with PyTorch's names and
// semantics.
//
// Comparisons (eq, ne, lt, le, gt, ge) take two tensors of one dtype (any dtype; no implicit
// promotion: mixing dtypes is an error naming both) that broadcast, or a tensor and a scalar,
// and return a bool tensor of the broadcast shape. A scalar is rounded to a floating tensor's
// dtype first (so an f16 tensor holding 0.1 equals 0.1); integer and bool tensors compare with
// it in f64 (exact for integers below 2^53). NaN compares unequal to everything. Results have no
// gradient (bool tensors never require grad).
//
// logical_not/and/or/xor accept any dtype (nonzero is true), operands broadcast.
//
// where(cond, a, b) picks a where cond is true, b elsewhere; cond must be bool; a and b have
// one dtype; the three shapes broadcast together. Differentiable in a and b: each gets the
// upstream gradient where it was picked, 0 elsewhere, summed back to its own shape.
// masked_fill(x, mask, value) is where(mask, value, x): the mask (bool) and x broadcast, and x's
// gradient is 0 where masked. masked_fill_ writes in place (mask broadcasts to self's shape;
// refused on tensors that require grad while grad mode is on, NOTE [In-place and autograd]).
// A scalar value given to an integer tensor must be an integer that fits its dtype.
//
// isnan, isinf, isfinite: bool results for any dtype (integers are always finite).
#pragma once

#include "core/tensor.h"

namespace trident {

Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double s);
Tensor ne(const Tensor& a, double s);
Tensor lt(const Tensor& a, double s);
Tensor le(const Tensor& a, double s);
Tensor gt(const Tensor& a, double s);
Tensor ge(const Tensor& a, double s);

Tensor logical_not(const Tensor& a);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor where(const Tensor& cond, double a, const Tensor& b);

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
const Tensor& masked_fill_(const Tensor& self, const Tensor& mask, double value);

Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor isfinite(const Tensor& x);

}  // namespace trident
