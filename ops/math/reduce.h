// Per-element math of the reductions and their backward passes, shared by the CPU loops and the
// CUDA kernels (no std:: containers, no exceptions). Forward and backward sit side by side.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/macros.h"

namespace trident::math {

// NaN test that compiles (to false) for integer types.
template <typename T>
TRIDENT_INLINE bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return v != v;
  } else {
    return false;
  }
}

template <typename T>
TRIDENT_INLINE T sign(T v) {
  return static_cast<T>((T(0) < v) - (v < T(0)));
}

// NOTE [Max and NaN]: as in PyTorch, max and min propagate NaN: once a NaN is seen it is the
// result (and, with indices, the first NaN's index is returned).
// !(v <= a) holds when v > a or either is NaN; "& !is_nan(a)" keeps a NaN once it is there. (This
// form, without a short-circuit ||, becomes two compares and a blend the compiler vectorizes.)
struct MaxOp {
  template <typename T> TRIDENT_INLINE T operator()(T a, T v) const { return (!(v <= a) & !is_nan(a)) ? v : a; }
};
struct MinOp {
  template <typename T> TRIDENT_INLINE T operator()(T a, T v) const { return (!(v >= a) & !is_nan(a)) ? v : a; }
};

// A value and the flat index it was found at; k < 0 marks "no element yet".
template <typename T>
struct ValueIndex {
  T v{};
  int64_t k = -1;
};

// Whether candidate (v, k) beats the current best (a, ka) for max (IsMax) or min: a NaN beats
// any number, a strictly larger (smaller) value wins, and ties go to the smaller index, so the
// first occurrence is returned whatever order the elements were visited in (NOTE [Max and NaN]).
template <bool IsMax>
struct ArgBetter {
  template <typename T>
  TRIDENT_INLINE bool operator()(const ValueIndex<T>& cand, const ValueIndex<T>& cur) const {
    if (cand.k < 0) return false;
    if (cur.k < 0) return true;
    const bool cn = is_nan(cand.v), un = is_nan(cur.v);
    if (cn || un) return cn && (!un || cand.k < cur.k);
    if (cand.v == cur.v) return cand.k < cur.k;
    return IsMax ? cand.v > cur.v : cand.v < cur.v;
  }
};

// ---- backward functors: (x, a, b) -> input gradient, a and b broadcast per output ----

// Max/min over all elements or dims, and the inf-norms: the gradient is shared evenly among the
// elements equal to the result (PyTorch's evenly_distribute_backward). a = the result, b = the
// upstream gradient divided by the number of ties. With AbsSign (the +-inf norms) x is compared
// by |x| and the gradient carries sign(x).
template <bool AbsSign>
struct DistributeBackward {
  template <typename T>
  TRIDENT_INLINE T operator()(T x, T value, T scaled_grad) const {
    const T m = AbsSign ? (x < T(0) ? -x : x) : x;
    const bool hit = is_nan(value) ? is_nan(m) : m == value;
    if (!hit) return T(0);
    return AbsSign ? sign(x) * scaled_grad : scaled_grad;
  }
};
// Whether x counts as one of the tied extremes (the counting half of DistributeBackward).
template <bool AbsSign>
struct IsExtreme {
  template <typename T>
  TRIDENT_INLINE bool operator()(T x, T value) const {
    const T m = AbsSign ? (x < T(0) ? -x : x) : x;
    return is_nan(value) ? is_nan(m) : m == value;
  }
};

// var and std: d var / dx = 2 (x - mean) / (N - correction). a = mean, b = the per-output scale
// (2 g / (N - c) for var; g / ((N - c) std) for std, 0 where std = 0 as in PyTorch).
struct VarBackward {
  template <typename T> TRIDENT_INLINE T operator()(T x, T mean, T scale) const { return (x - mean) * scale; }
};

// logsumexp: d lse / dx = exp(x - lse). a = lse, b = g.
struct LogSumExpBackward {
  template <typename T> TRIDENT_INLINE T operator()(T x, T lse, T g) const { return g * std::exp(x - lse); }
};

// Vector p-norm, 0 < p < inf: d |x|_p / dx = sign(x) |x|^(p-1) / |x|_p^(p-1). a = the norm,
// b = g. Where the norm is 0 the gradient is 0 (a subgradient; PyTorch's choice); for p < 1
// an x of 0 gives 0 instead of 0 * inf. p = 1 and p = 2 skip the pow.
struct NormBackward {
  double p;
  template <typename T>
  TRIDENT_INLINE T operator()(T x, T norm, T g) const {
    if (p == 1.0) return sign(x) * g;
    if (norm == T(0)) return T(0);
    if (p == 2.0) return x * (g / norm);
    if (x == T(0)) return T(0);
    const T ax = x < T(0) ? -x : x;
    const T pm1 = static_cast<T>(p - 1.0);
    return sign(x) * std::pow(ax, pm1) * (g / std::pow(norm, pm1));
  }
};

}  // namespace trident::math
