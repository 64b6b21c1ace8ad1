// BERT pre-training examples: sentence pairs for next-sentence prediction and masked tokens for
// the masked language model, as Google's create_pretraining_data.py makes them, written to
// shards and read back as a Dataset.
//
// NOTE [BERT pairs]: per document (a list of sentences, each a list of WordPiece ids), with
// max_tokens = max_seq_len - 3 and a target length of max_tokens (with probability
// short_seq_prob a uniform length in [2, max_tokens] instead, once per document), sentences are
// gathered into a chunk until it reaches the target length or the document ends. A random
// number of the chunk's leading sentences is segment A (at least one). With probability
// random_next_prob, or always when the chunk has one sentence, segment B is a run of sentences
// from a random *other* document, from a random start, up to the remaining length, and the
// chunk's unused sentences go back to be read again; otherwise B is the rest of the chunk. The
// pair is then cut to max_tokens by dropping a token from the front or the back (even odds) of
// the longer segment until it fits (BERT's truncate_seq_pair, longest first), and becomes
// [CLS] A [SEP] B [SEP], segment ids 0 up to the first [SEP] inclusive, 1 after.
//
// NOTE [BERT masking]: of the tokens other than [CLS] and [SEP] (the candidates), round(15%)
// (at least 1, at most max_predictions) are chosen uniformly without replacement; each becomes
// [MASK] with probability 80%, a random token with 10% (uniform over the vocabulary without
// [PAD] [UNK] [CLS] [SEP] [MASK]; Google draws over the whole vocabulary), and stays with 10%.
// Its label is the original id; every other position's label is -100.
// (Google takes 15% of all tokens, [CLS] and [SEP] included; here it is 15% of the candidates.)
//
// Determinism: document d in duplicate k draws from its own Philox stream (seed, k * 2^32 + d),
// so the examples depend only on the seed and the documents, not on the number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/file_util.h"
#include "data/random.h"

namespace trident::data {

// A document's sentences, each a list of token ids.
using BertDocument = std::vector<std::vector<int32_t>>;

struct BertSpecialIds {
  int32_t pad = 0, unk = 100, cls = 101, sep = 102, mask = 103;  // bert-base-uncased's
  int32_t vocab_size = 30522;
};

struct BertExampleOptions {
  int max_seq_len = 128;       // 128 or 512 in BERT's recipe; at least 8
  int max_predictions = -1;    // -1: ceil(mask_prob * max_seq_len) (20 for 128, 77 for 512)
  double mask_prob = 0.15;
  double short_seq_prob = 0.1;
  double random_next_prob = 0.5;
  int dupe_factor = 1;         // passes over the documents, each with fresh pairs and masks
  uint64_t seed = 12345;
  int max_predictions_resolved() const;
};

// One example: [CLS] A [SEP] B [SEP] with masking applied, before padding.
struct BertInstance {
  std::vector<int32_t> tokens;  // masked input ids
  std::vector<int32_t> labels;  // original id where masked, -100 elsewhere; same length
  int32_t b_start = 0;          // index of B's first token: segment ids are 1 from here on
  bool random_next = false;     // next-sentence label: B is from another document
};

// How the next-sentence decisions fell (NOTE [BERT pairs]).
struct BertPairStats {
  int64_t forced_random = 0;  // chunks of one sentence: B had to come from elsewhere
  int64_t chosen_random = 0;  // chunks of two or more, B drawn from another document
  int64_t chosen_next = 0;    // chunks of two or more, B the chunk's own continuation
};

// The pairs of document `doc` (NOTE [BERT pairs]), unmasked: tokens are [CLS] A [SEP] B [SEP],
// labels empty. `docs` must hold no empty document and no empty sentence.
std::vector<BertInstance> create_bert_pairs(const std::vector<BertDocument>& docs, size_t doc, const BertSpecialIds& ids,
                                            const BertExampleOptions& options, PhiloxRandom& rng, BertPairStats* stats = nullptr);

// Masks inst.tokens in place and fills inst.labels (NOTE [BERT masking]).
void mask_bert_tokens(BertInstance& inst, const BertSpecialIds& ids, const BertExampleOptions& options, PhiloxRandom& rng);

// Every document's pairs, masked, dupe_factor times over: duplicate by duplicate, document by
// document, on `threads` threads (0: all cores); empty sentences and documents are dropped first.
std::vector<BertInstance> create_bert_instances(std::vector<BertDocument> docs, const BertSpecialIds& ids,
                                                const BertExampleOptions& options, int threads = 0, BertPairStats* stats = nullptr);

// NOTE [BERT example shards]: llm.c's header layout with its own numbers: 256 little-endian
// int32, [0] magic 20240522, [1] version 1, [2] the number of examples E, [3] max_seq_len L,
// [4] the vocabulary size, [5] the record size 4 L + 8, [6..10] the ids of [PAD] [UNK] [CLS]
// [SEP] [MASK], the rest 0; then E records of
//   uint16 input_ids[L]  (masked, padded with [PAD])
//   uint16 labels[L]     (the original id where masked, 65535 where the label is -100)
//   uint16 length        (tokens before padding)
//   uint16 b_start       (first token of segment B)
//   uint16 next_label    (0: B follows A in the document, 1: B is random)
//   uint16 pad           (0)
// so example i is at 1024 + i (4 L + 8). Token ids must fit uint16 and differ from 65535.
inline constexpr int32_t kBertShardMagic = 20240522;
inline constexpr int32_t kBertShardVersion = 1;

void write_bert_shard(const std::string& path, std::span<const BertInstance> instances, int max_seq_len, const BertSpecialIds& ids);

// A BERT example shard, mapped read-only; errors name the file.
class BertShard {
 public:
  explicit BertShard(const std::string& path);
  int64_t size() const { return count_; }
  int max_seq_len() const { return max_seq_len_; }
  // The special ids and vocabulary size the examples were made with.
  const BertSpecialIds& ids() const { return ids_; }
  // Record i's fields (NOTE [BERT example shards]).
  const uint16_t* input_ids(int64_t i) const { return record(i); }
  const uint16_t* labels(int64_t i) const { return record(i) + max_seq_len_; }
  int length(int64_t i) const { return record(i)[2 * max_seq_len_]; }
  int b_start(int64_t i) const { return record(i)[2 * max_seq_len_ + 1]; }
  int next_label(int64_t i) const { return record(i)[2 * max_seq_len_ + 2]; }
  const std::string& path() const { return file_->path(); }

 private:
  const uint16_t* record(int64_t i) const { return base_ + i * (2 * max_seq_len_ + 4); }
  std::shared_ptr<MappedFile> file_;
  const uint16_t* base_ = nullptr;
  int64_t count_ = 0;
  int max_seq_len_ = 0;
  BertSpecialIds ids_;
};

// The examples of one or more BERT shards, numbered shard by shard. get() returns
//   {input_ids [L] i64, token_type_ids [L] i64, attention_mask [L] i64 (1 on tokens, 0 on
//    padding), mlm_labels [L] i64 (-100 where not masked), next_sentence_label [] i64}
// with the masks stored in the shard; with `remask`, the stored masking is undone and the
// example masked afresh (mask_prob, max_predictions of `mask_options`) from the loader's
// generator (RoBERTa's dynamic masking), so it depends on (seed, epoch, index) and not on the
// number of workers. All shards must share max_seq_len and special ids.
class BertExampleDataset : public Dataset {
 public:
  explicit BertExampleDataset(const std::vector<std::string>& shard_paths, bool remask = false, BertExampleOptions mask_options = {});
  int64_t size() const override { return total_; }
  Example get(int64_t index, Generator& gen) const override;
  int max_seq_len() const { return max_seq_len_; }

 private:
  std::vector<std::shared_ptr<BertShard>> shards_;
  std::vector<int64_t> first_;
  int64_t total_ = 0;
  int max_seq_len_ = 0;
  bool remask_;
  BertExampleOptions options_;
};

}  // namespace trident::data
