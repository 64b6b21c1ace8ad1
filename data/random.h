// A sequential random stream for data preparation, on the Philox counter-based generator
// (core/rng.h). Each (seed, stream) pair is an independent stream, so work split by document
// or by example draws the same numbers whatever the number of threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/rng.h"

namespace trident::data {

class PhiloxRandom {
 public:
  // Philox-4x32-10 keyed by `seed`, counter words 2-3 holding `stream`, words 0-1 counting blocks.
  PhiloxRandom(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}
  // A stream of its own for one example, drawn from a loader's generator: one block of `gen`
  // gives the seed and stream (so gen advances by one block whatever is drawn later).
  static PhiloxRandom from_generator(Generator& gen) {
    const PhiloxState st = gen.reserve(1);
    uint32_t o[4];
    philox::block(st.seed, st.offset, 0, o);
    return PhiloxRandom((uint64_t{o[1]} << 32) | o[0], (uint64_t{o[3]} << 32) | o[2]);
  }

  uint32_t next_u32() {
    if (lane_ == 4) {
      const uint32_t ctr[4] = {static_cast<uint32_t>(block_), static_cast<uint32_t>(block_ >> 32), static_cast<uint32_t>(stream_),
                               static_cast<uint32_t>(stream_ >> 32)};
      const uint32_t key[2] = {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)};
      philox::philox4x32_10(ctr, key, out_);
      ++block_;
      lane_ = 0;
    }
    return out_[lane_++];
  }
  // Uniform in [0, 1) with 53 bits.
  double uniform() {
    const uint32_t a = next_u32(), b = next_u32();
    return philox::uniform_f64(a, b);
  }
  // Uniform integer in [lo, hi] (both included, like Python's random.randint), unbiased
  // (Lemire's multiply-and-reject).
  int64_t uniform_int(int64_t lo, int64_t hi) {
    const uint64_t range = static_cast<uint64_t>(hi - lo) + 1;
    if (range == 0) return lo + static_cast<int64_t>((uint64_t{next_u32()} << 32) | next_u32());  // the whole int64 range
    if (range <= UINT32_MAX) {
      const auto r = static_cast<uint32_t>(range);
      uint64_t m = uint64_t{next_u32()} * r;
      if (static_cast<uint32_t>(m) < r) {
        const uint32_t threshold = static_cast<uint32_t>(-r) % r;
        while (static_cast<uint32_t>(m) < threshold) m = uint64_t{next_u32()} * r;
      }
      return lo + static_cast<int64_t>(m >> 32);
    }
    uint64_t x;
    const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
    do x = (uint64_t{next_u32()} << 32) | next_u32();
    while (x >= limit);
    return lo + static_cast<int64_t>(x % range);
  }
  // Fisher-Yates.
  template <typename T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[static_cast<size_t>(uniform_int(0, static_cast<int64_t>(i) - 1))]);
  }

 private:
  uint64_t seed_, stream_;
  uint64_t block_ = 0;
  uint32_t out_[4] = {};
  int lane_ = 4;
};

}  // namespace trident::data
