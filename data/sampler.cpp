#include "data/sampler.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace trident::data {

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  TRIDENT_CHECK(n >= 0, "SequentialSampler: negative size ", n);
}

std::vector<int64_t> SequentialSampler::indices(int64_t /*epoch*/) const {
  std::vector<int64_t> v(static_cast<size_t>(n_));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch) {
  TRIDENT_CHECK(n >= 0, "permutation: negative size ", n);
  TRIDENT_CHECK(epoch >= 0, "permutation: negative epoch ", epoch);
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  // Fisher-Yates with 64-bit Philox words. Epoch e reads the stream keyed by `seed` from counter
  // e * 2^40 on: epochs never share a block (a shuffle of n uses about n / 2 of them).
  const uint64_t base = static_cast<uint64_t>(epoch) << 40;
  uint64_t block = 0;
  int lane = 2;  // two 64-bit words per block
  uint32_t words[4];
  auto next64 = [&]() -> uint64_t {
    if (lane == 2) {
      philox::block(seed, base, block++, words);
      lane = 0;
    }
    const uint64_t r = (uint64_t{words[2 * lane]} << 32) | words[2 * lane + 1];
    ++lane;
    return r;
  };
  for (int64_t i = n - 1; i > 0; --i) {
    // Uniform j in [0, i] without modulo bias: Lemire's multiply-shift with rejection.
    const uint64_t range = static_cast<uint64_t>(i) + 1;
    const uint64_t threshold = (0 - range) % range;
    uint64_t j;
    for (;;) {
      const unsigned __int128 m = static_cast<unsigned __int128>(next64()) * range;
      if (static_cast<uint64_t>(m) >= threshold) {
        j = static_cast<uint64_t>(m >> 64);
        break;
      }
    }
    std::swap(v[static_cast<size_t>(i)], v[static_cast<size_t>(j)]);
  }
  return v;
}

ShuffledSampler::ShuffledSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  TRIDENT_CHECK(n >= 0, "ShuffledSampler: negative size ", n);
}

DistributedSampler::DistributedSampler(int64_t n, int64_t rank, int64_t world_size, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : n_(n), rank_(rank), world_(world_size), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  TRIDENT_CHECK(n >= 0, "DistributedSampler: negative size ", n);
  TRIDENT_CHECK(world_size >= 1, "DistributedSampler: world size must be at least 1, got ", world_size);
  TRIDENT_CHECK(rank >= 0 && rank < world_size, "DistributedSampler: rank ", rank, " is not in [0, ", world_size, ")");
  per_rank_ = drop_last ? n / world_size : (n + world_size - 1) / world_size;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> order;
  if (shuffle_) {
    order = permutation(n_, seed_, epoch);
  } else {
    order.resize(static_cast<size_t>(n_));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  const int64_t total = per_rank_ * world_;
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank_));
  // Position p of the padded order is order[p mod n]: the beginning repeated as often as needed.
  for (int64_t p = rank_; p < total; p += world_) mine.push_back(order[static_cast<size_t>(p % n_)]);
  return mine;
}

int64_t batch_count(int64_t n, int64_t batch_size, bool drop_last) {
  TRIDENT_CHECK(batch_size >= 1, "batch size must be at least 1, got ", batch_size);
  return drop_last ? n / batch_size : (n + batch_size - 1) / batch_size;
}

std::vector<std::vector<int64_t>> make_batches(const std::vector<int64_t>& order, int64_t batch_size, bool drop_last) {
  const int64_t n = static_cast<int64_t>(order.size());
  const int64_t count = batch_count(n, batch_size, drop_last);
  std::vector<std::vector<int64_t>> batches(static_cast<size_t>(count));
  for (int64_t b = 0; b < count; ++b) {
    const int64_t lo = b * batch_size, hi = std::min(n, lo + batch_size);
    batches[static_cast<size_t>(b)].assign(order.begin() + lo, order.begin() + hi);
  }
  return batches;
}

}  // namespace trident::data
