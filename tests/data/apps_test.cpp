// apps/prepare_text and apps/prepare_bert, run as programs on small corpora written here. The
// GPT-2 ids expected from the tiny vocabulary (data_test_util.h) are worked out by hand.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <numeric>
#include <random>
#include <set>

#include "data/bert_examples.h"
#include "data/data_test_util.h"
#include "data/gpt2_tokenizer.h"
#include "data/lm_dataset.h"
#include "data/text_corpus.h"
#include "data/token_shard.h"
#include "test_util.h"

namespace trident::testing {
namespace {

using Ids = std::vector<int32_t>;

std::string quote(const std::string& s) { return "'" + s + "'"; }

Ids shard_tokens(const std::string& path) {
  const data::TokenShard s(path);
  return Ids(s.tokens().begin(), s.tokens().end());
}

Ids concat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

struct TextCorpus {
  ScratchDir dir{"apps"};
  std::string vocab = (dir.path() / "vocab").string(), corpus = (dir.path() / "corpus").string(), out = (dir.path() / "out").string();
  TextCorpus() {
    std::filesystem::create_directories(vocab);
    std::filesystem::create_directories(corpus + "/sub");
    std::filesystem::create_directories(out);
    write_tiny_gpt2_vocab(vocab);
    write_bytes(corpus + "/a.txt", "ab abc");
    write_bytes(corpus + "/c.txt", "x<|endoftext|>");
    write_bytes(corpus + "/sub/b.txt", "aaaa\n");
    write_bytes(corpus + "/.hidden.txt", "zzz");
  }
  RunResult prepare(const std::string& args) const {
    return run(std::string(TRIDENT_PREPARE_TEXT) + " " + quote(corpus) + " --vocab " + quote(vocab) + " --quiet " + args);
  }
};

// By hand, with the tiny vocabulary: "ab abc" is "ab" + " abc", and " abc" merges a b, then
// ab c, leaving Ġ abc; "aaaa\n" is "aaaa" + "\n"; in "x<|endoftext|>" nothing merges.
const Ids kDocA = {kEot, kAB, ' ', kABC};
const Ids kDocB = {kEot, kAAAA, '\n'};
const Ids kDocC = {kEot, 'x', '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|', '>'};

TEST(PrepareText, DocumentsInNameOrderAfterEndOfText) {
  TextCorpus c;
  const RunResult r = c.prepare("--out " + quote(c.out + "/t") + " --val-fraction 0");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("3 documents (0 for validation)"), std::string::npos) << r.output;
  EXPECT_EQ(shard_tokens(c.out + "/t_train_000000.bin"), concat({kDocA, kDocC, kDocB}));
  EXPECT_FALSE(std::filesystem::exists(c.out + "/t_val_000000.bin")) << "an empty split writes no shard";
}

TEST(PrepareText, ValidationDocsAndShardRollover) {
  TextCorpus c;
  RunResult r = c.prepare("--out " + quote(c.out + "/v") + " --val-docs 1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(shard_tokens(c.out + "/v_val_000000.bin"), kDocA);
  EXPECT_EQ(shard_tokens(c.out + "/v_train_000000.bin"), concat({kDocC, kDocB}));

  r = c.prepare("--out " + quote(c.out + "/s") + " --val-fraction 0 --shard-tokens 5");
  ASSERT_EQ(r.status, 0) << r.output;
  const Ids all = concat({kDocA, kDocC, kDocB});  // 22 tokens: shards of 5, 5, 5, 5, 2
  Ids joined;
  for (int i = 0; i < 5; ++i) {
    const Ids part = shard_tokens(c.out + "/s_train_00000" + std::to_string(i) + ".bin");
    EXPECT_EQ(part.size(), i < 4 ? 5u : 2u);
    joined.insert(joined.end(), part.begin(), part.end());
  }
  EXPECT_FALSE(std::filesystem::exists(c.out + "/s_train_000005.bin"));
  EXPECT_EQ(joined, all);
}

TEST(PrepareText, DocumentSplits) {
  TextCorpus c;
  const std::string lines = (c.dir.path() / "lines.txt").string();
  write_bytes(lines, "ab\n\naaaa\r\n");
  RunResult r = run(std::string(TRIDENT_PREPARE_TEXT) + " " + quote(lines) + " --vocab " + quote(c.vocab) + " --quiet --val-fraction 0 --docs line --out " +
              quote(c.out + "/l"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(shard_tokens(c.out + "/l_train_000000.bin"), (Ids{kEot, kAB, kEot, kAAAA}));
  write_bytes(lines, "ab\nab\n\n \naaaa");
  r = run(std::string(TRIDENT_PREPARE_TEXT) + " " + quote(lines) + " --vocab " + quote(c.vocab) + " --quiet --val-fraction 0 --docs blank-line --out " +
          quote(c.out + "/b"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(shard_tokens(c.out + "/b_train_000000.bin"), (Ids{kEot, kAB, '\n', kAB, kEot, kAAAA}));
}

TEST(PrepareText, SameShardsForAnyThreadCount) {
  TextCorpus c;
  std::mt19937 rng(5);
  const char alphabet[] = "abc \n'.";
  for (int f = 0; f < 40; ++f) {
    std::string text;
    for (int i = 0; i < 2000 + f * 50; ++i) text.push_back(alphabet[rng() % 7]);
    write_bytes(c.corpus + "/gen" + std::to_string(100 + f) + ".txt", text);
  }
  for (const char* t : {"1", "3"}) {
    const RunResult r = c.prepare(std::string("--threads ") + t + " --val-fraction 0.2 --seed 9 --out " + quote(c.out + "/th" + t));
    ASSERT_EQ(r.status, 0) << r.output;
  }
  for (const char* split : {"train", "val"}) {
    const std::string a = read_file_for_test(c.out + "/th1_" + split + "_000000.bin");
    ASSERT_GT(a.size(), 1024u);
    EXPECT_EQ(a, read_file_for_test(c.out + "/th3_" + split + "_000000.bin")) << split;
  }
}

TEST(PrepareText, ErrorsNameTheProblem) {
  TextCorpus c;
  RunResult r = run(std::string(TRIDENT_PREPARE_TEXT) + " " + quote(c.corpus) + " --quiet --vocab " + quote(c.dir.file("novocab")) + " --out " +
              quote(c.out + "/x"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("novocab/encoder.json"), std::string::npos) << r.output;
  r = c.prepare("--out " + quote(c.out + "/x") + " " + quote(c.dir.file("absent")));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("absent' does not exist"), std::string::npos) << r.output;
  r = c.prepare("--out " + quote(c.out + "/x") + " --val-docs 1 --val-fraction 0.5");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("excludes"), std::string::npos) << r.output;
}

TEST(PrepareBert, ExamplesFromSentencePerLineText) {
  ScratchDir dir("apps");
  // Vocabulary: the specials, the letters a-z and their continuations, a period.
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n.\n";
  for (char ch = 'a'; ch <= 'z'; ++ch) {
    vocab.push_back(ch);
    vocab.push_back('\n');
  }
  for (char ch = 'a'; ch <= 'z'; ++ch) {
    vocab.append("##");
    vocab.push_back(ch);
    vocab.push_back('\n');
  }
  write_bytes(dir.file("vocab.txt"), vocab);
  std::filesystem::create_directories(dir.path() / "corpus");
  std::mt19937 rng(1);
  for (int d = 0; d < 12; ++d) {
    std::string text;
    for (int s = 0; s < 30; ++s) {
      for (int w = 0; w < 3 + static_cast<int>(rng() % 6); ++w) text += std::string(1 + rng() % 6, static_cast<char>('a' + rng() % 26)) + " ";
      text += ".\n";
    }
    write_bytes((dir.path() / "corpus" / std::to_string(10 + d)).string() + ".txt", text);
  }
  std::vector<std::string> outs;
  for (const char* t : {"1", "2"}) {
    const std::string out = dir.file(std::string("bert") + t);
    const RunResult r = run(std::string(TRIDENT_PREPARE_BERT) + " " + quote(dir.file("corpus")) + " --vocab " + quote(dir.file("vocab.txt")) +
                      " --quiet --max-seq-len 32 --val-docs 2 --seed 3 --threads " + t + " --out " + quote(out));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("12 documents"), std::string::npos) << r.output;
    outs.push_back(out);
  }
  for (const char* split : {"_train_000000.bin", "_val_000000.bin"})
    EXPECT_EQ(read_file_for_test(outs[0] + split), read_file_for_test(outs[1] + split)) << "same shards for 1 and 2 threads";

  data::BertExampleDataset ds({outs[0] + "_train_000000.bin"});
  ASSERT_GT(ds.size(), 50);
  EXPECT_EQ(ds.max_seq_len(), 32);
  Generator gen(0);
  for (int64_t i = 0; i < ds.size(); ++i) {
    const data::Example ex = ds.get(i, gen);
    const auto ids = ex[0].to_vector<int64_t>(), types = ex[1].to_vector<int64_t>(), att = ex[2].to_vector<int64_t>();
    const auto len = std::accumulate(att.begin(), att.end(), int64_t{0});
    ASSERT_GE(len, 5);
    EXPECT_EQ(ids[0], 2) << "[CLS]";
    EXPECT_EQ(ids[static_cast<size_t>(len - 1)], 3) << "[SEP]";
    const auto b_start = std::find(types.begin(), types.end(), 1) - types.begin();
    EXPECT_EQ(ids[static_cast<size_t>(b_start - 1)], 3) << "[SEP] ends segment A";
    for (size_t p = static_cast<size_t>(len); p < 32; ++p) EXPECT_EQ(ids[p], 0) << "[PAD]";
  }
  const RunResult bad = run(std::string(TRIDENT_PREPARE_BERT) + " " + quote(dir.file("corpus")) + " --quiet --vocab " + quote(dir.file("none.txt")) +
                      " --out " + quote(dir.file("x")));
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("none.txt"), std::string::npos) << bad.output;
}

// ---- the Brown corpus shards of scripts/get-data.sh (without --tokenizers) ----

constexpr const char* kFull = "scripts/get-data.sh (needs npm and a configured build/)";

TEST(PrepareTextReal, BrownShardsDecodeToTheCorpus) {
  std::string why;
  if (cached("gpt2/encoder.json", why).empty() || cached("brown/gpt2/brown_train_000000.bin", why, kFull).empty() ||
      cached("brown/gpt2/brown_val_000000.bin", why, kFull).empty())
    GTEST_SKIP() << why;
  const auto tok = data::Gpt2Tokenizer::from_dir(data_cache() + "/gpt2");
  std::multiset<std::string> texts;
  for (const auto& f : data::list_text_files({data_cache() + "/brown/text"})) texts.insert(read_file_for_test(f.path));
  ASSERT_EQ(texts.size(), 500u);
  size_t docs = 0;
  for (const char* split : {"train", "val"}) {
    const Ids ids = shard_tokens(data_cache() + "/brown/gpt2/brown_" + split + "_000000.bin");
    ASSERT_FALSE(ids.empty());
    ASSERT_EQ(ids.front(), 50256) << "every document starts with <|endoftext|>";
    for (size_t b = 0; b < ids.size();) {
      const size_t e = std::find(ids.begin() + static_cast<std::ptrdiff_t>(b) + 1, ids.end(), 50256) - ids.begin();
      const std::string doc = tok.decode(std::span(ids).subspan(b + 1, e - b - 1));
      const auto it = texts.find(doc);
      ASSERT_NE(it, texts.end()) << "a decoded document is no Brown text: " << doc.substr(0, 80);
      texts.erase(it);
      ++docs;
      b = e;
    }
  }
  EXPECT_EQ(docs, 500u);
  const data::LmDataset lm({data_cache() + "/brown/gpt2/brown_train_000000.bin"}, 1024);
  EXPECT_EQ(lm.size(), (lm.num_tokens() - 1) / 1024);
}

TEST(PrepareBertReal, BrownExamples) {
  std::string why;
  if (cached("brown/bert128/bert_train_000000.bin", why, kFull).empty()) GTEST_SKIP() << why;
  data::BertExampleDataset ds({data_cache() + "/brown/bert128/bert_train_000000.bin"});
  ASSERT_GT(ds.size(), 1000);
  EXPECT_EQ(ds.max_seq_len(), 128);
  Generator gen(0);
  int64_t masked = 0, candidates = 0;
  for (int64_t i = 0; i < ds.size(); i += 97) {
    const data::Example ex = ds.get(i, gen);
    const auto ids = ex[0].to_vector<int64_t>(), labels = ex[3].to_vector<int64_t>(), att = ex[2].to_vector<int64_t>();
    EXPECT_EQ(ids[0], 101);
    const auto len = std::accumulate(att.begin(), att.end(), int64_t{0});
    EXPECT_EQ(ids[static_cast<size_t>(len - 1)], 102);
    candidates += len - 3;
    for (int64_t l : labels) masked += l != -100;
  }
  // round(15%) per example: within half a token per example of 15% overall.
  const double examples = static_cast<double>((ds.size() + 96) / 97);
  EXPECT_LE(std::abs(static_cast<double>(masked) - 0.15 * static_cast<double>(candidates)), 0.5 * examples);
}

}  // namespace
}  // namespace trident::testing
