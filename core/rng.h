// Counter-based random numbers: Philox-4x32-10 (Salmon et al., "Parallel random numbers: as
// easy as 1, 2, 3", SC 2011).
//
// NOTE [Philox streams]: a draw of n values from a generator in state (seed, offset) gives
// element i the output of Philox with key = seed and counter = offset + i / lanes (lanes = 4
// values per 128-bit block for 32-bit outputs, 2 for 64-bit ones), then advances the offset past
// the blocks used. Element i depends only on (seed, offset, i): the CPU and CUDA kernels
// produce the same numbers, threads need no coordination, and saving (seed, offset) before a
// draw is enough to replay it exactly (dropout under re-materialization, resumed training).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <mutex>

#include "core/macros.h"

namespace trident {

struct PhiloxState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // in 128-bit counter blocks
  bool operator==(const PhiloxState&) const = default;
};

namespace philox {

TRIDENT_INLINE void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// One 128-bit block: Philox-4x32 with 10 rounds.
TRIDENT_INLINE void philox4x32_10(const uint32_t ctr_in[4], const uint32_t key_in[2], uint32_t out[4]) {
  uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
  uint32_t k0 = key_in[0], k1 = key_in[1];
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, c0, hi0, lo0);
    mulhilo(0xCD9E8D57u, c2, hi1, lo1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

// The block at counter `offset + block` of the stream keyed by `seed`.
TRIDENT_INLINE void block(uint64_t seed, uint64_t offset, uint64_t blk, uint32_t out[4]) {
  const uint64_t c = offset + blk;
  const uint32_t ctr[4] = {static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0u, 0u};
  const uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  philox4x32_10(ctr, key, out);
}

// [0, 1) with 24 random bits (exactly representable in f32).
TRIDENT_INLINE float uniform_f32(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }
// [0, 1) with 53 random bits.
TRIDENT_INLINE double uniform_f64(uint32_t a, uint32_t b) {
  const uint64_t v = (static_cast<uint64_t>(a) << 21) ^ (static_cast<uint64_t>(b) >> 11);
  return static_cast<double>(v & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// The values of one counter block: elements blk L .. blk L + L - 1 of a draw (NOTE [Philox
// streams]; L = 4 for f32, 2 for f64), each block computed once for its L values.
TRIDENT_INLINE void uniform_f32_block(uint64_t seed, uint64_t offset, uint64_t blk, float out[4]) {
  uint32_t o[4];
  block(seed, offset, blk, o);
  for (int l = 0; l < 4; ++l) out[l] = uniform_f32(o[l]);
}
TRIDENT_INLINE void uniform_f64_block(uint64_t seed, uint64_t offset, uint64_t blk, double out[2]) {
  uint32_t o[4];
  block(seed, offset, blk, o);
  out[0] = uniform_f64(o[0], o[1]);
  out[1] = uniform_f64(o[2], o[3]);
}
// Standard normal by Box-Muller: elements 2j and 2j+1 share a pair of uniforms (cos, sin).
TRIDENT_INLINE void normal_f32_block(uint64_t seed, uint64_t offset, uint64_t blk, float out[4]) {
  uint32_t o[4];
  block(seed, offset, blk, o);
  for (int pair = 0; pair < 2; ++pair) {
    const float u1 = 1.0f - uniform_f32(o[2 * pair]);  // (0, 1]: log is finite
    const float u2 = uniform_f32(o[2 * pair + 1]);
    const float r = sqrtf(-2.0f * logf(u1));
    const float th = 6.283185307179586f * u2;
    out[2 * pair] = r * cosf(th);
    out[2 * pair + 1] = r * sinf(th);
  }
}
TRIDENT_INLINE void normal_f64_block(uint64_t seed, uint64_t offset, uint64_t blk, double out[2]) {
  uint32_t o[4];
  block(seed, offset, blk, o);
  const double u1 = 1.0 - uniform_f64(o[0], o[1]);
  const double u2 = uniform_f64(o[2], o[3]);
  // Global ::sqrt, ::log, ...: trident::sqrt(const Tensor&) and friends would hide them.
  const double r = ::sqrt(-2.0 * ::log(u1));
  const double th = 6.283185307179586 * u2;
  out[0] = r * ::cos(th);
  out[1] = r * ::sin(th);
}

// Element i of a draw: lane i % L of block i / L (for a few elements; whole blocks above).
TRIDENT_INLINE float uniform_f32_at(uint64_t seed, uint64_t offset, uint64_t i) {
  float v[4];
  uniform_f32_block(seed, offset, i / 4, v);
  return v[i % 4];
}
TRIDENT_INLINE double uniform_f64_at(uint64_t seed, uint64_t offset, uint64_t i) {
  double v[2];
  uniform_f64_block(seed, offset, i / 2, v);
  return v[i % 2];
}
TRIDENT_INLINE float normal_f32_at(uint64_t seed, uint64_t offset, uint64_t i) {
  float v[4];
  normal_f32_block(seed, offset, i / 4, v);
  return v[i % 4];
}
TRIDENT_INLINE double normal_f64_at(uint64_t seed, uint64_t offset, uint64_t i) {
  double v[2];
  normal_f64_block(seed, offset, i / 2, v);
  return v[i % 2];
}

// Blocks a draw of n values uses (the generator advances by this much).
inline uint64_t blocks_for(uint64_t n, bool wide) { return wide ? (n + 1) / 2 : (n + 3) / 4; }

}  // namespace philox

// A seeded Philox stream whose state (seed, offset) can be saved and restored.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : state_{seed, 0} {}
  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  PhiloxState state() const;
  void set_state(const PhiloxState& s);
  // Reserves `blocks` counter blocks for a draw and returns the state the draw must use.
  PhiloxState reserve(uint64_t blocks);

 private:
  mutable std::mutex mu_;
  PhiloxState state_;
};

// The process-wide generator used when an op is not given one (seed 0 until manual_seed).
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace trident
