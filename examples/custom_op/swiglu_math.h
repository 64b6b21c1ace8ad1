// The per-element math of SwiGLU, written once for the CPU loop (swiglu.cpp) and the CUDA kernel
// (swiglu_cuda.cu), as Trident's own ops share theirs (ops/math/): forward and backward side by
// side. TRIDENT_INLINE makes them __host__ __device__ under nvcc.
//
//   out = silu(a) * b,  silu(a) = a * s,  s = sigmoid(a)
//   d out / d a = b * s * (1 + a * (1 - s))
//   d out / d b = silu(a)
#pragma once

#include <cmath>

#include "core/macros.h"

namespace swiglu_math {

template <typename T>
TRIDENT_INLINE T sigmoid(T a) {
  // exp of a non-positive number only: no overflow for large |a|.
  using std::exp;
  const T e = exp(-(a < T(0) ? -a : a));
  return a >= T(0) ? T(1) / (T(1) + e) : e / (T(1) + e);
}

template <typename T>
TRIDENT_INLINE T forward(T a, T b) {
  return a * sigmoid(a) * b;
}

// Gradients of a and b given the output's gradient g.
template <typename T>
TRIDENT_INLINE void backward(T g, T a, T b, T& ga, T& gb) {
  const T s = sigmoid(a);
  ga = g * b * s * (T(1) + a * (T(1) - s));
  gb = g * a * s;
}

}  // namespace swiglu_math
