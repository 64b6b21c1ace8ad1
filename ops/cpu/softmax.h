// CPU kernels of softmax and log-softmax (ops/softmax.h has the contract).
#pragma once

#include "core/tensor.h"

namespace trident::cpu {

// softmax (log = false) or log_softmax (log = true) of x along dim (already wrapped; x has at
// least one dim). Returns a fresh contiguous tensor of x's shape and dtype.
Tensor softmax(const Tensor& x, int64_t dim, bool log);
// The input gradient from the upstream gradient g and the forward output y (same shape).
Tensor softmax_backward(const Tensor& g, const Tensor& y, int64_t dim, bool log);

}  // namespace trident::cpu
