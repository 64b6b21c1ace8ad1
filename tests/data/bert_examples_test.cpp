// BERT pre-training examples (NOTE [BERT pairs], NOTE [BERT masking], NOTE [BERT example
// shards]). The documents are synthetic, with token ids that encode (document, sentence,
// position), so each check can tell where every token of a pair came from.
//
// Statistical checks use 5 standard deviations of the binomial distribution: a correct
// implementation fails one with probability below 6e-7 (and the seeds are fixed, so a run is
// reproducible).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "data/bert_examples.h"
#include "data/data_test_util.h"
#include "data/token_shard.h"
#include "test_util.h"

namespace trident::testing {
namespace {

using namespace data;

constexpr BertSpecialIds kIds{0, 1, 2, 3, 4, 60000};  // pad unk cls sep mask, vocabulary size

// Token k of sentence s of document d.
int32_t tok(int d, int s, int k) { return 5 + d * 1000 + s * 20 + k; }
int doc_of(int32_t t) { return (t - 5) / 1000; }
int sent_of(int32_t t) { return ((t - 5) % 1000) / 20; }

// n_docs documents (at most 60) of n_sent sentences (at most 50) of 3 to 12 tokens (lengths
// vary with d and s); the ids stay below kIds.vocab_size.
std::vector<BertDocument> make_docs(int n_docs, int n_sent) {
  std::vector<BertDocument> docs(static_cast<size_t>(n_docs));
  for (int d = 0; d < n_docs; ++d)
    for (int s = 0; s < n_sent; ++s) {
      std::vector<int32_t> sent;
      for (int k = 0; k < 3 + (d * 7 + s * 5) % 10; ++k) sent.push_back(tok(d, s, k));
      docs[static_cast<size_t>(d)].push_back(sent);
    }
  return docs;
}

// Checks one unmasked pair: layout, and where A and B come from.
void check_pair(const BertInstance& inst, int d, int max_len) {
  ASSERT_LE(static_cast<int>(inst.tokens.size()), max_len);
  ASSERT_GE(inst.b_start, 3);
  ASSERT_LT(inst.b_start, static_cast<int>(inst.tokens.size()) - 1);
  EXPECT_EQ(inst.tokens.front(), kIds.cls);
  EXPECT_EQ(inst.tokens[static_cast<size_t>(inst.b_start - 1)], kIds.sep);
  EXPECT_EQ(inst.tokens.back(), kIds.sep);
  const std::vector<int32_t> a(inst.tokens.begin() + 1, inst.tokens.begin() + inst.b_start - 1);
  const std::vector<int32_t> b(inst.tokens.begin() + inst.b_start, inst.tokens.end() - 1);
  for (int32_t t : a) ASSERT_EQ(doc_of(t), d) << "segment A comes from its own document";
  // Both segments are runs of the document's text, in order.
  for (size_t i = 1; i < a.size(); ++i) ASSERT_LT(a[i - 1], a[i]);
  for (size_t i = 1; i < b.size(); ++i) ASSERT_LT(b[i - 1], b[i]);
  const int b_doc = doc_of(b.front());
  for (int32_t t : b) ASSERT_EQ(doc_of(t), b_doc);
  if (inst.random_next) {
    EXPECT_NE(b_doc, d) << "a random next sentence comes from another document";
  } else {
    EXPECT_EQ(b_doc, d);
    EXPECT_GT(sent_of(b.front()), sent_of(a.back())) << "B continues A";
  }
}

TEST(BertExamples, PairsFollowCreatePretrainingData) {
  const auto docs = make_docs(20, 40);
  BertExampleOptions o;
  o.max_seq_len = 64;
  BertPairStats stats;
  int64_t pairs = 0, random_next = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    PhiloxRandom rng(7, d);
    for (const BertInstance& inst : create_bert_pairs(docs, d, kIds, o, rng, &stats)) {
      check_pair(inst, static_cast<int>(d), 64);
      EXPECT_TRUE(inst.labels.empty());
      ++pairs;
      random_next += inst.random_next;
    }
  }
  EXPECT_GT(pairs, 100);
  EXPECT_EQ(random_next, stats.forced_random + stats.chosen_random);
  EXPECT_EQ(pairs, stats.forced_random + stats.chosen_random + stats.chosen_next);
}

TEST(BertExamples, NextSentenceIsRandomHalfTheTime) {
  // Among chunks of two or more sentences, B is random with probability 0.5:
  // |chosen_random - n/2| <= 5 sqrt(n / 4).
  const auto docs = make_docs(60, 50);
  BertExampleOptions o;
  o.dupe_factor = 5;
  BertPairStats stats;
  create_bert_instances(docs, kIds, o, 2, &stats);
  const double n = static_cast<double>(stats.chosen_random + stats.chosen_next);
  ASSERT_GT(n, 1000);
  EXPECT_LE(std::abs(static_cast<double>(stats.chosen_random) - 0.5 * n), 5 * std::sqrt(n * 0.25))
      << stats.chosen_random << " random of " << n;
}

TEST(BertExamples, TruncationTakesFromTheLongerSegment) {
  // Two sentences of 200 tokens: A and B are cut to 125 tokens together, longest first, so they
  // end within one token of each other; the first sentence is always A.
  std::vector<BertDocument> docs(2);
  for (int d = 0; d < 2; ++d)
    for (int s = 0; s < 2; ++s) {
      std::vector<int32_t> sent;
      for (int k = 0; k < 200; ++k) sent.push_back(5 + d * 1000 + s * 400 + k);
      docs[static_cast<size_t>(d)].push_back(sent);
    }
  BertExampleOptions o;
  o.short_seq_prob = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    PhiloxRandom rng(seed, 0);
    for (const BertInstance& inst : create_bert_pairs(docs, 0, kIds, o, rng)) {
      const auto a = static_cast<int>(inst.b_start) - 2, b = static_cast<int>(inst.tokens.size()) - inst.b_start - 1;
      EXPECT_EQ(a + b, 125);
      EXPECT_LE(std::abs(a - b), 1) << "A " << a << ", B " << b;
    }
  }
}

TEST(BertExamples, MaskingProportions) {
  const auto docs = make_docs(60, 50);
  BertExampleOptions o;
  o.max_seq_len = 128;
  // The same pairs, unmasked and masked (the masking draws come after the pair's, so the pairs
  // agree).
  int64_t masked = 0, as_mask = 0, kept = 0, replaced = 0, cand_b = 0, cand_all = 0, masked_b = 0;
  for (size_t j = 0; j < 5 * docs.size(); ++j) {
    const size_t d = j % docs.size();
    PhiloxRandom r1(11, j), r2(11, j);
    auto plain = create_bert_pairs(docs, d, kIds, o, r1);
    auto inst = create_bert_pairs(docs, d, kIds, o, r2);
    for (size_t i = 0; i < inst.size(); ++i) {
      mask_bert_tokens(inst[i], kIds, o, r2);
      const auto& orig = plain[i].tokens;
      const auto& in = inst[i].tokens;
      const auto& lab = inst[i].labels;
      ASSERT_EQ(in.size(), orig.size());
      ASSERT_EQ(lab.size(), orig.size());
      const int64_t candidates = static_cast<int64_t>(orig.size()) - 3;
      const int64_t want = std::min<int64_t>(20, std::max<int64_t>(1, std::llround(0.15 * static_cast<double>(candidates))));
      int64_t here = 0;
      for (size_t p = 0; p < in.size(); ++p) {
        const bool special = orig[p] == kIds.cls || orig[p] == kIds.sep;
        if (!special) {
          ++cand_all;
          cand_b += static_cast<int64_t>(p) >= inst[i].b_start;
        }
        if (lab[p] == -100) {
          ASSERT_EQ(in[p], orig[p]) << "an unmasked position changed";
          continue;
        }
        ASSERT_FALSE(special) << "[CLS] or [SEP] masked";
        ASSERT_EQ(lab[p], orig[p]) << "the label is the original token";
        ++here;
        masked_b += static_cast<int64_t>(p) >= inst[i].b_start;
        if (in[p] == kIds.mask) {
          ++as_mask;
        } else if (in[p] == orig[p]) {
          ++kept;
        } else {
          ++replaced;
          ASSERT_TRUE(in[p] > kIds.mask && in[p] < kIds.vocab_size) << "random replacement " << in[p];
        }
      }
      EXPECT_EQ(here, want) << "15% of " << candidates << " candidates";
      masked += here;
    }
  }
  ASSERT_GT(masked, 20000);
  const double m = static_cast<double>(masked);
  // A random replacement equals the original with probability 1 / (V - 5).
  const double p_same = 1.0 / (kIds.vocab_size - 5);
  const struct {
    const char* what;
    int64_t count;
    double p;
  } checks[] = {{"[MASK]", as_mask, 0.8}, {"kept", kept, 0.1 + 0.1 * p_same}, {"random", replaced, 0.1 * (1 - p_same)}};
  for (const auto& c : checks)
    EXPECT_LE(std::abs(static_cast<double>(c.count) - c.p * m), 5 * std::sqrt(m * c.p * (1 - c.p)))
        << c.what << ": " << c.count << " of " << masked << ", expected " << c.p * m;
  // Positions are uniform over the candidates: B's share of the masks is B's share of the
  // candidates (sampling without replacement only narrows the binomial's spread).
  const double pb = static_cast<double>(cand_b) / static_cast<double>(cand_all);
  EXPECT_LE(std::abs(static_cast<double>(masked_b) - pb * m), 5 * std::sqrt(m * pb * (1 - pb)));
}

TEST(BertExamples, DeterministicForASeedWhateverTheThreads) {
  const auto docs = make_docs(30, 20);
  BertExampleOptions o;
  o.dupe_factor = 2;
  const auto one = create_bert_instances(docs, kIds, o, 1);
  const auto four = create_bert_instances(docs, kIds, o, 4);
  ASSERT_EQ(one.size(), four.size());
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_EQ(one[i].tokens, four[i].tokens) << i;
    ASSERT_EQ(one[i].labels, four[i].labels) << i;
    ASSERT_EQ(one[i].b_start, four[i].b_start) << i;
    ASSERT_EQ(one[i].random_next, four[i].random_next) << i;
  }
  o.seed += 1;
  const auto other = create_bert_instances(docs, kIds, o, 4);
  size_t same = 0;
  for (size_t i = 0; i < std::min(one.size(), other.size()); ++i) same += one[i].tokens == other[i].tokens;
  EXPECT_LT(same, one.size() / 2) << "another seed gives other examples";
  // Empty sentences and documents are dropped, not fatal.
  auto with_empty = docs;
  with_empty.push_back({});
  with_empty[0].push_back({});
  EXPECT_EQ(create_bert_instances(with_empty, kIds, BertExampleOptions{}, 2).size(), create_bert_instances(docs, kIds, BertExampleOptions{}, 2).size());
  BertExampleOptions bad;
  bad.max_seq_len = 5;
  expect_error([&] { create_bert_instances(docs, kIds, bad); }, {"max_seq_len", "5"});
}

TEST(BertExamples, ShardRoundTripAsDataset) {
  ScratchDir dir("bert");
  const auto docs = make_docs(10, 20);
  BertExampleOptions o;
  o.max_seq_len = 64;
  const auto inst = create_bert_instances(docs, kIds, o, 2);
  ASSERT_GT(inst.size(), 20u);
  const size_t half = inst.size() / 2;
  write_bert_shard(dir.file("b0.bin"), std::span(inst).first(half), 64, kIds);
  write_bert_shard(dir.file("b1.bin"), std::span(inst).subspan(half), 64, kIds);
  // The header, read raw.
  const std::string raw = read_file_for_test(dir.file("b0.bin"));
  int32_t h[11];
  std::memcpy(h, raw.data(), sizeof(h));
  EXPECT_EQ(h[0], 20240522);
  EXPECT_EQ(h[1], 1);
  EXPECT_EQ(h[2], static_cast<int32_t>(half));
  EXPECT_EQ(h[3], 64);
  EXPECT_EQ(h[4], 60000);
  EXPECT_EQ(h[5], 4 * 64 + 8);
  EXPECT_EQ(raw.size(), 1024 + half * (4 * 64 + 8));

  BertExampleDataset ds({dir.file("b0.bin"), dir.file("b1.bin")});
  ASSERT_EQ(ds.size(), static_cast<int64_t>(inst.size()));
  Generator gen(0);
  for (size_t i = 0; i < inst.size(); ++i) {
    const Example ex = ds.get(static_cast<int64_t>(i), gen);
    ASSERT_EQ(ex.size(), 5u);
    for (int k = 0; k < 4; ++k) ASSERT_EQ(ex[static_cast<size_t>(k)].sizes(), (Shape{64}));
    EXPECT_EQ(ex[4].dim(), 0);
    const auto ids = ex[0].to_vector<int64_t>(), types = ex[1].to_vector<int64_t>(), att = ex[2].to_vector<int64_t>(),
               labels = ex[3].to_vector<int64_t>();
    const size_t n = inst[i].tokens.size();
    for (size_t p = 0; p < 64; ++p) {
      ASSERT_EQ(ids[p], p < n ? inst[i].tokens[p] : kIds.pad) << i << " " << p;
      ASSERT_EQ(labels[p], p < n ? inst[i].labels[p] : -100);
      ASSERT_EQ(att[p], p < n ? 1 : 0);
      ASSERT_EQ(types[p], p < n && static_cast<int32_t>(p) >= inst[i].b_start ? 1 : 0);
    }
    EXPECT_EQ(ex[4].item<int64_t>(), inst[i].random_next ? 1 : 0);
  }
  const Example batch = collate({ds.get(0, gen), ds.get(1, gen), ds.get(2, gen)});
  EXPECT_EQ(batch[0].sizes(), (Shape{3, 64}));
  EXPECT_EQ(batch[4].sizes(), (Shape{3}));
}

TEST(BertExamples, RemaskingDrawsFreshMasksFromTheGenerator) {
  ScratchDir dir("bert");
  const auto docs = make_docs(10, 20);
  BertExampleOptions o;
  o.max_seq_len = 64;
  const auto inst = create_bert_instances(docs, kIds, o, 2);
  write_bert_shard(dir.file("b.bin"), inst, 64, kIds);
  BertExampleDataset ds({dir.file("b.bin")}, /*remask=*/true);
  int differs = 0;
  for (size_t i = 0; i < inst.size(); ++i) {
    // The originals, from the stored example: labels where masked, the input elsewhere.
    std::vector<int64_t> orig;
    for (size_t p = 0; p < inst[i].tokens.size(); ++p) orig.push_back(inst[i].labels[p] == -100 ? inst[i].tokens[p] : inst[i].labels[p]);
    Generator g1(100 + i), g2(100 + i);
    const Example a = ds.get(static_cast<int64_t>(i), g1), b = ds.get(static_cast<int64_t>(i), g2);
    EXPECT_EQ(a[0].to_vector<int64_t>(), b[0].to_vector<int64_t>()) << "same generator state, same masks";
    const auto ids = a[0].to_vector<int64_t>(), labels = a[3].to_vector<int64_t>();
    int64_t masked = 0;
    for (size_t p = 0; p < orig.size(); ++p) {
      if (labels[p] != -100) {
        ++masked;
        EXPECT_EQ(labels[p], orig[p]);
      } else {
        EXPECT_EQ(ids[p], orig[p]);
      }
    }
    EXPECT_EQ(masked, std::max<int64_t>(1, std::llround(0.15 * static_cast<double>(orig.size() - 3))));
    std::vector<int64_t> stored(64, -100);
    for (size_t p = 0; p < inst[i].labels.size(); ++p) stored[p] = inst[i].labels[p];
    differs += labels != stored;
  }
  EXPECT_GT(differs, static_cast<int>(inst.size()) / 2);
}

TEST(BertExamples, BadShardsNameTheFile) {
  ScratchDir dir("bert");
  const auto inst = create_bert_instances(make_docs(4, 10), kIds, BertExampleOptions{}, 1);
  const std::string good = dir.file("good.bin");
  write_bert_shard(good, inst, 128, kIds);
  const std::string raw = read_file_for_test(good);
  const std::string p = dir.file("bad.bin");
  expect_error([&] { BertShard(dir.file("absent.bin")); }, {"absent.bin", "cannot open"});
  write_bytes(p, raw.substr(0, 500));
  expect_error([&] { BertShard{p}; }, {"bad.bin", "shorter than the 1024-byte header"});
  write_bytes(p, raw.substr(0, raw.size() - 10));
  expect_error([&] { BertShard{p}; }, {"bad.bin", "truncated"});
  write_bytes(p, raw + "xx");
  expect_error([&] { BertShard{p}; }, {"bad.bin", "disagrees with the file size"});
  std::string v2 = raw;
  v2[4] = 2;
  write_bytes(p, v2);
  expect_error([&] { BertShard{p}; }, {"bad.bin", "version 2"});
  write_token_shard(p, std::vector<int32_t>{1, 2, 3});
  expect_error([&] { BertShard{p}; }, {"bad.bin", "magic number 20240520", "GPT-2 token shard"});
  write_bert_shard(dir.file("short.bin"), inst, 256, kIds);
  expect_error([&] { BertExampleDataset({good, dir.file("short.bin")}); }, {"short.bin", "max_seq_len 256"});
  BertInstance too_long;
  too_long.tokens.assign(200, 7);
  too_long.labels.assign(200, -100);
  expect_error([&] { write_bert_shard(dir.file("x.bin"), std::span(&too_long, 1), 128, kIds); }, {"x.bin", "200 tokens"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.bin")));
}

}  // namespace
}  // namespace trident::testing
