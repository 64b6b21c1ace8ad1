// Per-element unary math shared by the CPU loops and the CUDA kernels. Forward and backward
// sit side by side; a backward functor takes (grad, x or y) and returns the input gradient,
// where y is the forward's output (ops that differentiate best from their output save it).
// f32 (and f16/bf16, which compute in f32) take the vectorizable paths of ops/math/fast_f32.h
// (NOTE [Fast f32 math]); f64 uses the C library, for gradient checks.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/macros.h"
#include "ops/math/fast_f32.h"

namespace trident::math {

struct Relu {
  template <typename T> TRIDENT_INLINE T operator()(T x) const { return x > T(0) ? x : T(0); }
};
// d relu / dx: 1 where x > 0 (0 at the kink, as PyTorch). Given y = relu(x) instead of x it
// is the same function (y > 0 exactly where x > 0), which is how autograd calls it.
struct ReluBackward {
  template <typename T> TRIDENT_INLINE T operator()(T g, T x) const { return x > T(0) ? g : T(0); }
};

// Floating types (integer tensors use the kernel's own overflow-safe form).
struct Abs {
  TRIDENT_INLINE float operator()(float x) const { return f32::abs(x); }  // also clears -0's sign
  TRIDENT_INLINE double operator()(double x) const { return std::fabs(x); }
};
// g * sign(x), with sign(0) = sign(NaN) = 0 as PyTorch.
struct AbsBackward {
  template <typename T> TRIDENT_INLINE T operator()(T g, T x) const {
    return g * (static_cast<T>(x > T(0)) - static_cast<T>(x < T(0)));
  }
};

struct Exp {
  TRIDENT_INLINE float operator()(float x) const { return f32::exp(x); }
  TRIDENT_INLINE double operator()(double x) const { return std::exp(x); }
};
// From the output: d e^x / dx = e^x = y.
struct ExpBackward {
  template <typename T> TRIDENT_INLINE T operator()(T g, T y) const { return g * y; }
};

struct Log {
  TRIDENT_INLINE float operator()(float x) const { return f32::log(x); }
  TRIDENT_INLINE double operator()(double x) const { return std::log(x); }
};
struct LogBackward {
  template <typename T> TRIDENT_INLINE T operator()(T g, T x) const { return g / x; }
};

struct Sqrt {
  template <typename T> TRIDENT_INLINE T operator()(T x) const { return std::sqrt(x); }
};
// From the output: g / (2 y) (inf at x = 0, as PyTorch).
struct SqrtBackward {
  template <typename T> TRIDENT_INLINE T operator()(T g, T y) const { return g / (T(2) * y); }
};

struct Rsqrt {
  template <typename T> TRIDENT_INLINE T operator()(T x) const { return T(1) / std::sqrt(x); }
};
// From the output: d x^-1/2 / dx = -x^-3/2 / 2 = -y^3 / 2.
struct RsqrtBackward {
  template <typename T> TRIDENT_INLINE T operator()(T g, T y) const { return T(-0.5) * g * (y * y * y); }
};

struct Sigmoid {
  TRIDENT_INLINE float operator()(float x) const { return f32::sigmoid(x); }
  TRIDENT_INLINE double operator()(double x) const {
    const double e = std::exp(-std::fabs(x));
    return (x >= 0.0 ? 1.0 : e) / (1.0 + e);
  }
};
// From the output: y (1 - y).
struct SigmoidBackward {
  template <typename T> TRIDENT_INLINE T operator()(T g, T y) const { return g * (y * (T(1) - y)); }
};

struct Tanh {
  TRIDENT_INLINE float operator()(float x) const { return f32::tanh(x); }
  TRIDENT_INLINE double operator()(double x) const { return std::tanh(x); }
};
// From the output: 1 - y^2.
struct TanhBackward {
  template <typename T> TRIDENT_INLINE T operator()(T g, T y) const { return g * (T(1) - y * y); }
};

// Exact GELU (BERT): x Phi(x), Phi the standard normal CDF. In f64, Phi(x) = erfc(-x/sqrt2)/2,
// which, unlike 1 + erf(x/sqrt2), does not cancel for negative x. Below -40 the result is -0
// (x is clamped so that -inf gives the limit, not -inf * 0).
#if defined(__CUDACC__) || defined(TRIDENT_SIMT)  // TRIDENT_SIMT: the CPU emulator (tests/simt) runs the kernels
// NOTE [GELU on the GPU]: the CPU forms (fast_f32.h) build exp from f64 pieces to vectorize and to
// match the f64 reference closely; on the GPU f64 is slow, and CUDA's own erfcf and expf are
// accurate to a few ulp, so the device uses them. Both forms avoid cancellation for negative x:
// erf's through erfc(-x/sqrt2), tanh's as x sigmoid(2u) with e^(-2|u|). The tanh form's Fast
// variant, for f16 and bf16 results (11 and 8 significant bits), takes __expf and __fdividef
// instead of expf and an IEEE division: their f32 errors (a few ulp, about 2^-21 relative for
// __expf over this range) stay far below the result's rounding, and the half-precision GELU ran
// compute-bound at 0.70 of PyTorch's speed with the accurate forms (H200, 2026-11-30).
// (Declared in both of nvcc's passes: the kernels that call them are compiled for the host too.)
namespace gpu {
// Clamped below so that -inf gives -0 (not -inf * 0); NaN passes through the comparison.
__device__ __forceinline__ float gelu_erf(float x) {
  const float xm = x < -40.0f ? -40.0f : x;
  return 0.5f * xm * erfcf(-xm * 0.70710678118654752f);
}
__device__ __forceinline__ float gelu_erf_grad(float x) {
  const float xm = x < -40.0f ? -40.0f : (x > 40.0f ? 40.0f : x);
  return 0.5f * erfcf(-x * 0.70710678118654752f) + xm * expf(-0.5f * xm * xm) * 0.39894228040143268f;
}
template <bool Fast>
__device__ __forceinline__ float exp_of(float x) {
  return Fast ? __expf(x) : expf(x);
}
template <bool Fast>
__device__ __forceinline__ float ratio(float a, float b) {
  return Fast ? __fdividef(a, b) : a / b;
}
// u = sqrt(2/pi) (x + 0.044715 x^3); sigmoid(2u) from e = e^(-2|u|) without cancellation.
template <bool Fast = false>
__device__ __forceinline__ float gelu_tanh(float x) {
  const float xm = x < -20.0f ? -20.0f : x;
  const float u = 0.79788456080286536f * xm * (1.0f + 0.044715f * xm * xm);
  const float e = exp_of<Fast>(-2.0f * fabsf(u));
  return ratio<Fast>(u >= 0.0f ? x : xm * e, 1.0f + e);
}
template <bool Fast = false>
__device__ __forceinline__ float gelu_tanh_grad(float x_in) {
  const float x = x_in < -20.0f ? -20.0f : (x_in > 20.0f ? 20.0f : x_in);
  const float u = 0.79788456080286536f * x * (1.0f + 0.044715f * x * x);
  const float du = 0.79788456080286536f * (1.0f + 3.0f * 0.044715f * x * x);
  const float e = exp_of<Fast>(-2.0f * fabsf(u));
  const float r = ratio<Fast>(1.0f, 1.0f + e);
  const float sig = u >= 0.0f ? r : e * r;  // sigmoid(2u)
  return sig + x * (e * r * r) * 2.0f * du;  // sigmoid'(2u) = e / (1 + e)^2
}
}  // namespace gpu
#endif

struct Gelu {
  TRIDENT_INLINE float operator()(float x) const {
#ifdef __CUDA_ARCH__
    return gpu::gelu_erf(x);
#else
    return f32::gelu_erf(x);
#endif
  }
  TRIDENT_INLINE double operator()(double x) const {
    const double xm = x < -40.0 ? -40.0 : x;
    return 0.5 * xm * std::erfc(-xm * 0.7071067811865476);
  }
};
// Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi).
struct GeluBackward {
  TRIDENT_INLINE float operator()(float g, float x) const {
#ifdef __CUDA_ARCH__
    return g * gpu::gelu_erf_grad(x);
#else
    return g * f32::gelu_erf_grad(x);
#endif
  }
  TRIDENT_INLINE double operator()(double g, double x) const {
    const double xm = x < -40.0 ? -40.0 : (x > 40.0 ? 40.0 : x);
    return g * (0.5 * std::erfc(-x * 0.7071067811865476) + xm * std::exp(-0.5 * xm * xm) * f32::kInvSqrt2Pi);
  }
};

// GPT-2's tanh approximation: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed
// as x sigmoid(2u), which does not cancel for negative x.
struct GeluTanh {
  TRIDENT_INLINE float operator()(float x) const {
#ifdef __CUDA_ARCH__
    return gpu::gelu_tanh(x);
#else
    return f32::gelu_tanh(x);
#endif
  }
  TRIDENT_INLINE double operator()(double x) const {
    const double xm = x < -40.0 ? -40.0 : (x > 40.0 ? 40.0 : x);
    const double v = 2.0 * f32::kSqrt2OverPi * xm * (1.0 + f32::kGeluTanhCoeff * xm * xm);
    const double e = std::exp(-std::fabs(v));
    return (x > 40.0 ? x : xm) * ((v >= 0.0 ? 1.0 : e) / (1.0 + e));
  }
};
// Analytically: sigmoid(v) + x sigmoid(v) sigmoid(-v) v', v' = 2 sqrt(2/pi) (1 + 3 0.044715 x^2).
struct GeluTanhBackward {
  TRIDENT_INLINE float operator()(float g, float x) const {
#ifdef __CUDA_ARCH__
    return g * gpu::gelu_tanh_grad(x);
#else
    return g * f32::gelu_tanh_grad(x);
#endif
  }
  TRIDENT_INLINE double operator()(double g, double x) const {
    const double xm = x < -40.0 ? -40.0 : (x > 40.0 ? 40.0 : x);
    const double v = 2.0 * f32::kSqrt2OverPi * xm * (1.0 + f32::kGeluTanhCoeff * xm * xm);
    const double dv = 2.0 * f32::kSqrt2OverPi * (1.0 + 3.0 * f32::kGeluTanhCoeff * xm * xm);
    const double e = std::exp(-std::fabs(v));
    const double sp = 1.0 / (1.0 + e);
    const double sig = v >= 0.0 ? sp : e * sp;
    return g * (sig + xm * (sp * (e * sp)) * dv);
  }
};

// ---- pow(x, p) for a scalar exponent ----
// The exponents PyTorch computes without pow() get the same special forms here (so
// pow(-0., 0.5) = -0 as sqrt gives, and pow(x, 0) = 1 even for NaN); the choice is made once
// per kernel, not per element.
enum class PowKind : uint8_t { Zero, One, Square, Cube, Sqrt, Rsqrt, Reciprocal, InvSquare, General };

TRIDENT_INLINE PowKind pow_kind(double p) {
  if (p == 0.0) return PowKind::Zero;
  if (p == 1.0) return PowKind::One;
  if (p == 2.0) return PowKind::Square;
  if (p == 3.0) return PowKind::Cube;
  if (p == 0.5) return PowKind::Sqrt;
  if (p == -0.5) return PowKind::Rsqrt;
  if (p == -1.0) return PowKind::Reciprocal;
  if (p == -2.0) return PowKind::InvSquare;
  return PowKind::General;
}

struct PowZero {
  template <typename T> TRIDENT_INLINE T operator()(T) const { return T(1); }
};
struct PowOne {
  template <typename T> TRIDENT_INLINE T operator()(T x) const { return x; }
};
struct PowSquare {
  template <typename T> TRIDENT_INLINE T operator()(T x) const { return x * x; }
};
struct PowCube {
  template <typename T> TRIDENT_INLINE T operator()(T x) const { return x * x * x; }
};
struct PowReciprocal {
  template <typename T> TRIDENT_INLINE T operator()(T x) const { return T(1) / x; }
};
struct PowInvSquare {
  template <typename T> TRIDENT_INLINE T operator()(T x) const { return T(1) / (x * x); }
};
// The exponent is rounded to the compute type, as PyTorch does for a float tensor.
struct PowGeneral {
  double p;
  template <typename T> TRIDENT_INLINE T operator()(T x) const { return std::pow(x, static_cast<T>(p)); }
};

// Calls f with the functor computing x^p.
template <typename F>
TRIDENT_INLINE decltype(auto) with_pow(double p, F&& f) {
  switch (pow_kind(p)) {
    case PowKind::Zero: return f(PowZero{});
    case PowKind::One: return f(PowOne{});
    case PowKind::Square: return f(PowSquare{});
    case PowKind::Cube: return f(PowCube{});
    case PowKind::Sqrt: return f(Sqrt{});
    case PowKind::Rsqrt: return f(Rsqrt{});
    case PowKind::Reciprocal: return f(PowReciprocal{});
    case PowKind::InvSquare: return f(PowInvSquare{});
    case PowKind::General: break;
  }
  return f(PowGeneral{p});
}

// d x^p / dx = p x^(p-1), with x^(p-1) from the functor of p - 1 (so the special forms agree
// with PyTorch's at 0: pow(x, 0.5)' at -0 is 0.5 * rsqrt(-0) = -inf). p = 0 has gradient 0,
// handled by the caller.
template <typename PowFn>
struct PowBackward {
  PowFn pow_m1;  // x -> x^(p-1)
  double p;
  template <typename T> TRIDENT_INLINE T operator()(T g, T x) const { return g * (static_cast<T>(p) * pow_m1(x)); }
};

// ---- clamp(x, lo, hi) ----
// min(max(x, lo), hi) as PyTorch: lo > hi gives hi everywhere, NaN in x stays NaN. Absent
// bounds are -inf / +inf (for integers: the type's limits).
template <typename T>
struct Clamp {
  T lo, hi;
  TRIDENT_INLINE T operator()(T x) const {
    const T y = x < lo ? lo : x;
    return y > hi ? hi : y;
  }
};
// The gradient passes where lo <= x <= hi, bounds included (PyTorch's convention); a NaN x
// gets 0.
template <typename T>
struct ClampBackward {
  T lo, hi;
  TRIDENT_INLINE T operator()(T g, T x) const { return ((x >= lo) & (x <= hi)) ? g : T(0); }
};

}  // namespace trident::math
