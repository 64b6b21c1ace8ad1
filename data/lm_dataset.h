// Language-model windows over token shards (data/token_shard.h), for GPT-2 training.
//
// NOTE [LM windows]: a shard of N tokens holds W = (N - 1) / T windows (0 when N <= T), window w
// reading the T + 1 tokens at [w T, w T + T]: the input is the first T, the target the last T
// (the input shifted by one). Consecutive windows share one token (the last target of one is the
// first input of the next), as llm.c's loader reads B T + 1 tokens and advances by B T, so every
// token but a shard's first is a target exactly once. Windows never cross shards; the tail of
// a shard, the (N - 1) mod T tokens after the last window, is not used. Windows are numbered
// shard by shard in the order the shards are given: size() is the sum of the W.
//
// get() depends only on the index (the generator is not used): the sampler shuffles and
// splits the indices between data-parallel ranks, and the same index always gives the same
// window.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/token_shard.h"

namespace trident::data {

class LmDataset : public Dataset {
 public:
  // seq_len = T >= 1. Errors name the shard (data/token_shard.h).
  LmDataset(const std::vector<std::string>& shard_paths, int64_t seq_len);

  int64_t size() const override { return total_; }
  // {input [T] i64, target [T] i64}.
  Example get(int64_t index, Generator& gen) const override;

  int64_t seq_len() const { return seq_len_; }
  // Tokens in all shards, used or not.
  int64_t num_tokens() const;
  const std::vector<std::shared_ptr<TokenShard>>& shards() const { return shards_; }

 private:
  int64_t seq_len_;
  std::vector<std::shared_ptr<TokenShard>> shards_;
  std::vector<int64_t> first_window_;  // per shard, the index of its first window; then total
  int64_t total_ = 0;
};

}  // namespace trident::data
