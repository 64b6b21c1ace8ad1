// Element types and dispatch from a runtime DType to a C++ type.
#pragma once

#include <cstdint>
#include <ostream>
#include <string_view>
#include <type_traits>

#include "core/error.h"
#include "core/macros.h"
#include "core/half.h"

namespace trident {

enum class DType : uint8_t { F32, F64, F16, BF16, I32, I64, U8, Bool };

inline constexpr DType kF32 = DType::F32;
inline constexpr DType kF64 = DType::F64;
inline constexpr DType kF16 = DType::F16;
inline constexpr DType kBF16 = DType::BF16;
inline constexpr DType kI32 = DType::I32;
inline constexpr DType kI64 = DType::I64;
inline constexpr DType kU8 = DType::U8;
inline constexpr DType kBool = DType::Bool;

constexpr size_t itemsize(DType t) {
  switch (t) {
    case DType::F64:
    case DType::I64: return 8;
    case DType::F32:
    case DType::I32: return 4;
    case DType::F16:
    case DType::BF16: return 2;
    case DType::U8:
    case DType::Bool: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
    case DType::Bool: return "bool";
  }
  return "?";
}

constexpr bool is_floating(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16;
}
constexpr bool is_reduced_float(DType t) { return t == DType::F16 || t == DType::BF16; }
constexpr bool is_integral(DType t, bool include_bool = false) {
  return t == DType::I32 || t == DType::I64 || t == DType::U8 || (include_bool && t == DType::Bool);
}

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// Parses "f32", "float32", "bf16", ... (for flags and file headers).
DType dtype_from_string(std::string_view s);

// The DType of a C++ element type.
template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::F32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::F64; };
template <> struct DTypeOf<Half> { static constexpr DType value = DType::F16; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::BF16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::I32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::I64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::U8; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::Bool; };
template <typename T> inline constexpr DType dtype_of = DTypeOf<T>::value;

// The type arithmetic on T is done in: f16 and bf16 compute in f32 (they are storage types).
template <typename T> struct ComputeType { using type = T; };
template <> struct ComputeType<Half> { using type = float; };
template <> struct ComputeType<BFloat16> { using type = float; };
template <typename T> using compute_t = typename ComputeType<T>::type;

// NOTE [Value conversion]: one rule for every backend's dtype conversion. A floating value goes to
// an integer dtype through int64 (truncated toward zero, then wrapped modulo 2^bits), so -1.5 -> u8
// is 255 on the CPU and on the GPU alike, as in PyTorch's CPU; a direct cast is undefined out of
// range, and the GPU's conversion saturates (0) where the CPU's wraps.
template <typename D, typename S>
TRIDENT_INLINE D convert_value(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<D, bool>) {
    return static_cast<compute_t<S>>(v) != compute_t<S>(0);
  } else if constexpr (std::is_integral_v<D> && !std::is_integral_v<compute_t<S>>) {
    return static_cast<D>(static_cast<int64_t>(static_cast<compute_t<S>>(v)));
  } else {
    return static_cast<D>(static_cast<compute_t<S>>(v));
  }
}

// The type reductions over T accumulate in (NOTE [Accumulation]: sums of f32 accumulate in f64
// on the CPU, so long reductions do not drift with their length and gradients checked against
// finite differences stay accurate; kernels that are speed-critical state their own choice).
template <typename T> struct AccType { using type = T; };
template <> struct AccType<float> { using type = double; };
template <> struct AccType<Half> { using type = double; };
template <> struct AccType<BFloat16> { using type = double; };
template <> struct AccType<int32_t> { using type = int64_t; };
template <> struct AccType<uint8_t> { using type = int64_t; };
template <> struct AccType<bool> { using type = int64_t; };
template <typename T> using acc_t = typename AccType<T>::type;

}  // namespace trident

// Dispatch: run a lambda with `scalar_t` bound to the C++ type of a runtime DType.
//   TRIDENT_DISPATCH_FLOATING(t.dtype(), "softmax", [&] { kernel<scalar_t>(...); });
// A dtype outside the list throws an Error naming the op and the dtype.
#define TRIDENT_DISPATCH_CASE(ENUM, TYPE, ...) \
  case ::trident::DType::ENUM: {               \
    using scalar_t = TYPE;                     \
    return __VA_ARGS__();                      \
  }

#define TRIDENT_DISPATCH_DEFAULT(DT, NAME, KIND) \
  default:                                       \
    TRIDENT_FAIL(NAME, ": no kernel for dtype ", DT, " (supported: " KIND ")");

// f32 and f64: the types with native CPU kernels.
#define TRIDENT_DISPATCH_F32_F64(DTYPE, NAME, ...)                   \
  [&] {                                                             \
    const ::trident::DType _dt = (DTYPE);                           \
    switch (_dt) {                                                  \
      TRIDENT_DISPATCH_CASE(F32, float, __VA_ARGS__)                \
      TRIDENT_DISPATCH_CASE(F64, double, __VA_ARGS__)               \
      TRIDENT_DISPATCH_DEFAULT(_dt, NAME, "f32, f64")               \
    }                                                               \
  }()

// Every floating type; f16/bf16 kernels compute in compute_t<scalar_t> (f32).
#define TRIDENT_DISPATCH_FLOATING(DTYPE, NAME, ...)                  \
  [&] {                                                             \
    const ::trident::DType _dt = (DTYPE);                           \
    switch (_dt) {                                                  \
      TRIDENT_DISPATCH_CASE(F32, float, __VA_ARGS__)                \
      TRIDENT_DISPATCH_CASE(F64, double, __VA_ARGS__)               \
      TRIDENT_DISPATCH_CASE(F16, ::trident::Half, __VA_ARGS__)      \
      TRIDENT_DISPATCH_CASE(BF16, ::trident::BFloat16, __VA_ARGS__) \
      TRIDENT_DISPATCH_DEFAULT(_dt, NAME, "f32, f64, f16, bf16")    \
    }                                                               \
  }()

// Every floating and integer type (not bool).
#define TRIDENT_DISPATCH_NUMERIC(DTYPE, NAME, ...)                   \
  [&] {                                                             \
    const ::trident::DType _dt = (DTYPE);                           \
    switch (_dt) {                                                  \
      TRIDENT_DISPATCH_CASE(F32, float, __VA_ARGS__)                \
      TRIDENT_DISPATCH_CASE(F64, double, __VA_ARGS__)               \
      TRIDENT_DISPATCH_CASE(F16, ::trident::Half, __VA_ARGS__)      \
      TRIDENT_DISPATCH_CASE(BF16, ::trident::BFloat16, __VA_ARGS__) \
      TRIDENT_DISPATCH_CASE(I32, int32_t, __VA_ARGS__)              \
      TRIDENT_DISPATCH_CASE(I64, int64_t, __VA_ARGS__)              \
      TRIDENT_DISPATCH_CASE(U8, uint8_t, __VA_ARGS__)               \
      TRIDENT_DISPATCH_DEFAULT(_dt, NAME, "floating and integer types") \
    }                                                               \
  }()

// Every type, bool included.
#define TRIDENT_DISPATCH_ALL(DTYPE, NAME, ...)                       \
  [&] {                                                             \
    const ::trident::DType _dt = (DTYPE);                           \
    switch (_dt) {                                                  \
      TRIDENT_DISPATCH_CASE(F32, float, __VA_ARGS__)                \
      TRIDENT_DISPATCH_CASE(F64, double, __VA_ARGS__)               \
      TRIDENT_DISPATCH_CASE(F16, ::trident::Half, __VA_ARGS__)      \
      TRIDENT_DISPATCH_CASE(BF16, ::trident::BFloat16, __VA_ARGS__) \
      TRIDENT_DISPATCH_CASE(I32, int32_t, __VA_ARGS__)              \
      TRIDENT_DISPATCH_CASE(I64, int64_t, __VA_ARGS__)              \
      TRIDENT_DISPATCH_CASE(U8, uint8_t, __VA_ARGS__)               \
      TRIDENT_DISPATCH_CASE(Bool, bool, __VA_ARGS__)                \
    }                                                               \
    TRIDENT_FAIL(NAME, ": invalid dtype value ", static_cast<int>(_dt)); \
  }()
