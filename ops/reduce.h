// Reductions over any set of dims, differentiable. An empty dim list reduces over every dim.
// Integer and bool sums are i64 (as in PyTorch); float sums accumulate in f64 on the CPU
// (NOTE [Accumulation] in core/dtype.h, NOTE [Reduction accumulation] in ops/cpu/reduce.h).
// Errors name the op and the offending dims: a dim out of range, a dim repeated, an empty
// reduction where the op has no identity (max, min, argmax, the inf norms).
#pragma once

#include <optional>
#include <type_traits>
#include <vector>

#include "core/tensor.h"

namespace trident {

Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);

// ---- max and min (NOTE [Max and NaN] in ops/math/reduce.h: a NaN is the result when present) ----

// The result of a reduction that also finds where: values, and i64 indices along the dim.
// Works with structured bindings: auto [v, i] = max(x, 1);
struct ValuesIndices {
  Tensor values;
  Tensor indices;
};

// Max / min over all elements: a 0-dim tensor. x must not be empty. Backward: the gradient is
// shared evenly among the elements equal to the result (PyTorch's choice for ties).
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
// Over one dim: the values and the index of the first maximal (minimal) element along it, as
// torch.max(x, dim). The dim must not be empty. Backward: the whole gradient goes to that first
// element (the one the index names), not shared among ties.
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
// Values only, over any dims (all when empty); backward shared evenly among ties, as max(x).
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
// The i64 index of the first max (min): over the flattened tensor when dim is none (keepdim
// then gives all sizes 1), else along dim. Not differentiable.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);

// ---- statistics (floating-point inputs) ----

// Variance over dims (all when empty): sum((x - mean)^2) / max(0, N - correction), so
// correction 1 (the default, as PyTorch) is the unbiased estimate and 0 the population
// variance; N <= correction gives inf (NaN when the deviations are 0).
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, double correction = 1.0, bool keepdim = false);
// sqrt(var), PyTorch's std. Backward is 0 where the result is 0 (as PyTorch). Not named std: a
// function trident::std makes every `std::` ambiguous in code that says using namespace trident.
Tensor std_dev(const Tensor& x, const std::vector<int64_t>& dims = {}, double correction = 1.0, bool keepdim = false);
// A bool in the correction's place would silently become 1 or 0 (var(x, {1}, true) reads as
// keepdim): refuse it at compile time. Integer and floating corrections are accepted.
template <typename B, std::enable_if_t<std::is_same_v<B, bool>, int> = 0>
Tensor var(const Tensor& x, const std::vector<int64_t>& dims, B correction, bool keepdim = false) = delete;
template <typename B, std::enable_if_t<std::is_same_v<B, bool>, int> = 0>
Tensor std_dev(const Tensor& x, const std::vector<int64_t>& dims, B correction, bool keepdim = false) = delete;

// log(sum(exp(x))) over dims (all when empty), stable: the max is subtracted first. An empty
// reduction gives -inf.
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);

// Vector p-norm over dims (all when empty), as torch.linalg.vector_norm: p = 2 (the default;
// the L2 norm of gradient clipping), 1, inf (max |x|), -inf (min |x|), 0 (the count of non-zero
// elements, zero gradient) or any other p > 0. Backward: 0 where the norm is 0 (p > 1); the inf
// norms share the gradient among tied elements, with their signs. The inf norms need a
// non-empty reduction.
Tensor norm(const Tensor& x, double p = 2.0, const std::vector<int64_t>& dims = {}, bool keepdim = false);

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
