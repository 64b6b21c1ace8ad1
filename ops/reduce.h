// Reductions over any set of dims, differentiable. An empty dim list reduces over every dim.
// Integer and bool sums are i64 (as in PyTorch); float sums accumulate in f64 on the CPU
// (NOTE [Accumulation] in core/dtype.h).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace trident {

Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);

// Sums x down to `shape`, the inverse of broadcasting `shape` to x's shape: the gradient of
// a broadcast operand.
Tensor sum_to(const Tensor& x, const Shape& shape);

// Sorted, unique, non-negative dims (all dims when empty); names the op in errors.
std::vector<int64_t> reduction_dims(const Tensor& x, const std::vector<int64_t>& dims, const char* what);
// The shape of a reduction's result.
Shape reduced_shape(const Shape& sizes, const std::vector<int64_t>& dims, bool keepdim);
// Reinserts reduced dims as size 1 (undoes keepdim=false) so a gradient can be expanded back.
Tensor unsqueeze_reduced(const Tensor& g, const std::vector<int64_t>& dims, int64_t input_dim, bool keepdim);

}  // namespace trident
