// Slicing, joining and indexing, differentiable (PyTorch names and semantics).
//
// Views (slice, narrow, select, split, chunk) share storage with their input; their backward
// writes the gradient into a zero tensor of the input's shape. Everything else returns a new
// contiguous tensor. Index tensors are i64 or i32; indices are never negative here (as in
// PyTorch's gather/index_select/embedding) and an index outside its range is an error naming the
// value, its position and the valid range. Dims may be negative (counted from the end); a dim out
// of range is an error naming it and the valid range.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include "core/tensor.h"

namespace trident {

// ---- views ----

// x[..., start:end:step, ...] along dim, with Python's rules: negative bounds count from the
// end, bounds past either end are clamped, end <= start gives an empty dim; none means the
// start (end) of the dim. step must be > 0.
Tensor slice(const Tensor& x, int64_t dim, std::optional<int64_t> start = std::nullopt,
             std::optional<int64_t> end = std::nullopt, int64_t step = 1);
// length elements of dim from start (negative start counts from the end); unlike slice, the
// range must lie inside the dim.
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
// The sub-tensor at index (negative counts from the end) along dim, which is removed.
Tensor select(const Tensor& x, int64_t dim, int64_t index);
// Pieces of split_size along dim (the last may be smaller); split_size > 0, or 0 for a dim of 0.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
// Pieces of the given sizes, which must sum to x.size(dim).
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
// (A braced list always means sizes, even a one-element one: split(x, {4}) is one piece of 4.)
inline std::vector<Tensor> split(const Tensor& x, std::initializer_list<int64_t> sizes, int64_t dim = 0) {
  return split(x, std::vector<int64_t>(sizes), dim);
}
inline std::vector<Tensor> split_with_sizes(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0) {
  return split(x, sizes, dim);
}
// split(x, ceil(size / chunks), dim): at most `chunks` pieces (fewer when the size does not
// allow that many); a dim of size 0 gives `chunks` empty pieces. chunks > 0.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// ---- joining and padding ----

// Joins tensors of one dtype and device along an existing dim; all other sizes must agree.
// 1-D tensors of shape [0] are skipped (PyTorch's legacy rule), so cat can start from empty.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Joins tensors of one shape along a new dim (0 <= dim <= ndim, or negative).
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Constant padding, torch.nn.functional.pad's convention: pads = {left, right} of the last dim,
// then {left, right} of the one before, and so on (at most 2 * ndim entries, an even count).
// Negative pads crop; a resulting size must not be negative.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value = 0.0);

// ---- indexing ----

// The entries of x at the given positions along dim: out.size(dim) = index.numel(). index is
// 1-D (or 0-D) i64/i32 with values in [0, x.size(dim)). Backward adds rows back (repeats add).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// out[i][j][k] = x[i][index[i][j][k]][k] (dim = 1; likewise for any dim and rank). index has x's
// rank, index.size(d) <= x.size(d) for d != dim; out has index's shape. Backward: scatter_add.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// Out of place: out = x, then out[i][index[i][j][k]][k] += src[i][j][k] (dim = 1), for every
// position of index. index has the rank of x and src, index.size(d) <= src.size(d) for all d
// and <= x.size(d) for d != dim. Differentiable in x (identity) and src (gather; 0 at the
// positions of src that index does not cover).
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// Rows of weight [V, D] at indices of any shape (i64/i32, values in [0, V)): the result has
// shape indices.shape + [D]. No gradient ever reaches row padding_idx (negative counts from the
// end), though the forward still reads it. Backward sums the gradient rows of each index in
// parallel over destination rows (no per-element serial loop).
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx = std::nullopt);
// i64 tensor of shape indices.shape + [num_classes] with 1 at each index; num_classes -1 infers
// max + 1 (indices must then be non-empty). Not differentiable.
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

}  // namespace trident
