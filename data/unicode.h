// UTF-8 and the bits of Unicode the tokenizers need: strict UTF-8 decoding (invalid bytes are
// reported, never guessed at), character flags in BERT's terms, Python's str.lower() (with the
// Greek final-sigma rule) and canonical decomposition (NFD). The tables are generated at build
// time from the machine's Python unicodedata by data/gen_unicode_tables.py; `version()` says
// which Unicode they follow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace trident::data::unicode {

// What a byte that is not part of valid UTF-8 decodes to: a value above U+10FFFF, so it is no
// character, has no flags and is in no vocabulary.
inline constexpr char32_t kInvalid = 0x110000;

// Length of the well-formed UTF-8 sequence at s[0..n) (1 to 4), or 0 when s[0] does not start
// one: a stray continuation byte, an overlong form, a surrogate, a value past U+10FFFF, or a
// sequence cut short. This is the Unicode standard's definition (Table 3-7), which is also the
// check PCRE2 applies in UTF mode.
inline size_t utf8_sequence_length(const unsigned char* s, size_t n) {
  const unsigned c = s[0];
  if (c < 0x80) return 1;
  if (c < 0xC2) return 0;
  auto cont = [](unsigned b) { return (b & 0xC0u) == 0x80u; };
  if (c < 0xE0) return n >= 2 && cont(s[1]) ? 2 : 0;
  if (c < 0xF0) {
    if (n < 3 || !cont(s[1]) || !cont(s[2])) return 0;
    if (c == 0xE0 && s[1] < 0xA0) return 0;   // overlong
    if (c == 0xED && s[1] >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (c > 0xF4 || n < 4 || !cont(s[1]) || !cont(s[2]) || !cont(s[3])) return 0;
  if (c == 0xF0 && s[1] < 0x90) return 0;  // overlong
  if (c == 0xF4 && s[1] >= 0x90) return 0;  // past U+10FFFF
  return 4;
}

// Decodes the sequence utf8_sequence_length accepted (len 1..4).
inline char32_t utf8_decode(const unsigned char* s, size_t len) {
  switch (len) {
    case 1: return s[0];
    case 2: return (char32_t(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return (char32_t(s[0] & 0x0F) << 12) | (char32_t(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default: return (char32_t(s[0] & 0x07) << 18) | (char32_t(s[1] & 0x3F) << 12) | (char32_t(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
  }
}

// The whole string as code points; each byte outside a well-formed sequence becomes kInvalid.
std::u32string decode_utf8(std::string_view s);
// Appends the UTF-8 form of cp (which must be a Unicode scalar value).
void append_utf8(std::string& out, char32_t cp);

// Character flags (see data/gen_unicode_tables.py for their exact definitions).
enum Flag : uint8_t {
  kControl = 1,         // BERT's _is_control: Cc or Cf, not \t \n \r
  kWhitespace = 2,      // BERT's _is_whitespace: space \t \n \r or Zs
  kPySpace = 4,         // Python's str.isspace()
  kPunct = 8,           // BERT's _is_punctuation
  kMn = 16,             // nonspacing mark (accent stripping drops these)
  kCased = 32,          // cased and not case-ignorable
  kCaseIgnorable = 64,  // case-ignorable
  kMapped = 128,        // lower-casing or NFD changes it, or its combining class is not 0
};
uint8_t flags(char32_t cp);
// BERT's _is_chinese_char: the CJK Unified Ideographs blocks (not Hangul, Hiragana, Katakana).
bool is_cjk(char32_t cp);
int combining_class(char32_t cp);

// Appends Python's str.lower() of s[0..n) to out: the full lower-case mapping of every character,
// and U+03A3 as a final sigma (U+03C2) in the Final_Sigma context of Unicode 3.13.
void lower_into(const char32_t* s, size_t n, std::u32string& out);
// Appends NFD of s[0..n) to out: full canonical decomposition (Hangul arithmetically), then the
// canonical ordering of combining marks.
void nfd_into(const char32_t* s, size_t n, std::u32string& out);

// The Unicode version the tables were generated from.
const char* version();

}  // namespace trident::data::unicode
