// Per-element comparisons, logical ops, float classification and selection, shared by the CPU
// loops and the CUDA kernels. Comparisons return bool; they are false whenever a NaN is
// involved, except ne (IEEE 754, as PyTorch).
#pragma once

#include <cstdint>

#include "core/macros.h"
#include "ops/math/select.h"

namespace trident {

enum class CompareOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };

inline const char* compare_op_name(CompareOp op) {
  switch (op) {
    case CompareOp::Eq: return "eq";
    case CompareOp::Ne: return "ne";
    case CompareOp::Lt: return "lt";
    case CompareOp::Le: return "le";
    case CompareOp::Gt: return "gt";
    case CompareOp::Ge: return "ge";
  }
  return "?";
}

enum class LogicalOp : uint8_t { And, Or, Xor };

inline const char* logical_op_name(LogicalOp op) {
  switch (op) {
    case LogicalOp::And: return "logical_and";
    case LogicalOp::Or: return "logical_or";
    case LogicalOp::Xor: return "logical_xor";
  }
  return "?";
}

// isnan / isinf / isfinite.
enum class FloatClass : uint8_t { Nan, Inf, Finite };

namespace math {

struct Eq {
  template <typename T> TRIDENT_INLINE bool operator()(T a, T b) const { return a == b; }
};
struct Ne {
  template <typename T> TRIDENT_INLINE bool operator()(T a, T b) const { return a != b; }
};
struct Lt {
  template <typename T> TRIDENT_INLINE bool operator()(T a, T b) const { return a < b; }
};
struct Le {
  template <typename T> TRIDENT_INLINE bool operator()(T a, T b) const { return a <= b; }
};
struct Gt {
  template <typename T> TRIDENT_INLINE bool operator()(T a, T b) const { return a > b; }
};
struct Ge {
  template <typename T> TRIDENT_INLINE bool operator()(T a, T b) const { return a >= b; }
};

// Calls f with the functor of a CompareOp (one switch per kernel, not per element).
template <typename F>
TRIDENT_INLINE decltype(auto) with_compare_op(CompareOp op, F&& f) {
  switch (op) {
    case CompareOp::Eq: return f(Eq{});
    case CompareOp::Ne: return f(Ne{});
    case CompareOp::Lt: return f(Lt{});
    case CompareOp::Le: return f(Le{});
    case CompareOp::Gt: return f(Gt{});
    case CompareOp::Ge: return f(Ge{});
  }
  return f(Eq{});
}

// Bitwise forms on bool, so both operands are read and the loop has no branch.
struct LogicalAnd {
  TRIDENT_INLINE bool operator()(bool a, bool b) const { return a & b; }
};
struct LogicalOr {
  TRIDENT_INLINE bool operator()(bool a, bool b) const { return a | b; }
};
struct LogicalXor {
  TRIDENT_INLINE bool operator()(bool a, bool b) const { return a ^ b; }
};
struct LogicalNot {
  TRIDENT_INLINE bool operator()(bool a) const { return !a; }
};

template <typename F>
TRIDENT_INLINE decltype(auto) with_logical_op(LogicalOp op, F&& f) {
  switch (op) {
    case LogicalOp::And: return f(LogicalAnd{});
    case LogicalOp::Or: return f(LogicalOr{});
    case LogicalOp::Xor: return f(LogicalXor{});
  }
  return f(LogicalAnd{});
}

// On floating compute types (integers are never NaN or infinite: the kernels fill directly).
struct IsNan {
  template <typename T> TRIDENT_INLINE bool operator()(T x) const { return x != x; }
};
struct IsInf {
  // x - x is NaN for +-inf and NaN, and x == x rules NaN out (no <cmath>, so CUDA shares it).
  template <typename T> TRIDENT_INLINE bool operator()(T x) const { return (x - x != x - x) & (x == x); }
};
struct IsFinite {
  // x - x is 0 for finite x and NaN for inf and NaN.
  template <typename T> TRIDENT_INLINE bool operator()(T x) const { return x - x == T(0); }
};

template <typename F>
TRIDENT_INLINE decltype(auto) with_float_class(FloatClass c, F&& f) {
  switch (c) {
    case FloatClass::Nan: return f(IsNan{});
    case FloatClass::Inf: return f(IsInf{});
    case FloatClass::Finite: return f(IsFinite{});
  }
  return f(IsNan{});
}

// cond ? a : b.
struct Where {
  template <typename T> TRIDENT_INLINE T operator()(bool c, T a, T b) const { return select(c, a, b); }
};

}  // namespace math
}  // namespace trident
