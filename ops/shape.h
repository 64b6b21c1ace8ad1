// Shape ops: views that share storage with their input (reshape copies only when no view
// exists), all differentiable.
#pragma once

#include <optional>

#include "core/tensor.h"

namespace trident {

// A view with new sizes; one size may be -1 (inferred). Throws if the strides do not allow a
// view (call reshape, or contiguous() first).
Tensor view(const Tensor& x, const Shape& sizes);
// A view when possible, otherwise a contiguous copy.
Tensor reshape(const Tensor& x, const Shape& sizes);
// Merges dims start..end (inclusive) into one.
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
// Transpose of a matrix (dims < 2 are returned as they are).
Tensor t(const Tensor& x);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor unsqueeze(const Tensor& x, int64_t dim);
// Removes `dim` if its size is 1 (otherwise returns a view of the same shape).
Tensor squeeze(const Tensor& x, int64_t dim);
// Removes every size-1 dim.
Tensor squeeze(const Tensor& x);
// Broadcasts size-1 dims to `sizes` (-1 keeps a size) without copying: stride 0.
Tensor expand(const Tensor& x, const Shape& sizes);
inline Tensor expand_as(const Tensor& x, const Tensor& other) { return expand(x, other.sizes()); }

// The strides under which (sizes, strides) can be read as new_sizes, if any (PyTorch's rule).
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& new_sizes);
// Replaces one -1 in `sizes` so it holds numel elements; names the shapes in the error.
Shape infer_size(const Shape& sizes, int64_t numel, const char* what);

}  // namespace trident
