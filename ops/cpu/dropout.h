// CPU kernel of dropout (ops/dropout.h has the contract).
#pragma once

#include "core/rng.h"
#include "core/tensor.h"

namespace trident::cpu {

// A fresh contiguous tensor: x (read in row-major order, any layout) times the mask of Philox
// state `state` (NOTE in ops/math/dropout.h), kept elements scaled by 1 / (1 - p). Used for the
// forward output and, with the same state, for the gradient.
Tensor dropout(const Tensor& x, const PhiloxState& state, double p);

}  // namespace trident::cpu
