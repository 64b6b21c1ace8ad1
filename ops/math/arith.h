// Per-element arithmetic shared by the CPU loops and the CUDA kernels (DESIGN.md: write the
// math once). Each functor computes in the compute type (f32 for f16/bf16 storage).
#pragma once

#include <cstdint>

#include "core/macros.h"

namespace trident {

enum class BinaryOp : uint8_t { Add, Sub, Mul, Div };

inline const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
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
  }
  return f(Add{});
}

}  // namespace math
}  // namespace trident
