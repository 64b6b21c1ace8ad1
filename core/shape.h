// Shapes and strides: helpers every layer uses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trident {

using Shape = std::vector<int64_t>;

// Product of sizes (1 for a scalar shape). Throws on negative sizes or overflow.
int64_t shape_numel(const Shape& sizes);
// Row-major strides of a contiguous tensor of these sizes.
Shape contiguous_strides(const Shape& sizes);
// Wraps a possibly negative dim into [0, ndim); `what` names the op in the error.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* what);
// NumPy broadcasting of two or more shapes; the error names all shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* what);
// Strides that read a tensor of (sizes, strides) as if it had `target` sizes (stride 0 on
// broadcast dims). The shape must broadcast to target.
Shape broadcast_strides(const Shape& sizes, const Shape& strides, const Shape& target);
std::string shape_str(const Shape& s);

}  // namespace trident
