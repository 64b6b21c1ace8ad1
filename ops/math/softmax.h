// Per-element math of softmax, log-softmax and the losses built on them, shared by the CPU
// kernels and the CUDA kernels (DESIGN.md: write the math once).
//
// NOTE [Softmax exp]: softmax and cross-entropy spend almost all their time in exp (GPT-2's
// logits have 50304 columns). A call to the C library's expf stops the compiler from
// vectorizing the row loop, so f32 uses softmax_exp below: a branch-free exp the compiler turns
// into SIMD code. Range reduction x = n ln2 + r with |r| <= ln2/2 (ln2 split in a part with
// few bits and a correction, so n ln2 is exact), then the degree-7 Taylor polynomial of e^r
// (truncation error 0.347^8/8! < 6e-9, below f32's half ulp), then 2^n built in the exponent
// bits. Measured against f64 exp over [-103, 88.7]: relative error < 1e-7 (about 1 ulp).
// The input is clamped to [-104, 88.75] by comparing bit patterns as integers: a float compare
// could trap on NaN, and GCC does not if-convert (vectorize) it without -fno-trapping-math;
// NaN passes through unclamped and comes out NaN. exp(-inf) = 0 (masked attention scores),
// exp(+inf) = inf, results below 2^-126 come out as subnormals, as with expf. 2^n is applied
// as two factors 2^(n/2) so n = 128 (x close to 88.72) and n = -150 stay representable.
// f64 (gradient checks) uses the C library's exp.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/macros.h"

namespace trident::math {

TRIDENT_INLINE uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return __builtin_bit_cast(uint32_t, f);
#endif
}
TRIDENT_INLINE float float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return __builtin_bit_cast(float, u);
#endif
}

// e^x in f32, vectorizable (NOTE [Softmax exp]).
TRIDENT_INLINE float softmax_exp(float x) {
  constexpr uint32_t kLo = 0xC2D00000u;   // -104.0f
  constexpr uint32_t kHi = 0x42B18000u;   // 88.75f
  constexpr uint32_t kNegInf = 0xFF800000u, kPosInf = 0x7F800000u;
  const uint32_t ux = bits_of(x);
  // All-ones masks: x < -104 (including -inf) and x > 88.75 (including +inf); NaNs in neither.
  const uint32_t below = 0u - static_cast<uint32_t>((ux > kLo) & (ux <= kNegInf));
  const uint32_t above = 0u - static_cast<uint32_t>((ux > kHi) & (ux <= kPosInf));
  x = float_of((ux & ~(below | above)) | (kLo & below) | (kHi & above));
  // n = round(x / ln2) by the 1.5 * 2^23 shift: the sum's low mantissa bits hold n exactly.
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kShift = 12582912.0f;
  const float t = x * kLog2e + kShift;
  const int32_t n = static_cast<int32_t>(bits_of(t) - bits_of(kShift));
  const float nf = t - kShift;
  const float r = (x - nf * 0.693145751953125f) - nf * 1.428606765330187045e-06f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t n1 = n >> 1, n2 = n - n1;  // each in [-75, 64]
  const float s1 = float_of(static_cast<uint32_t>(n1 + 127) << 23);
  const float s2 = float_of(static_cast<uint32_t>(n2 + 127) << 23);
  return p * s1 * s2;
}
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
