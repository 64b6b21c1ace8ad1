// CUDA kernel of dropout: the contract of ops/cpu/dropout.h on tensors on a CUDA device in f32,
// f16 and bf16. Element i uses the same Philox number as on the CPU (NOTE in
// ops/math/dropout.h), and the product is computed in f32 and rounded once, as on the CPU: for
// the same PhiloxState both backends give bit-identical outputs.
#pragma once

#include "core/rng.h"
#include "core/tensor.h"

namespace trident::cuda {

Tensor dropout(const Tensor& x, const PhiloxState& state, double p);

}  // namespace trident::cuda
