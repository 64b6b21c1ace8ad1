// CPU reduction kernels. `dims` are sorted, unique and wrapped (see reduction_dims); results are
// fresh contiguous tensors of reduced_shape(x.sizes(), dims, keepdim).
//
// NOTE [Reduction accumulation]: sums (sum, mean, var, logsumexp's sum of exponentials, the
// p-norms) of f32/f16/bf16 accumulate in f64 (acc_t, NOTE [Accumulation]): a long f32 sum would
// otherwise lose the small terms, and the loops are bound by memory bandwidth, so the wider
// accumulator costs no time. max/min and the inf-norms compare in compute_t (exact anyway).
#pragma once

#include <utility>
#include <vector>

#include "core/tensor.h"

namespace trident::cpu {

enum class ReduceKind { Sum, Mean };
Tensor reduce(ReduceKind kind, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, DType out_dtype);

// Max (is_max) or min of the elements over dims, NaN propagating (NOTE [Max and NaN] in
// ops/math/reduce.h). Numeric dtypes; the result has x's dtype. The reduced range must not be
// empty.
Tensor extreme(bool is_max, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);
// The values and i64 indices of the max or min over dims: the index is the position among the
// reduced elements in row-major order (the index along the dim for one dim, the flat index for
// all dims), the first one on ties, the first NaN if any.
std::pair<Tensor, Tensor> extreme_index(bool is_max, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);
// Variance with divisor max(0, N - correction) (its square root when take_sqrt), two passes:
// the mean, then the sum of squared deviations from it (no cancellation).
Tensor var(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim, bool take_sqrt);
// log(sum(exp(x))) computed as m + log(sum(exp(x - m))) with m the max (0 where m is infinite).
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);
// Vector p-norm, p >= 0 or +-inf (p = 0 counts the non-zero elements).
Tensor norm(const Tensor& x, double p, const std::vector<int64_t>& dims, bool keepdim);

// ---- backward kernels: *_k tensors have the keepdim shape of the reduction's result ----

// The gradient of max/min (abs_sign false) or of the +-inf norms (abs_sign true) over dims,
// shared evenly among the elements equal to the result.
Tensor distribute_backward(const Tensor& x, const Tensor& value_k, const Tensor& g_k, const std::vector<int64_t>& dims,
                           bool abs_sign);
// The gradient of var (or of std, out_k its result, when is_std).
Tensor var_backward(const Tensor& x, const Tensor& g_k, const Tensor& out_k, const std::vector<int64_t>& dims,
                    double correction, bool is_std);
Tensor logsumexp_backward(const Tensor& x, const Tensor& g_k, const Tensor& out_k);
// The gradient of norm for 0 < p < inf.
Tensor norm_backward(const Tensor& x, const Tensor& g_k, const Tensor& norm_k, double p);

}  // namespace trident::cpu
