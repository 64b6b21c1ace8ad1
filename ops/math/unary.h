// Per-element unary math shared by the CPU loops and the CUDA kernels. Forward and backward
// sit side by side; a backward functor takes (grad, x or y) and returns the input gradient.
#pragma once

#include <cmath>

#include "core/macros.h"

namespace trident::math {

struct Relu {
  template <typename T> TRIDENT_INLINE T operator()(T x) const { return x > T(0) ? x : T(0); }
};
// d relu / dx at x: 1 where x > 0 (0 at the kink, as PyTorch).
struct ReluBackward {
  template <typename T> TRIDENT_INLINE T operator()(T g, T x) const { return x > T(0) ? g : T(0); }
};

struct Tanh {
  template <typename T> TRIDENT_INLINE T operator()(T x) const { return std::tanh(x); }
};
// In terms of the output y = tanh(x): dy/dx = 1 - y^2.
struct TanhBackward {
  template <typename T> TRIDENT_INLINE T operator()(T g, T y) const { return g * (T(1) - y * y); }
};

}  // namespace trident::math
