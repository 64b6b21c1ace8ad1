// Per-element math of dropout (ops/dropout.h), shared by the CPU kernel and the CUDA kernel.
//
// Element i of a dropout from Philox state (seed, offset) uses the 32-bit output i % 4 of the
// counter block offset + i / 4 (NOTE [Philox streams] in core/rng.h), the same numbers as
// rand() drawing f32 values from that state: u_i = (bits >> 8) / 2^24, and the element is kept
// when u_i >= p. With 24-bit uniforms that is an integer comparison of bits >> 8 against
// ceil(p 2^24), so the CPU, the GPU and any thread split agree bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/macros.h"

namespace trident::math {

// The threshold on the 24 high bits: keep iff (bits >> 8) >= dropout_threshold(p). p in [0, 1]:
// p = 0 keeps everything (threshold 0), p = 1 nothing (threshold 2^24).
TRIDENT_INLINE uint32_t dropout_threshold(double p) { return static_cast<uint32_t>(std::ceil(p * 16777216.0)); }

// x * (kept ? scale : 0), scale = 1 / (1 - p) (0 when p = 1). A multiplication, not a select,
// so NaN and inf inputs of dropped elements give NaN, as in PyTorch (x * mask).
template <typename T>
TRIDENT_INLINE T dropout_apply(T x, uint32_t bits, uint32_t threshold, T scale) {
  return x * ((bits >> 8) >= threshold ? scale : T(0));
}

}  // namespace trident::math
