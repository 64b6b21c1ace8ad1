// GPT-2's byte-level BPE tokenizer (Radford et al. 2019; the vocabulary of OpenAI's encoder.json
// and vocab.bpe).
//
// NOTE [GPT-2 pre-tokenization]: text is cut into pieces by GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (PCRE2 in UTF + UCP mode, JIT-compiled when the library has a JIT). Each piece's bytes are
// mapped to GPT-2's 256-symbol byte alphabet and merged pair by pair, always the pair of lowest
// rank in vocab.bpe, every non-overlapping occurrence of it left to right, until no pair has a
// rank: the reference encoder's algorithm, run here in O(n log n) per piece with a heap.
//
// Any byte string encodes and decodes back to itself. PCRE2 needs valid UTF-8, so the text is
// first split into maximal runs of well-formed UTF-8 and maximal runs of bytes that belong to no
// well-formed sequence (unicode::utf8_sequence_length). Valid runs are pre-tokenized by the
// pattern as if each were the whole text (so an invalid byte acts like the end of the text for
// the pattern's look-ahead); each invalid run is one piece of its own, merged by BPE like any
// other (GPT-2's byte alphabet covers all 256 bytes). Valid UTF-8 text is therefore tokenized
// exactly as by the reference encoder, and invalid bytes never change how the valid text
// around them is cut beyond ending the run they interrupt.
//
// Where the reference is JavaScript (the npm package gpt-3-encoder's Encoder.js, whose ids the
// tests' fixture holds) rather than Python's `regex` module, \s differs at three characters:
// PCRE2 counts U+0085 and U+180E as white space, JavaScript counts U+FEFF instead. Letters and
// digits follow the Unicode version of the PCRE2 library.
//
// Special tokens: "<|endoftext|>" is an ordinary string unless encode() is told to allow it, as
// in tiktoken's allowed_special; then each occurrence becomes the single id of that token
// (50256 in GPT-2's vocabulary).
//
// Repeated pieces hit a per-thread cache (pieces to ids), so a tokenizer may be shared by any
// number of threads without locking; copies share the loaded vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace trident::data {

class Gpt2Tokenizer {
 public:
  enum class Special { kNone, kAllow };

  // Loads encoder.json (token string -> id, ids dense from 0) and vocab.bpe (one merge "a b"
  // per line, lowest rank first; an optional "#version" first line). Throws trident::Error
  // naming the file for a file that is missing, not JSON, or inconsistent with the other.
  Gpt2Tokenizer(const std::string& encoder_json_path, const std::string& vocab_bpe_path);
  // Both files from one directory.
  static Gpt2Tokenizer from_dir(const std::string& dir);

  std::vector<int32_t> encode(std::string_view text, Special special = Special::kNone) const;
  // Appends the ids of text to out.
  void encode_into(std::string_view text, std::vector<int32_t>& out, Special special = Special::kNone) const;
  // The bytes of the ids, concatenated. Throws for an id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids) const;

  // The pieces pre-tokenization cuts text into (NOTE [GPT-2 pre-tokenization]); they
  // concatenate back to text.
  std::vector<std::string_view> pretokenize(std::string_view text) const;

  int32_t vocab_size() const;
  // The id of "<|endoftext|>" (50256 for GPT-2); -1 if the vocabulary has no such token.
  int32_t eot_id() const;
  // The bytes token `id` stands for.
  std::string_view token_bytes(int32_t id) const;
  // Whether the pattern runs JIT-compiled.
  bool jit() const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace trident::data
