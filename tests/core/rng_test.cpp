#include <gtest/gtest.h>

#include <cmath>

#include "trident.h"

using namespace trident;

// Known-answer vectors published with Random123 (kat_vectors, philox4x32_10).
TEST(Philox, MatchesRandom123KnownAnswers) {
  struct Kat {
    uint32_t ctr[4], key[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    uint32_t out[4];
    philox::philox4x32_10(k.ctr, k.key, out);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], k.out[i]) << "lane " << i;
  }
}

TEST(Generator, SameSeedSameNumbers) {
  Generator a(42), b(42), c(43);
  const auto x = rand({100}, kF32, &a).to_vector<float>();
  const auto y = rand({100}, kF32, &b).to_vector<float>();
  const auto z = rand({100}, kF32, &c).to_vector<float>();
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
  // The stream moves on: the next draw differs from the first.
  EXPECT_NE(rand({100}, kF32, &a).to_vector<float>(), x);
}

TEST(Generator, StateSaveAndRestoreReplaysADraw) {
  Generator g(7);
  rand({13}, kF32, &g);  // advance to an odd position
  const PhiloxState saved = g.state();
  const auto first = randn({33}, kF64, &g).to_vector<double>();
  const auto next = rand({5}, kF32, &g).to_vector<float>();
  g.set_state(saved);
  EXPECT_EQ(randn({33}, kF64, &g).to_vector<double>(), first);
  EXPECT_EQ(rand({5}, kF32, &g).to_vector<float>(), next);
  g.manual_seed(7);
  EXPECT_EQ(g.state(), (PhiloxState{7, 0}));
}

TEST(Generator, ElementsDependOnlyOnSeedOffsetAndIndex) {
  // A draw of 10 is a prefix of a draw of 1000 from the same state (NOTE [Philox streams]).
  Generator a(9), b(9);
  const auto small = rand({10}, kF32, &a).to_vector<float>();
  const auto large = rand({1000}, kF32, &b).to_vector<float>();
  for (size_t i = 0; i < small.size(); ++i) EXPECT_EQ(small[i], large[i]);
  // Every dtype draws the same f32 numbers.
  Generator c(9);
  const auto half = rand({10}, kF16, &c).to_vector<float>();
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(half[i], static_cast<float>(Half(small[i])));
}

TEST(Generator, UniformAndNormalMoments) {
  Generator g(123);
  const auto u = rand({200000}, kF64, &g).to_vector<double>();
  double s = 0, s2 = 0, lo = 1, hi = 0;
  for (double v : u) {
    s += v;
    s2 += v * v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  const double n = static_cast<double>(u.size());
  EXPECT_NEAR(s / n, 0.5, 0.005);               // sd of the mean: 0.29/sqrt(2e5) = 6.5e-4
  EXPECT_NEAR(s2 / n - (s / n) * (s / n), 1.0 / 12, 0.002);
  EXPECT_GE(lo, 0.0);
  EXPECT_LT(hi, 1.0);
  for (DType dt : {kF32, kF64}) {
    const auto z = randn({200000}, dt, &g).to_vector<double>();
    double m = 0, m2 = 0, m3 = 0;
    for (double v : z) {
      m += v;
      m2 += v * v;
      m3 += v * v * v;
    }
    EXPECT_NEAR(m / n, 0.0, 0.01) << dt;
    EXPECT_NEAR(m2 / n, 1.0, 0.015) << dt;
    EXPECT_NEAR(m3 / n, 0.0, 0.03) << dt;
  }
}

TEST(Generator, RandintIsInRangeAndCoversIt) {
  Generator g(5);
  const auto v = randint(-3, 4, {10000}, kI64, &g).to_vector<int64_t>();
  std::vector<int> counts(7, 0);
  for (int64_t x : v) {
    ASSERT_GE(x, -3);
    ASSERT_LT(x, 4);
    ++counts[static_cast<size_t>(x + 3)];
  }
  for (int c : counts) EXPECT_GT(c, 1200);  // expected 1428 each
  EXPECT_THROW(randint(3, 3, {2}), Error);
}

TEST(Generator, DefaultGeneratorIsSeeded) {
  manual_seed(11);
  const auto a = rand({8}).to_vector<float>();
  manual_seed(11);
  EXPECT_EQ(rand({8}).to_vector<float>(), a);
}

// randn_ and rand_ fill a tensor in place with what randn and rand return and leave the generator
// where they do; skip_random leaves it there too, drawing nothing (NOTE [Skipped draws]); both refuse
// what they cannot serve.
TEST(Generator, InPlaceAndSkippedDrawsMatchRandn) {
  for (const DType dt : {DType::F32, DType::F64}) {
    Generator a(21), b(21), c(21);
    const Tensor want = randn({5, 7}, dt, &a), want_u = rand({3}, dt, &a);
    const Tensor got = empty({5, 7}, dt), got_u = empty({3}, dt);
    randn_(got, &b);
    rand_(got_u, &b);
    EXPECT_EQ(got.to_vector<double>(), want.to_vector<double>());
    EXPECT_EQ(got_u.to_vector<double>(), want_u.to_vector<double>());
    skip_random(35, dt, &c);
    skip_random(3, dt, &c);
    EXPECT_EQ(b.state(), a.state());
    EXPECT_EQ(c.state(), a.state());
  }
  Generator g(1);
  EXPECT_THROW(randn_(transpose(empty({3, 4}), 0, 1), &g), Error);
  EXPECT_THROW(randn_(empty({3}, DType::I64), &g), Error);
  EXPECT_THROW(rand_(transpose(empty({3, 4}), 0, 1), &g), Error);
  EXPECT_THROW(skip_random(3, DType::I32, &g), Error);
}

// rand and randn compute whole Philox blocks at once; every element is lane i % L of block i / L
// (core/rng.h's per-element functions) for sizes and offsets that start and end inside a block,
// and for chunks split over threads (which may cut a block).
TEST(Generator, BlockwiseFillsEqualThePerElementValues) {
  for (const int64_t n : {int64_t{1}, int64_t{3}, int64_t{5}, int64_t{4099}, int64_t{100003}}) {
    for (const uint64_t skip : {0, 1, 3}) {
      Generator g(77);
      skip_random(static_cast<int64_t>(4 * skip + 1), DType::F32, &g);  // an offset that is not 0
      const PhiloxState s32 = g.state();
      const std::vector<float> u = rand({n}, kF32, &g).to_vector<float>();
      const PhiloxState s32n = g.state();
      const std::vector<float> z = randn({n}, kF32, &g).to_vector<float>();
      const PhiloxState s64 = g.state();
      const std::vector<double> z64 = randn({n}, DType::F64, &g).to_vector<double>();
      const PhiloxState s64u = g.state();
      const std::vector<double> u64 = rand({n}, DType::F64, &g).to_vector<double>();
      for (int64_t i = 0; i < n; ++i) {
        const auto at = static_cast<uint64_t>(i);
        ASSERT_EQ(u[static_cast<size_t>(i)], philox::uniform_f32_at(s32.seed, s32.offset, at)) << n << " " << i;
        ASSERT_EQ(z[static_cast<size_t>(i)], philox::normal_f32_at(s32n.seed, s32n.offset, at)) << n << " " << i;
        ASSERT_EQ(z64[static_cast<size_t>(i)], philox::normal_f64_at(s64.seed, s64.offset, at)) << n << " " << i;
        ASSERT_EQ(u64[static_cast<size_t>(i)], philox::uniform_f64_at(s64u.seed, s64u.offset, at)) << n << " " << i;
      }
    }
  }
}
