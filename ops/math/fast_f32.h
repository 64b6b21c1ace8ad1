// Vectorizable f32 exp, log, sigmoid, tanh and the GELU pieces, accurate to a few ulps.
//
// NOTE [Fast f32 math]: glibc's expf/tanhf/erff are scalar calls, so a loop that calls them does
// not vectorize and runs several times slower than PyTorch's vectorized kernels. The functions
// here are branch-free arithmetic (selects, integer bit tricks, polynomials) that the compiler
// turns into SIMD code, and that a CUDA kernel can run as they are. They keep f32 accuracy:
// tests/ops/unary_test.cpp compares them with the f64 computation on millions of inputs
// (errors of a few ulps at most; see the test for the bounds). Three choices make that true:
//  - exp_hilo takes its argument as an unevaluated sum hi + lo, so callers that form the
//    argument exactly (-x^2/2 split in f32 for GELU, the tanh-GELU polynomial in f64) do not
//    lose its low bits: at x = -10 rounding -x^2/2 to one f32 would cost ~25 ulps;
//  - sigmoid, tanh-GELU and exact GELU never compute 1 + (something close to -1): GELU's tail
//    is x * Phi(x) with Phi(-u) = exp(-u^2/2) * S(t) / (u + a), a smooth, well-conditioned
//    fit, where PyTorch's 0.5 * x * (1 + erf(x / sqrt2)) loses everything below x = -5;
//  - the polynomial coefficients were fitted (near-minimax, relative error) for this code;
//    the fits' own errors are given next to them, well under f32's half ulp (6e-8).
// Vectorization: with GCC's default -ftrapping-math, a `c ? a : b` whose arms compute
// anything is kept as a branch (the arithmetic may not be speculated), and the loop stays
// scalar. select() (ops/math/select.h) picks with integer masks instead, so every value is
// computed and the loop vectorizes; clamps are select(x > c, c, x), which also lets NaN through.
// The results do not depend on the vector width (no reductions). The AVX2 clone of the CPU
// loops (NOTE [ISA clones] in ops/cpu/isa.h) contracts a * b + c into FMAs, which can move
// the last bit; the formulas hold either way (the products that must be exact are exact with
// or without FMA), and the accuracy test runs whichever clone the machine picks.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/macros.h"
#include "ops/math/select.h"

namespace trident::math::f32 {

TRIDENT_INLINE uint32_t to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
TRIDENT_INLINE float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
TRIDENT_INLINE float abs(float x) { return from_bits(to_bits(x) & 0x7fffffffu); }
// x clamped to [lo, hi]; NaN stays NaN.
TRIDENT_INLINE float clamp(float x, float lo, float hi) {
  x = select(x > hi, hi, x);
  return select(x < lo, lo, x);
}

// 2^K e^(hi + lo), where lo is a small correction to hi (|lo| < 2^-10 |hi|; 0 for plain exp).
// Relative error about 1 ulp over the whole range, subnormal results included; inf, -inf and
// NaN give inf, 0 and NaN. The scale 2^K is exact: GELU's gradients use K = 24 to keep the
// factor e^-v normal where the products it enters are (a subnormal factor has few bits).
template <int K = 0>
TRIDENT_INLINE float exp_hilo(float hi, float lo) {
  // 2^K e^(89) overflows and 2^K e^(-104 - K ln2) rounds to 0; clamping keeps n in range (NaN
  // passes through).
  hi = clamp(hi, -104.0f - 0.6931472f * K, 89.0f);
  // n = round(hi / ln2): adding 1.5 * 2^23 rounds to an integer held in the low mantissa bits.
  constexpr float kShift = 12582912.0f;
  constexpr float kLog2e = 1.44269502163f;
  const float t = (hi + lo) * kLog2e + kShift;
  const float n = t - kShift;
  const int32_t ni = static_cast<int32_t>(to_bits(t) - to_bits(kShift)) + K;
  // r = hi + lo - n ln2, with ln2 split so that n * kLn2Hi is exact (kLn2Hi has 12 bits).
  constexpr float kLn2Hi = 0.693115234375f;
  constexpr float kLn2Lo = 3.19461833e-05f;
  const float r = (hi - n * kLn2Hi) + (lo - n * kLn2Lo);
  // e^r on |r| <= 0.35: 1 + r + r^2 P(r); fit error 3.3e-9.
  const float p = 1.0f + (r + r * r * (4.999999404e-01f +
                                      r * (1.666651517e-01f +
                                           r * (4.166845605e-02f + r * (8.369418792e-03f + r * 1.381314476e-03f)))));
  // Scale by 2^(n + K) in two exact steps so that a subnormal result is rounded once.
  const int32_t n1 = ni >> 1;
  const int32_t n2 = ni - n1;
  const float s1 = from_bits(static_cast<uint32_t>(n1 + 127) << 23);
  const float s2 = from_bits(static_cast<uint32_t>(n2 + 127) << 23);
  return p * s1 * s2;
}

TRIDENT_INLINE float exp(float x) { return exp_hilo(x, 0.0f); }

// 1 / (1 + e^-x) = e^x / (1 + e^x), from e = e^-|x| so that neither tail cancels or
// overflows; one division.
TRIDENT_INLINE float sigmoid(float x) {
  const float e = exp(-abs(x));
  return select(x >= 0.0f, 1.0f, e) / (1.0f + e);
}

// tanh: an odd polynomial near 0 (where 1 - 2 / (e^2x + 1) would cancel), that formula beyond;
// both on |x|, then x's sign is put back (so tanh(-0) = -0).
TRIDENT_INLINE float tanh(float x) {
  const float ax = abs(x);
  const float x2 = x * x;
  // tanh(x) = x + x^3 P(x^2) on |x| <= 0.625; fit error 4.4e-9 relative.
  const float small =
      ax + ax * x2 *
               (-3.333328068e-01f +
                x2 * (1.333144158e-01f + x2 * (-5.373971537e-02f + x2 * (2.063908800e-02f + x2 * -5.704987328e-03f))));
  const float e = exp(2.0f * ax);  // inf beyond |x| = 44: 2 / inf = 0 gives 1
  const float big = 1.0f - 2.0f / (e + 1.0f);
  const float mag = select(ax < 0.625f, small, big);  // NaN takes the second branch and stays NaN
  return from_bits(to_bits(mag) | (to_bits(x) & 0x80000000u));
}

// Natural log: x = 2^e m with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s), s = (m - 1) / (m + 1),
// |s| <= 0.1716; 2 atanh(s) = 2s + s^3 P(s^2) with P the first five Taylor terms
// (2/3, 2/5, 2/7, 2/9, 2/11; the next term is below 3e-9 relative). Subnormal x is scaled by 2^23
// first; 0, negative, inf and NaN inputs get -inf, NaN, inf and NaN.
TRIDENT_INLINE float log(float x) {
  const bool sub = x < 1.17549435e-38f;  // below the smallest normal (also 0 and negatives)
  const float xs = select(sub, x * 8388608.0f, x);
  const uint32_t off = to_bits(xs) - 0x3f3504f3u;  // bits of sqrt(1/2)
  const int32_t e = static_cast<int32_t>(off) >> 23;
  const float m = from_bits((off & 0x007fffffu) + 0x3f3504f3u);
  const float ef = static_cast<float>(e) - select(sub, 23.0f, 0.0f);
  const float sm = (m - 1.0f) / (m + 1.0f);  // m - 1 is exact
  const float s2 = sm * sm;
  const float logm =
      2.0f * sm +
      sm * s2 *
          (0.666666667f + s2 * (0.4f + s2 * (0.285714286f + s2 * (0.222222222f + s2 * 0.181818182f))));
  constexpr float kLn2Hi = 0.693115234375f, kLn2Lo = 3.19461833e-05f;  // ef * kLn2Hi is exact
  const float r = ef * kLn2Hi + (logm + ef * kLn2Lo);
  const float kInf = from_bits(0x7f800000u), kNaN = from_bits(0x7fc00000u);
  const float special = select(x == 0.0f, -kInf, select(x == kInf, kInf, kNaN));
  return select((x > 0.0f) & (x < kInf), r, special);
}

// ---- GELU ----

// The constants of GELU's two forms: sqrt(2/pi), 0.044715 (GPT-2's tanh approximation),
// 1/sqrt(2 pi).
inline constexpr double kSqrt2OverPi = 0.7978845608028654;
inline constexpr double kGeluTanhCoeff = 0.044715;
inline constexpr double kInvSqrt2Pi = 0.3989422804014327;

// 2^K e^a for an f64 argument a computed exactly in f64 from an f32 input: split into an f32
// pair so that exp_hilo keeps its low bits. Callers keep a finite (they clamp x to +-20 first: the
// split of -inf would give inf - inf).
template <int K = 0>
TRIDENT_INLINE float exp_of_f64(double a) {
  const float hi = static_cast<float>(a);
  const float lo = static_cast<float>(a - static_cast<double>(hi));
  return exp_hilo<K>(hi, lo);
}

// The scale of the GELU pieces below: e^-(...) is computed as 2^24 e^-(...), normal wherever the
// gradient terms it multiplies (|x v'| < 2^11 for |x| <= 20) are representable.
inline constexpr int kGeluScale = 24;
inline constexpr float kGeluUnscale = 1.0f / 16777216.0f;  // 2^-24

// Exact GELU's normal tail: Phi(-|x|) = e * ratio with e = exp(-x^2/2), kept as eb = 2^24 e.
// Phi(-u) = e * S(t) / (u + a), t = (u - 2.5) / (u + 2.5), a = 2 / sqrt(2 pi); S varies only
// between 0.399 and 0.473, so the fit and its evaluation are well conditioned. Fit on
// u in [0, 14.6] (beyond, e underflows), error 3.7e-9 relative.
struct NormalTail {
  float ratio, eb;
};
TRIDENT_INLINE NormalTail normal_tail(float x) {
  const float xc = clamp(x, -20.0f, 20.0f);  // e = 0 beyond, and t stays finite
  // -x^2/2 = hi + lo exactly: x = xh + xl with xh keeping 12 significant bits, so that
  // xh^2 and xl (2 xh + xl) are exact or nearly so in f32.
  const float xh = from_bits(to_bits(xc) & 0xfffff000u);
  const float xl = xc - xh;
  const float eb = exp_hilo<kGeluScale>(-0.5f * (xh * xh), -0.5f * (xl * (xh + xc)));
  const float u = abs(xc);
  const float t = (u - 2.5f) / (u + 2.5f);
  float s = -6.810118794e-05f;
  s = s * t + -2.318003244e-04f;
  s = s * t + 3.897401984e-05f;
  s = s * t + 1.336372923e-03f;
  s = s * t + 1.118264045e-03f;
  s = s * t + -6.644449662e-03f;
  s = s * t + -7.664329372e-03f;
  s = s * t + 5.102474988e-02f;
  s = s * t + -6.058312953e-02f;
  s = s * t + -4.549106210e-02f;
  s = s * t + 4.660944045e-01f;
  return {s / (u + 0.7978845608f), eb};
}

// x * Phi(x). For x below -20 the result is -0 (Phi underflowed); x is clamped there so that
// x = -inf gives the limit -0 instead of -inf * 0 = NaN.
TRIDENT_INLINE float gelu_erf(float x) {
  const NormalTail n = normal_tail(x);
  const float xm = select(x < -20.0f, -20.0f, x);
  const float q = n.eb * kGeluUnscale * n.ratio;
  return select(x >= 0.0f, x * (1.0f - q), (n.eb * (xm * n.ratio)) * kGeluUnscale);
}

// d/dx x Phi(x) = Phi(x) + x phi(x), phi the normal density e / sqrt(2 pi); for x < 0 both
// terms carry e: e (ratio + x / sqrt(2 pi)), unscaled once at the end.
TRIDENT_INLINE float gelu_erf_grad(float x) {
  const NormalTail n = normal_tail(x);
  const float xm = clamp(x, -20.0f, 20.0f);  // x phi(x) -> 0 at +-inf
  constexpr float kInv = static_cast<float>(kInvSqrt2Pi);
  const float e = n.eb * kGeluUnscale;
  const float pos = (1.0f - e * n.ratio) + xm * (e * kInv);
  const float neg = (n.eb * (n.ratio + xm * kInv)) * kGeluUnscale;
  return select(x >= 0.0f, pos, neg);
}

// tanh-GELU: 0.5 x (1 + tanh(u)) = x sigmoid(v), v = 2u = 2 sqrt(2/pi) (x + 0.044715 x^3).
// v is formed in f64 (the result's relative error is |v| times v's). With e = e^-|v| (kept as
// eb = 2^24 e) and d = 1 + e: sigmoid(v) = 1/d for v >= 0, e/d for v < 0, and
// sigmoid(v) sigmoid(-v) = e / d^2, all without cancellation. v has the sign of x; beyond
// |x| = 20, e = 0 (x is clamped there to keep v finite).
struct SigmoidParts {
  float eb;  // 2^24 e^-|v|
  float d;   // 1 + e^-|v|
};
TRIDENT_INLINE SigmoidParts gelu_tanh_parts(float x) {
  const double xd = abs(clamp(x, -20.0f, 20.0f));
  const double nv = -2.0 * kSqrt2OverPi * xd * (1.0 + kGeluTanhCoeff * xd * xd);  // -|v|
  const float eb = exp_of_f64<kGeluScale>(nv);
  return {eb, 1.0f + eb * kGeluUnscale};
}

TRIDENT_INLINE float gelu_tanh(float x) {
  const SigmoidParts s = gelu_tanh_parts(x);
  const float xm = select(x < -20.0f, -20.0f, x);  // as in gelu_erf: -inf gives -0
  const float r = xm / s.d;
  return select(x >= 0.0f, r, (r * s.eb) * kGeluUnscale);
}

// d/dx x sigmoid(v) = sigmoid(v) + x sigmoid(v) sigmoid(-v) v'.
TRIDENT_INLINE float gelu_tanh_grad(float x) {
  const SigmoidParts s = gelu_tanh_parts(x);
  const float xm = clamp(x, -20.0f, 20.0f);
  constexpr float k2 = static_cast<float>(2.0 * kSqrt2OverPi);
  constexpr float k6c = static_cast<float>(6.0 * kSqrt2OverPi * kGeluTanhCoeff);
  const float dv = k2 + k6c * (xm * xm);
  const float sp = 1.0f / s.d;
  const float second = xm * (sp * (s.eb * sp)) * dv;  // scaled by 2^24
  return select(x >= 0.0f, sp + second * kGeluUnscale, (sp * s.eb + second) * kGeluUnscale);
}

}  // namespace trident::math::f32
