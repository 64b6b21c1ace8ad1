// Per-element math of softmax, log-softmax and the losses built on them, shared by the CPU
// kernels and the CUDA kernels (DESIGN.md: write the math once).
//
// NOTE [Softmax exp]: softmax and cross-entropy spend almost all their time in exp (GPT-2's
// logits have 50304 columns). A call to the C library's expf stops the compiler from
// vectorizing the row loop, so f32 uses the branch-free, vectorizable exp of
// ops/math/fast_f32.h (NOTE [Fast f32 math]; about 1 ulp over the whole range, exp(-inf) = 0
// for masked scores, NaN stays NaN). f64 (gradient checks) uses the C library's exp.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/macros.h"
#include "ops/math/fast_f32.h"

namespace trident::math {

// e^x in f32, vectorizable (NOTE [Softmax exp]).
TRIDENT_INLINE float softmax_exp(float x) { return f32::exp(x); }
TRIDENT_INLINE double softmax_exp(double x) { return std::exp(x); }

// ---- softmax / log-softmax, per element of a row with max m and sum of exponentials s ----

// Forward: y = e^(x - m) / s, or log y = (x - m) - log s (x - m first: it is exact for x near
// the max, where log-probabilities matter most, even when the logits are large).
template <typename T>
TRIDENT_INLINE T log_softmax_value(T x, T m, T logs) { return (x - m) - logs; }

// Backward of y = softmax(x) along a row: dx = y * (g - sum(g * y)).
template <typename T>
TRIDENT_INLINE T softmax_grad(T g, T y, T dot) { return y * (g - dot); }
// Backward of y = log_softmax(x): dx = g - e^y * sum(g).
template <typename T>
TRIDENT_INLINE T log_softmax_grad(T g, T y, T gsum) { return g - softmax_exp(y) * gsum; }

}  // namespace trident::math
