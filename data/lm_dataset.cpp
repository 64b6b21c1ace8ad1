#include "data/lm_dataset.h"

#include <algorithm>

#include "core/factory.h"

namespace trident::data {

LmDataset::LmDataset(const std::vector<std::string>& shard_paths, int64_t seq_len) : seq_len_(seq_len) {
  TRIDENT_CHECK(seq_len >= 1, "LmDataset: seq_len must be at least 1, got ", seq_len);
  TRIDENT_CHECK(!shard_paths.empty(), "LmDataset: no shards");
  for (const std::string& p : shard_paths) {
    auto shard = std::make_shared<TokenShard>(p);
    first_window_.push_back(total_);
    total_ += shard->size() > seq_len ? (shard->size() - 1) / seq_len : 0;
    shards_.push_back(std::move(shard));
  }
  first_window_.push_back(total_);
}

int64_t LmDataset::num_tokens() const {
  int64_t n = 0;
  for (const auto& s : shards_) n += s->size();
  return n;
}

Example LmDataset::get(int64_t index, Generator& /*gen*/) const {
  TRIDENT_CHECK(index >= 0 && index < total_, "LmDataset: index ", index, " is outside [0, ", total_, ")");
  // The last shard whose first window is <= index (shards without windows are skipped over).
  const auto it = std::upper_bound(first_window_.begin(), first_window_.end() - 1, index) - 1;
  const auto s = static_cast<size_t>(it - first_window_.begin());
  const uint16_t* src = shards_[s]->data() + (index - *it) * seq_len_;
  Tensor input = empty({seq_len_}, DType::I64), target = empty({seq_len_}, DType::I64);
  int64_t* in = input.data<int64_t>();
  int64_t* tg = target.data<int64_t>();
  for (int64_t t = 0; t < seq_len_; ++t) {
    in[t] = src[t];
    tg[t] = src[t + 1];
  }
  return {input, target};
}

}  // namespace trident::data
