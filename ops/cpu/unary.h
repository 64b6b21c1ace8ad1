// CPU kernels of the unary family.
#pragma once

#include "core/tensor.h"

namespace trident::cpu {

enum class UnaryOp { Relu, Tanh };
Tensor unary(UnaryOp op, const Tensor& x);
// The input gradient from the upstream gradient g and `saved` (x or y, as the op's backward
// functor expects).
Tensor unary_backward(UnaryOp op, const Tensor& g, const Tensor& saved);

}  // namespace trident::cpu
