// CPU kernels of the indexing family (ops/index.h holds the differentiable wrappers, which check
// arguments and convert index tensors to contiguous i64 before calling these).
#pragma once

#include <string>

#include "core/tensor.h"

namespace trident::cpu {

// Throws an Error naming the first entry of `index` (contiguous i64) outside [0, limit): its
// value, its position in index, and the valid range, prefixed by "op: " and followed by
// `range_of` (what the index addresses, e.g. "dim 1 of the input (size 5)").
void check_index_range(const char* op, const Tensor& index, int64_t limit, const std::string& range_of);
// The largest entry of a non-empty contiguous i64 tensor.
int64_t max_index(const Tensor& index);

// out = x with dim restricted to the rows index (contiguous 1-D i64, in range) names; any dtype.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// dest (contiguous) += src (contiguous, src.size(dim) = index.numel()) scattered along dim:
// dest[.., index[i], ..] += src[.., i, ..], skipping entries equal to `skip` (-1: none).
// Floating dtypes. Parallel over destination rows (entries sorted by destination), so repeated
// indices never race and the result does not depend on the thread count.
void index_add_(const Tensor& dest, int64_t dim, const Tensor& index, const Tensor& src, int64_t skip);
// out[p] = x[p with coordinate dim replaced by index[p]], out shaped like index (contiguous i64
// of x's rank); any dtype. Indices are range-checked as they are read (index is as large as the
// data here, so a separate pass would cost a third of the time): *in_range is false if any was
// out of range (its entries of out are then garbage; call check_index_range for the error).
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, bool* in_range);
// out[p with coordinate dim replaced by index[p]] += src[p] for every position p of index.
// out contiguous; numeric dtypes. Parallel over the positions that share no destination.
// Returns false if an index was out of range (that entry is skipped), as gather.
bool scatter_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
// i64 [.., num_classes] with a 1 at each (in range) index.
Tensor one_hot(const Tensor& index, int64_t num_classes);

}  // namespace trident::cpu
