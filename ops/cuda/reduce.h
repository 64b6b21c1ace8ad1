// CUDA kernels of the reductions: the contracts of ops/cpu/reduce.h (forward), on tensors on a
// CUDA device in f32, f16 and bf16, accumulating in f32 (NOTE [CUDA dtypes]). The backward
// helpers compose the CUDA element-wise kernels.
//
// NOTE [CUDA row reductions]: every reduction is done over rows: the kept dims are moved in
// front of the reduced ones (a contiguous copy when the reduced dims are not already the
// innermost), so each output element reduces one contiguous row. A row is handled by a warp when
// it is short, by a 256-thread block otherwise; the partial results combine by warp shuffles.
#pragma once

#include <utility>
#include <vector>

#include "core/tensor.h"
#include "ops/cpu/reduce.h"

namespace trident::cuda {

using cpu::ReduceKind;
Tensor reduce(ReduceKind kind, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, DType out_dtype);
Tensor extreme(bool is_max, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);
std::pair<Tensor, Tensor> extreme_index(bool is_max, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);
Tensor var(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim, bool take_sqrt);
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);
Tensor norm(const Tensor& x, double p, const std::vector<int64_t>& dims, bool keepdim);

Tensor distribute_backward(const Tensor& x, const Tensor& value_k, const Tensor& g_k, const std::vector<int64_t>& dims,
                           bool abs_sign);
Tensor var_backward(const Tensor& x, const Tensor& g_k, const Tensor& out_k, const std::vector<int64_t>& dims,
                    double correction, bool is_std);
Tensor logsumexp_backward(const Tensor& x, const Tensor& g_k, const Tensor& out_k);
Tensor norm_backward(const Tensor& x, const Tensor& g_k, const Tensor& norm_k, double p);

}  // namespace trident::cuda
