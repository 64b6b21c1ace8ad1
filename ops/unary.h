// Element-wise unary functions, differentiable. (The complete set arrives with the CPU op-set
// issue; the foundation has what the smoke-training demo needs.)
#pragma once

#include "core/tensor.h"

namespace trident {

Tensor relu(const Tensor& x);
Tensor tanh(const Tensor& x);

}  // namespace trident
