// CUDA kernels of softmax and log_softmax: the contracts of ops/cpu/softmax.h, on tensors on a
// CUDA device in f32, f16 and bf16, computing in f32 (NOTE [CUDA dtypes]). Rows along `dim` are
// made innermost and contiguous first (NOTE [CUDA row reductions]).
#pragma once

#include "core/tensor.h"

namespace trident::cuda {

Tensor softmax(const Tensor& x, int64_t dim, bool log);
Tensor softmax_backward(const Tensor& g, const Tensor& y, int64_t dim, bool log);

}  // namespace trident::cuda
