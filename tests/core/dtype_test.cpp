#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/dtype.h"
#include "core/factory.h"

using namespace trident;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// An independent reference for f32 -> bf16: find the two bf16 neighbours by truncation and
// pick the nearer in double arithmetic, ties to the even mantissa.
uint16_t bf16_reference(float f) {
  const uint32_t u = bits(f);
  const uint16_t lo = static_cast<uint16_t>(u >> 16);
  if (std::isnan(f)) return 0;  // handled separately
  const double v = f;
  const double a = from_bits(static_cast<uint32_t>(lo) << 16);
  if (a == v) return lo;
  const uint16_t hi = static_cast<uint16_t>(lo + 1);  // next magnitude (same sign)
  const double b = from_bits(static_cast<uint32_t>(hi) << 16);  // may be inf: then compare with 2^128
  const double b_val = std::isinf(b) ? std::ldexp(1.0, 128) * (v < 0 ? -1 : 1) : b;
  const double da = std::fabs(v - a), db = std::fabs(b_val - v);
  if (da < db) return lo;
  if (db < da) return hi;
  return (lo & 1) ? hi : lo;
}

}  // namespace

TEST(DType, NamesSizesAndParsing) {
  EXPECT_EQ(itemsize(kF32), 4u);
  EXPECT_EQ(itemsize(kF64), 8u);
  EXPECT_EQ(itemsize(kF16), 2u);
  EXPECT_EQ(itemsize(kBF16), 2u);
  EXPECT_EQ(itemsize(kI32), 4u);
  EXPECT_EQ(itemsize(kI64), 8u);
  EXPECT_EQ(itemsize(kU8), 1u);
  EXPECT_EQ(itemsize(kBool), 1u);
  for (DType t : {kF32, kF64, kF16, kBF16, kI32, kI64, kU8, kBool}) EXPECT_EQ(dtype_from_string(dtype_name(t)), t);
  EXPECT_EQ(dtype_from_string("bfloat16"), kBF16);
  EXPECT_THROW(dtype_from_string("float8"), Error);
  EXPECT_TRUE(is_floating(kBF16));
  EXPECT_FALSE(is_floating(kI64));
}

TEST(Half, EveryBitPatternRoundTripsThroughF32) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const Half h = Half::from_bits(static_cast<uint16_t>(b));
    const float f = h;
    const Half back(f);
    ASSERT_EQ(back.bits, b) << "f16 bits 0x" << std::hex << b << " -> " << f;
  }
}

TEST(BFloat16, EveryBitPatternRoundTripsThroughF32) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const BFloat16 h = BFloat16::from_bits(static_cast<uint16_t>(b));
    const float f = h;
    ASSERT_EQ(bits(f), b << 16);
    const BFloat16 back(f);
    ASSERT_EQ(back.bits, b) << "bf16 bits 0x" << std::hex << b;
  }
}

TEST(Half, KnownValues) {
  EXPECT_EQ(Half(1.0f).bits, 0x3c00);
  EXPECT_EQ(Half(-2.0f).bits, 0xc000);
  EXPECT_EQ(Half(65504.0f).bits, 0x7bff);                // largest finite
  EXPECT_EQ(Half(65519.996f).bits, 0x7bff);              // just below the rounding boundary
  EXPECT_EQ(Half(65520.0f).bits, 0x7c00);                // ties to even: rounds to inf
  EXPECT_EQ(Half(std::ldexp(1.0f, -24)).bits, 0x0001);   // smallest subnormal
  EXPECT_EQ(Half(std::ldexp(1.0f, -25)).bits, 0x0000);   // half of it: tie to even (0)
  EXPECT_EQ(Half(std::ldexp(1.5f, -25)).bits, 0x0001);
  EXPECT_EQ(Half(std::ldexp(1.0f, -14)).bits, 0x0400);   // smallest normal
  EXPECT_EQ(Half(-0.0f).bits, 0x8000);
  EXPECT_EQ(Half(std::numeric_limits<float>::infinity()).bits, 0x7c00);
  EXPECT_EQ(Half(-std::numeric_limits<float>::infinity()).bits, 0xfc00);
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(std::nanf("")))));
  EXPECT_EQ(static_cast<float>(Half::from_bits(0x3555)), 0.333251953125f);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1).
  EXPECT_EQ(Half(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);
  EXPECT_EQ(Half(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3c02);
}

#if defined(__FLT16_MAX__)
// GCC's _Float16 conversion (F16C or soft-float, compiled by the compiler, not by us) is an
// independent oracle for f32 -> f16 rounding. Every 97th f32 bit pattern plus all patterns
// around the f16 normal/subnormal/overflow boundaries.
TEST(Half, MatchesCompilerFloat16OnF32Patterns) {
  auto check = [](uint32_t u) {
    const float f = from_bits(u);
    const Half ours(f);
    const _Float16 ref = static_cast<_Float16>(f);
    uint16_t rb;
    std::memcpy(&rb, &ref, 2);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(static_cast<float>(ours))) << std::hex << u;
      return;
    }
    ASSERT_EQ(ours.bits, rb) << "f32 bits 0x" << std::hex << u << " (" << f << ")";
  };
  for (uint64_t u = 0; u <= 0xffffffffull; u += 97) check(static_cast<uint32_t>(u));
  for (uint32_t base : {0x33000000u, 0x38800000u, 0x477fe000u, 0x477ff000u, 0x387fe000u}) {
    for (uint32_t d = 0; d < 0x4000; ++d) {
      check(base - 0x2000 + d);
      check((base - 0x2000 + d) | 0x80000000u);
    }
  }
}
#endif

TEST(BFloat16, MatchesIndependentRoundingOnF32Patterns) {
  for (uint64_t u = 0; u <= 0xffffffffull; u += 101) {
    const float f = from_bits(static_cast<uint32_t>(u));
    const BFloat16 ours(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(static_cast<float>(ours)));
      continue;
    }
    ASSERT_EQ(ours.bits, bf16_reference(f)) << "f32 bits 0x" << std::hex << u;
  }
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(BFloat16(from_bits(0x3f808000u)).bits, 0x3f80);  // tie, even stays
  EXPECT_EQ(BFloat16(from_bits(0x3f818000u)).bits, 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::max()).bits, 0x7f80);  // overflows to inf
}

TEST(DType, TensorCastsConvertValues) {
  Tensor x = from_vector<float>({1.5f, -2.25f, 65520.f, 3.0f}, {4});
  EXPECT_EQ(x.to(kF16).to_vector<float>(), (std::vector<float>{1.5f, -2.25f, INFINITY, 3.0f}));
  EXPECT_EQ(x.to(kI32).to_vector<int32_t>(), (std::vector<int32_t>{1, -2, 65520, 3}));
  EXPECT_EQ(x.to(kBool).to_vector<int>(), (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(from_vector<float>({0.f, 2.f}).to(kBool).to_vector<int>(), (std::vector<int>{0, 1}));
  Tensor y = from_vector<double>({0.1, 1e-10}, {2});
  EXPECT_EQ(y.to(kBF16).to(kF64).to_vector<double>()[0], static_cast<double>(static_cast<float>(BFloat16(0.1f))));
}
