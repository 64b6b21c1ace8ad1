#include "data/bert_examples.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/factory.h"
#include "data/text_corpus.h"

namespace trident::data {

int BertExampleOptions::max_predictions_resolved() const {
  return max_predictions >= 0 ? max_predictions : static_cast<int>(std::ceil(mask_prob * max_seq_len - 1e-9));
}

namespace {

void check_options(const BertExampleOptions& o) {
  TRIDENT_CHECK(o.max_seq_len >= 8 && o.max_seq_len <= 65535, "BERT examples: max_seq_len must be in [8, 65535], got ", o.max_seq_len);
  TRIDENT_CHECK(o.mask_prob >= 0 && o.mask_prob <= 1, "BERT examples: mask_prob must be in [0, 1], got ", o.mask_prob);
  TRIDENT_CHECK(o.short_seq_prob >= 0 && o.short_seq_prob <= 1, "BERT examples: short_seq_prob must be in [0, 1], got ", o.short_seq_prob);
  TRIDENT_CHECK(o.random_next_prob >= 0 && o.random_next_prob <= 1, "BERT examples: random_next_prob must be in [0, 1], got ",
                o.random_next_prob);
  TRIDENT_CHECK(o.dupe_factor >= 1, "BERT examples: dupe_factor must be at least 1, got ", o.dupe_factor);
}

// BERT's truncate_seq_pair: drop from the longer segment, at its front or back with even odds.
void truncate_pair(std::vector<int32_t>& a, std::vector<int32_t>& b, size_t max_tokens, PhiloxRandom& rng) {
  while (a.size() + b.size() > max_tokens) {
    std::vector<int32_t>& t = a.size() > b.size() ? a : b;
    if (rng.uniform() < 0.5)
      t.erase(t.begin());
    else
      t.pop_back();
  }
}

bool is_special(int32_t t, const BertSpecialIds& ids) {
  return t == ids.pad || t == ids.unk || t == ids.cls || t == ids.sep || t == ids.mask;
}

}  // namespace

std::vector<BertInstance> create_bert_pairs(const std::vector<BertDocument>& docs, size_t doc, const BertSpecialIds& ids,
                                            const BertExampleOptions& options, PhiloxRandom& rng, BertPairStats* stats) {
  check_options(options);
  TRIDENT_CHECK(doc < docs.size(), "create_bert_pairs: document ", doc, " of ", docs.size());
  const BertDocument& document = docs[doc];
  const auto max_tokens = static_cast<size_t>(options.max_seq_len - 3);
  size_t target = max_tokens;
  if (rng.uniform() < options.short_seq_prob) target = static_cast<size_t>(rng.uniform_int(2, static_cast<int64_t>(max_tokens)));

  std::vector<BertInstance> out;
  std::vector<size_t> chunk;  // sentence indices
  size_t chunk_len = 0;
  for (size_t i = 0; i < document.size(); ++i) {
    TRIDENT_CHECK(!document[i].empty(), "create_bert_pairs: sentence ", i, " of document ", doc, " is empty");
    chunk.push_back(i);
    chunk_len += document[i].size();
    if (i + 1 != document.size() && chunk_len < target) continue;

    const size_t a_end = chunk.size() >= 2 ? static_cast<size_t>(rng.uniform_int(1, static_cast<int64_t>(chunk.size()) - 1)) : 1;
    std::vector<int32_t> a, b;
    for (size_t j = 0; j < a_end; ++j) a.insert(a.end(), document[chunk[j]].begin(), document[chunk[j]].end());
    bool random_next;
    if (chunk.size() == 1) {
      random_next = true;
      if (stats) ++stats->forced_random;
    } else {
      random_next = rng.uniform() < options.random_next_prob;
      if (stats) ++(random_next ? stats->chosen_random : stats->chosen_next);
    }
    if (random_next) {
      const size_t target_b = target > a.size() ? target - a.size() : 1;
      size_t other = doc;
      for (int tries = 0; tries < 10 && other == doc; ++tries) other = static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(docs.size()) - 1));
      const BertDocument& rd = docs[other];
      TRIDENT_CHECK(!rd.empty(), "create_bert_pairs: document ", other, " is empty");
      for (size_t j = static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(rd.size()) - 1)); j < rd.size(); ++j) {
        b.insert(b.end(), rd[j].begin(), rd[j].end());
        if (b.size() >= target_b) break;
      }
      i -= chunk.size() - a_end;  // the unused sentences are read again
    } else {
      for (size_t j = a_end; j < chunk.size(); ++j) b.insert(b.end(), document[chunk[j]].begin(), document[chunk[j]].end());
    }
    truncate_pair(a, b, max_tokens, rng);
    TRIDENT_ASSERT(!a.empty() && !b.empty(), "BERT pair with an empty segment");

    BertInstance inst;
    inst.tokens.reserve(a.size() + b.size() + 3);
    inst.tokens.push_back(ids.cls);
    inst.tokens.insert(inst.tokens.end(), a.begin(), a.end());
    inst.tokens.push_back(ids.sep);
    inst.b_start = static_cast<int32_t>(inst.tokens.size());
    inst.tokens.insert(inst.tokens.end(), b.begin(), b.end());
    inst.tokens.push_back(ids.sep);
    inst.random_next = random_next;
    out.push_back(std::move(inst));
    chunk.clear();
    chunk_len = 0;
  }
  return out;
}

void mask_bert_tokens(BertInstance& inst, const BertSpecialIds& ids, const BertExampleOptions& options, PhiloxRandom& rng) {
  std::vector<int32_t> candidates;
  for (size_t i = 0; i < inst.tokens.size(); ++i)
    if (inst.tokens[i] != ids.cls && inst.tokens[i] != ids.sep && inst.tokens[i] != ids.pad) candidates.push_back(static_cast<int32_t>(i));
  inst.labels.assign(inst.tokens.size(), -100);
  if (candidates.empty()) return;
  rng.shuffle(candidates);
  const auto want = static_cast<size_t>(std::llround(static_cast<double>(candidates.size()) * options.mask_prob));
  const size_t n = std::min({candidates.size(), static_cast<size_t>(options.max_predictions_resolved()), std::max<size_t>(1, want)});
  for (size_t k = 0; k < n; ++k) {
    const auto pos = static_cast<size_t>(candidates[k]);
    inst.labels[pos] = inst.tokens[pos];
    if (rng.uniform() < 0.8) {
      inst.tokens[pos] = ids.mask;
    } else if (rng.uniform() < 0.5) {
      // kept as it is
    } else {
      int32_t t;
      do t = static_cast<int32_t>(rng.uniform_int(0, ids.vocab_size - 1));
      while (is_special(t, ids));
      inst.tokens[pos] = t;
    }
  }
}

std::vector<BertInstance> create_bert_instances(std::vector<BertDocument> docs, const BertSpecialIds& ids, const BertExampleOptions& options,
                                                int threads, BertPairStats* stats) {
  check_options(options);
  for (auto& d : docs) d.erase(std::remove_if(d.begin(), d.end(), [](const auto& s) { return s.empty(); }), d.end());
  docs.erase(std::remove_if(docs.begin(), docs.end(), [](const auto& d) { return d.empty(); }), docs.end());
  if (docs.empty()) return {};
  const size_t jobs = docs.size() * static_cast<size_t>(options.dupe_factor);
  std::vector<std::vector<BertInstance>> per_job(jobs);
  std::vector<BertPairStats> per_job_stats(jobs);
  parallel_items(jobs, threads, [&](size_t j) {
    const size_t dupe = j / docs.size(), d = j % docs.size();
    PhiloxRandom rng(options.seed, (uint64_t{dupe} << 32) | d);
    per_job[j] = create_bert_pairs(docs, d, ids, options, rng, &per_job_stats[j]);
    for (auto& inst : per_job[j]) mask_bert_tokens(inst, ids, options, rng);
  });
  std::vector<BertInstance> out;
  for (size_t j = 0; j < jobs; ++j) {
    if (stats) {
      stats->forced_random += per_job_stats[j].forced_random;
      stats->chosen_random += per_job_stats[j].chosen_random;
      stats->chosen_next += per_job_stats[j].chosen_next;
    }
    for (auto& inst : per_job[j]) out.push_back(std::move(inst));
  }
  return out;
}

// ---- shards ----

void write_bert_shard(const std::string& path, std::span<const BertInstance> instances, int max_seq_len, const BertSpecialIds& ids) {
  const int32_t vocab_size = ids.vocab_size;
  TRIDENT_CHECK(max_seq_len >= 8 && max_seq_len <= 65535, "BERT shard '", path, "': max_seq_len ", max_seq_len, " outside [8, 65535]");
  TRIDENT_CHECK(vocab_size > 0 && vocab_size <= 65535, "BERT shard '", path, "': vocabulary size ", vocab_size, " does not fit uint16");
  TRIDENT_CHECK(instances.size() <= static_cast<size_t>(INT32_MAX), "BERT shard '", path, "': too many examples");
  AtomicFile f(path, "BERT shard");
  int32_t header[256] = {};
  header[0] = kBertShardMagic;
  header[1] = kBertShardVersion;
  header[2] = static_cast<int32_t>(instances.size());
  header[3] = max_seq_len;
  header[4] = vocab_size;
  header[5] = 4 * max_seq_len + 8;
  header[6] = ids.pad;
  header[7] = ids.unk;
  header[8] = ids.cls;
  header[9] = ids.sep;
  header[10] = ids.mask;
  f.write(header, sizeof(header));
  const auto L = static_cast<size_t>(max_seq_len);
  std::vector<uint16_t> rec(2 * L + 4);
  for (size_t e = 0; e < instances.size(); ++e) {
    const BertInstance& inst = instances[e];
    TRIDENT_CHECK(inst.tokens.size() <= L && inst.labels.size() == inst.tokens.size(), "BERT shard '", path, "': example ", e, " has ",
                  inst.tokens.size(), " tokens and ", inst.labels.size(), " labels; at most ", L, " tokens, one label each");
    std::fill(rec.begin(), rec.end(), uint16_t{0});
    for (size_t i = 0; i < L; ++i) {
      if (i < inst.tokens.size()) {
        TRIDENT_CHECK(inst.tokens[i] >= 0 && inst.tokens[i] < vocab_size && (inst.labels[i] == -100 || (inst.labels[i] >= 0 && inst.labels[i] < vocab_size)),
                      "BERT shard '", path, "': example ", e, " position ", i, ": token ", inst.tokens[i], " or label ", inst.labels[i],
                      " outside the vocabulary of ", vocab_size);
        rec[i] = static_cast<uint16_t>(inst.tokens[i]);
        rec[L + i] = inst.labels[i] < 0 ? uint16_t{65535} : static_cast<uint16_t>(inst.labels[i]);
      } else {
        rec[i] = static_cast<uint16_t>(ids.pad);
        rec[L + i] = 65535;
      }
    }
    rec[2 * L] = static_cast<uint16_t>(inst.tokens.size());
    rec[2 * L + 1] = static_cast<uint16_t>(inst.b_start);
    rec[2 * L + 2] = inst.random_next ? 1 : 0;
    f.write(rec.data(), rec.size() * sizeof(uint16_t));
  }
  f.commit();
}

BertShard::BertShard(const std::string& path) : file_(std::make_shared<MappedFile>(path, "BERT shard")) {
  const uint64_t bytes = file_->size();
  TRIDENT_CHECK(bytes >= 1024, "BERT shard '", path, "': ", bytes, " bytes, shorter than the 1024-byte header");
  int32_t h[256];
  std::memcpy(h, file_->data(), sizeof(h));
  TRIDENT_CHECK(h[0] == kBertShardMagic, "BERT shard '", path, "': magic number ", h[0], ", expected ", kBertShardMagic,
                h[0] == 20240520 ? " (this is a GPT-2 token shard)" : "");
  TRIDENT_CHECK(h[1] == kBertShardVersion, "BERT shard '", path, "': version ", h[1], ", expected ", kBertShardVersion);
  TRIDENT_CHECK(h[2] >= 0, "BERT shard '", path, "': negative example count ", h[2]);
  TRIDENT_CHECK(h[3] >= 8 && h[3] <= 65535 && h[5] == 4 * h[3] + 8, "BERT shard '", path, "': max_seq_len ", h[3], " and record size ", h[5],
                " disagree (expected 4 L + 8)");
  TRIDENT_CHECK(h[4] > 0 && h[4] <= 65535, "BERT shard '", path, "': vocabulary size ", h[4]);
  for (int k = 6; k <= 10; ++k)
    TRIDENT_CHECK(h[k] >= 0 && h[k] < h[4], "BERT shard '", path, "': special id ", h[k], " (header word ", k, ") outside the vocabulary of ", h[4]);
  const uint64_t want = static_cast<uint64_t>(h[2]) * static_cast<uint64_t>(h[5]);
  TRIDENT_CHECK(bytes - 1024 >= want, "BERT shard '", path, "': truncated: the header says ", h[2], " examples (", want,
                " bytes) but only ", bytes - 1024, " bytes follow it");
  TRIDENT_CHECK(bytes - 1024 == want, "BERT shard '", path, "': the header's count, ", h[2], " examples (", want,
                " bytes), disagrees with the file size: ", bytes - 1024, " bytes follow the header");
  count_ = h[2];
  max_seq_len_ = h[3];
  ids_ = BertSpecialIds{h[6], h[7], h[8], h[9], h[10], h[4]};
  base_ = reinterpret_cast<const uint16_t*>(file_->data() + 1024);
}

BertExampleDataset::BertExampleDataset(const std::vector<std::string>& shard_paths, bool remask, BertExampleOptions mask_options)
    : remask_(remask), options_(mask_options) {
  TRIDENT_CHECK(!shard_paths.empty(), "BertExampleDataset: no shards");
  for (const std::string& p : shard_paths) {
    auto s = std::make_shared<BertShard>(p);
    if (shards_.empty()) max_seq_len_ = s->max_seq_len();
    TRIDENT_CHECK(s->max_seq_len() == max_seq_len_, "BertExampleDataset: '", p, "' has max_seq_len ", s->max_seq_len(), " but '",
                  shards_.front()->path(), "' has ", max_seq_len_);
    const BertSpecialIds& a = s->ids();
    const BertSpecialIds& b = shards_.empty() ? a : shards_.front()->ids();
    TRIDENT_CHECK(a.pad == b.pad && a.unk == b.unk && a.cls == b.cls && a.sep == b.sep && a.mask == b.mask && a.vocab_size == b.vocab_size,
                  "BertExampleDataset: '", p, "' and '", shards_.front()->path(), "' were made with different vocabularies");
    first_.push_back(total_);
    total_ += s->size();
    shards_.push_back(std::move(s));
  }
  first_.push_back(total_);
  options_.max_seq_len = max_seq_len_;
}

Example BertExampleDataset::get(int64_t index, Generator& gen) const {
  TRIDENT_CHECK(index >= 0 && index < total_, "BertExampleDataset: index ", index, " is outside [0, ", total_, ")");
  const auto it = std::upper_bound(first_.begin(), first_.end() - 1, index) - 1;
  const BertShard& s = *shards_[static_cast<size_t>(it - first_.begin())];
  const int64_t r = index - *it;
  const int64_t L = max_seq_len_;
  const int len = s.length(r), b_start = s.b_start(r);
  TRIDENT_CHECK(len <= L && b_start < len, "BERT shard '", s.path(), "': example ", r, " has length ", len, " and segment B at ", b_start);
  const BertSpecialIds& ids = s.ids();
  const uint16_t* in = s.input_ids(r);
  const uint16_t* lab = s.labels(r);

  Tensor input_ids = empty({L}, DType::I64), types = empty({L}, DType::I64), attention = empty({L}, DType::I64),
         labels = empty({L}, DType::I64);
  int64_t* pi = input_ids.data<int64_t>();
  int64_t* pt = types.data<int64_t>();
  int64_t* pa = attention.data<int64_t>();
  int64_t* pl = labels.data<int64_t>();
  if (!remask_) {
    for (int64_t i = 0; i < L; ++i) {
      pi[i] = i < len ? in[i] : ids.pad;
      pl[i] = lab[i] == 65535 ? -100 : lab[i];
    }
  } else {
    BertInstance inst;
    inst.tokens.resize(static_cast<size_t>(len));
    for (int i = 0; i < len; ++i) inst.tokens[static_cast<size_t>(i)] = lab[i] == 65535 ? in[i] : lab[i];
    PhiloxRandom rng = PhiloxRandom::from_generator(gen);
    mask_bert_tokens(inst, ids, options_, rng);
    for (int64_t i = 0; i < L; ++i) {
      pi[i] = i < len ? inst.tokens[static_cast<size_t>(i)] : ids.pad;
      pl[i] = i < len ? inst.labels[static_cast<size_t>(i)] : -100;
    }
  }
  for (int64_t i = 0; i < L; ++i) {
    pt[i] = i >= b_start && i < len ? 1 : 0;
    pa[i] = i < len ? 1 : 0;
  }
  return {input_ids, types, attention, labels, scalar_tensor(s.next_label(r), DType::I64)};
}

}  // namespace trident::data
