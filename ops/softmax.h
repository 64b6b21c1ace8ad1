// Softmax and log-softmax along one dim, differentiable (PyTorch's torch.softmax and
// torch.log_softmax).
//
//   softmax(x, dim)[..., i, ...]     = exp(x_i - max) / sum_j exp(x_j - max)
//   log_softmax(x, dim)[..., i, ...] = (x_i - max) - log sum_j exp(x_j - max)
//
// x: any floating dtype (f16/bf16 computed in f32), any shape and layout; dim may be
// negative. A 0-dim tensor is treated as one element (softmax 1, log_softmax 0), as PyTorch
// does. The result is a new contiguous tensor of x's shape and dtype. Subtracting the row
// max makes both stable for any finite logits (a row [1000, 0] gives [1, e^-1000 = 0]);
// a row of all -inf gives NaN, like PyTorch. Each row is one fused kernel pass (max, sum of
// exponentials, normalize); backward is fused too: softmax dx = y * (g - sum(g * y)),
// log_softmax dx = g - exp(y) * sum(g).
// Errors: non-floating x, dim out of range (the message names the dim and the shape).
#pragma once

#include "core/tensor.h"

namespace trident {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace trident
