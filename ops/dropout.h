// Dropout, differentiable (PyTorch's F.dropout).
//
// dropout(x, p, training, gen): each element is kept with probability 1 - p and scaled by
// 1 / (1 - p), or set to 0. The mask comes from the Philox generator `gen` (the default
// generator when null): the draw reserves ceil(numel / 4) counter blocks, and element i (in
// row-major order) is kept or dropped as a pure function of (seed, offset, i) (NOTE [Philox
// streams] in core/rng.h, NOTE in ops/math/dropout.h). So backward saves only the PhiloxState
// and p, not a mask, and regenerates the mask; and a caller that saves gen->state() before the
// call and restores it later (re-materialization in checkpoint(), GPipe) gets exactly the same
// mask again.
//
// Identity cases, as in PyTorch: training = false, p = 0, or an empty x return x itself (the
// same tensor, no new node, the generator untouched). p = 1 returns zeros (x * 0, a node whose
// gradient is zero). p outside [0, 1] is an error naming p. Any floating dtype (f16/bf16
// computed in f32); the result is a new contiguous tensor.
#pragma once

#include "core/rng.h"
#include "core/tensor.h"

namespace trident {

Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);

}  // namespace trident
