// Per-element arithmetic shared by the CPU loops and the CUDA kernels (DESIGN.md: write the
// math once). Each functor computes in the compute type (f32 for f16/bf16 storage).
#pragma once

#include <cstdint>

#include "core/macros.h"
#include "ops/math/select.h"

namespace trident {

enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Maximum, Minimum };

inline const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
    case BinaryOp::Maximum: return "maximum";
    case BinaryOp::Minimum: return "minimum";
  }
  return "?";
}

namespace math {

struct Add {
  template <typename T> TRIDENT_INLINE T operator()(T a, T b) const { return a + b; }
};
struct Sub {
  template <typename T> TRIDENT_INLINE T operator()(T a, T b) const { return a - b; }
};
struct Mul {
  template <typename T> TRIDENT_INLINE T operator()(T a, T b) const { return a * b; }
};
struct Div {
  template <typename T> TRIDENT_INLINE T operator()(T a, T b) const { return a / b; }
};
// NaN in either operand gives NaN (as PyTorch's maximum/minimum, unlike std::max). The
// comparisons are combined with `|`, not `||`, and select() picks, so the loop is branch-free.
struct Maximum {
  template <typename T> TRIDENT_INLINE T operator()(T a, T b) const { return select((a > b) | (a != a), a, b); }
};
struct Minimum {
  template <typename T> TRIDENT_INLINE T operator()(T a, T b) const { return select((a < b) | (a != a), a, b); }
};
// Gradients of maximum(a, b): all of g to the larger operand, half to each on a tie (PyTorch's
// rule); where a NaN is involved, both get g (PyTorch's masks, a < b and a == b, are false).
// Minimum swaps the comparison. First selects the gradient of a (true) or of b.
template <bool IsMax, bool First>
struct MaxMinGrad {
  template <typename T> TRIDENT_INLINE T operator()(T g, T a, T b) const {
    const bool other_wins = IsMax == First ? a < b : a > b;
    return select(other_wins, T(0), select(a == b, T(0.5) * g, g));
  }
};

struct Neg {
  template <typename T> TRIDENT_INLINE T operator()(T a) const { return -a; }
};

// Calls f with the functor of a BinaryOp (one switch per kernel launch, not per element).
template <typename F>
TRIDENT_INLINE decltype(auto) with_binary_op(BinaryOp op, F&& f) {
  switch (op) {
    case BinaryOp::Add: return f(Add{});
    case BinaryOp::Sub: return f(Sub{});
    case BinaryOp::Mul: return f(Mul{});
    case BinaryOp::Div: return f(Div{});
    case BinaryOp::Maximum: return f(Maximum{});
    case BinaryOp::Minimum: return f(Minimum{});
  }
  return f(Add{});
}

}  // namespace math
}  // namespace trident
