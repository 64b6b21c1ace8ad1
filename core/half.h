// f16 and bf16 as storage types with exact conversions to and from f32.
//
// NOTE [Half conversions]: f32 -> f16 and f32 -> bf16 round to nearest, ties to even; values
// beyond the largest finite half round to infinity exactly as IEEE 754 says (65520 and up for
// f16); infinities keep their sign; NaNs stay NaN and keep their payload's top bits, so every
// f16 and bf16 bit pattern survives the trip through f32 unchanged (a NaN whose payload would be
// lost gets the quiet bit instead of turning into an infinity). The functions are plain integer
// code, usable on the host and in CUDA kernels alike, so the CPU tests check the very
// arithmetic the GPU runs.
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>

#include "core/macros.h"

namespace trident {
namespace detail {

TRIDENT_INLINE uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
TRIDENT_INLINE float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

TRIDENT_INLINE uint16_t f32_to_f16_bits(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or NaN
    if (ax == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
    uint32_t payload = (ax >> 13) & 0x3ffu;
    if (payload == 0) payload = 0x200u;  // keep it a NaN
    return static_cast<uint16_t>(sign | 0x7c00u | payload);
  }
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {  // below 2^-14: a half subnormal or zero
    const int e = static_cast<int>(ax >> 23);
    const int shift = 126 - e;  // value = m * 2^(e-150); units of 2^-24 -> m >> (126 - e)
    if (shift > 24) return static_cast<uint16_t>(sign);
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t h = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;  // may carry into the smallest normal: still right
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (ax >> 13) - (112u << 10);  // rebias the exponent from 127 to 15
  const uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
  return static_cast<uint16_t>(sign | h);
}

TRIDENT_INLINE float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0x1f) return f32_from_bits(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return f32_from_bits(sign);
    int ee = 1;
    while (!(m & 0x400u)) {
      m <<= 1;
      --ee;
    }
    m &= 0x3ffu;
    return f32_from_bits(sign | (static_cast<uint32_t>(ee + 112) << 23) | (m << 13));
  }
  return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

TRIDENT_INLINE uint16_t f32_to_bf16_bits(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {  // NaN: truncate, keep it a NaN
    uint16_t b = static_cast<uint16_t>(x >> 16);
    if ((b & 0x7fu) == 0) b |= 0x40u;
    return b;
  }
  const uint32_t lsb = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + lsb) >> 16);  // ties to even; overflow lands on inf
}

TRIDENT_INLINE float bf16_bits_to_f32(uint16_t b) { return f32_from_bits(static_cast<uint32_t>(b) << 16); }

}  // namespace detail

struct alignas(2) Half {
  uint16_t bits;
  Half() = default;
  TRIDENT_HOST_DEVICE Half(float f) : bits(detail::f32_to_f16_bits(f)) {}
  TRIDENT_HOST_DEVICE operator float() const { return detail::f16_bits_to_f32(bits); }
  static TRIDENT_HOST_DEVICE Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

struct alignas(2) BFloat16 {
  uint16_t bits;
  BFloat16() = default;
  TRIDENT_HOST_DEVICE BFloat16(float f) : bits(detail::f32_to_bf16_bits(f)) {}
  TRIDENT_HOST_DEVICE operator float() const { return detail::bf16_bits_to_f32(bits); }
  static TRIDENT_HOST_DEVICE BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

inline std::ostream& operator<<(std::ostream& os, Half h) { return os << static_cast<float>(h); }
inline std::ostream& operator<<(std::ostream& os, BFloat16 h) { return os << static_cast<float>(h); }

}  // namespace trident
