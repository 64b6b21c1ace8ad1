// Samplers: the order in which an epoch visits a dataset's examples, and batching of that order.
//
// A sampler is a pure function of the epoch: indices(epoch) is the same list every time it is
// asked, so a loader can restart anywhere in an epoch (data/loader.h, LoaderPosition).
#pragma once

#include <cstdint>
#include <vector>

namespace trident::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // Indices per epoch.
  virtual int64_t size() const = 0;
  // The epoch's indices, in visiting order.
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
};

// 0, 1, ..., n - 1 every epoch.
class SequentialSampler final : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t n_;
};

// A uniformly random permutation of 0..n-1 from (seed, epoch): a different order each epoch,
// the same order whenever the same epoch is asked for again.
std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch);

class ShuffledSampler final : public Sampler {
 public:
  ShuffledSampler(int64_t n, uint64_t seed);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(int64_t epoch) const override { return permutation(n_, seed_, epoch); }

 private:
  int64_t n_;
  uint64_t seed_;
};

// PyTorch's DistributedSampler: every rank takes the same order (permutation(n, seed, epoch)
// when shuffling, 0..n-1 otherwise) and keeps positions rank, rank + world, rank + 2 world, ...
// Without drop_last the order is first padded to a multiple of the world size by repeating its
// beginning (wrapping as often as needed), so every rank gets ceil(n / world) indices and a few
// examples are seen twice; with drop_last its tail is cut to floor(n / world) per rank instead.
class DistributedSampler final : public Sampler {
 public:
  DistributedSampler(int64_t n, int64_t rank, int64_t world_size, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  int64_t size() const override { return per_rank_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t n_, rank_, world_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t per_rank_;
};

// The order cut into batches of batch_size; the last one shorter, or dropped under drop_last.
int64_t batch_count(int64_t n, int64_t batch_size, bool drop_last);
std::vector<std::vector<int64_t>> make_batches(const std::vector<int64_t>& order, int64_t batch_size, bool drop_last);

}  // namespace trident::data
