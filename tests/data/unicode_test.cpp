// data/unicode: strict UTF-8 and the generated tables. Expected values are Unicode's own (the
// standard's Table 3-7 for UTF-8, UnicodeData.txt for categories, decompositions and combining
// classes, SpecialCasing.txt for U+0130 and the final sigma), written out by hand.
#include <gtest/gtest.h>

#include "data/unicode.h"

namespace trident::testing {
namespace {

namespace u = data::unicode;

size_t seq_len(std::string_view s) { return u::utf8_sequence_length(reinterpret_cast<const unsigned char*>(s.data()), s.size()); }

TEST(Unicode, Utf8SequenceLengthFollowsTheStandard) {
  EXPECT_EQ(seq_len("a"), 1u);
  EXPECT_EQ(seq_len("\xC3\xA9"), 2u);          // é
  EXPECT_EQ(seq_len("\xE2\x82\xAC"), 3u);      // €
  EXPECT_EQ(seq_len("\xF0\x9F\x98\x80"), 4u);  // 😀
  EXPECT_EQ(seq_len("\xF4\x8F\xBF\xBF"), 4u);  // U+10FFFF
  EXPECT_EQ(seq_len("\x80"), 0u);              // lone continuation byte
  EXPECT_EQ(seq_len("\xC0\xAF"), 0u);          // overlong '/'
  EXPECT_EQ(seq_len("\xC1\xBF"), 0u);          // overlong
  EXPECT_EQ(seq_len("\xE0\x9F\xBF"), 0u);      // overlong 3-byte form
  EXPECT_EQ(seq_len("\xED\xA0\x80"), 0u);      // surrogate U+D800
  EXPECT_EQ(seq_len("\xED\x9F\xBF"), 3u);      // U+D7FF, just below the surrogates
  EXPECT_EQ(seq_len("\xF0\x8F\xBF\xBF"), 0u);  // overlong 4-byte form
  EXPECT_EQ(seq_len("\xF4\x90\x80\x80"), 0u);  // U+110000
  EXPECT_EQ(seq_len("\xF5\x80\x80\x80"), 0u);
  EXPECT_EQ(seq_len("\xFF"), 0u);
  EXPECT_EQ(seq_len("\xE2\x82"), 0u);  // cut short
  EXPECT_EQ(seq_len("\xE2\x82x"), 0u);
  const std::u32string d = u::decode_utf8("a\xC3\xA9\xFF\xE2\x82\xAC");
  EXPECT_EQ(d, (std::u32string{U'a', 0xE9, u::kInvalid, 0x20AC}));
  std::string back;
  for (char32_t c : {char32_t{'a'}, char32_t{0xE9}, char32_t{0x20AC}, char32_t{0x1F600}}) u::append_utf8(back, c);
  EXPECT_EQ(back, "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
}

TEST(Unicode, FlagsInBertsTerms) {
  EXPECT_EQ(u::flags('a'), u::kCased);
  EXPECT_EQ(u::flags(','), u::kPunct);
  EXPECT_TRUE(u::flags('$') & u::kPunct);    // ASCII symbols count as punctuation in BERT
  EXPECT_TRUE(u::flags('`') & u::kPunct);
  EXPECT_TRUE(u::flags(0x2014) & u::kPunct);   // em dash, Pd
  EXPECT_FALSE(u::flags(0x20AC) & u::kPunct);  // euro sign, Sc
  EXPECT_TRUE(u::flags(' ') & u::kWhitespace);
  EXPECT_TRUE(u::flags('\n') & u::kWhitespace);
  EXPECT_FALSE(u::flags('\n') & u::kControl);
  EXPECT_TRUE(u::flags(0xA0) & u::kWhitespace);    // no-break space, Zs
  EXPECT_TRUE(u::flags(0x3000) & u::kWhitespace);  // ideographic space, Zs
  EXPECT_TRUE(u::flags(0x07) & u::kControl);       // Cc
  EXPECT_TRUE(u::flags(0x200B) & u::kControl);     // zero width space, Cf
  EXPECT_TRUE(u::flags(0xAD) & u::kControl);       // soft hyphen, Cf
  EXPECT_TRUE(u::flags(0x2028) & u::kPySpace);     // line separator: Zl, split on by str.split()
  EXPECT_FALSE(u::flags(0x2028) & u::kWhitespace);
  EXPECT_TRUE(u::flags(0x301) & u::kMn);
  EXPECT_TRUE(u::flags(0x301) & u::kCaseIgnorable);
  EXPECT_TRUE(u::flags('\'') & u::kCaseIgnorable);
  EXPECT_TRUE(u::flags(0x3A3) & u::kCased);
  EXPECT_EQ(u::flags(u::kInvalid), 0);
  EXPECT_TRUE(u::is_cjk(0x4E2D));    // 中
  EXPECT_FALSE(u::is_cjk(0x3042));   // あ, Hiragana
  EXPECT_FALSE(u::is_cjk(0xD55C));   // 한, Hangul
  EXPECT_TRUE(u::is_cjk(0x20000));
  EXPECT_EQ(u::combining_class(0x301), 230);
  EXPECT_EQ(u::combining_class(0x323), 220);
  EXPECT_EQ(u::combining_class('a'), 0);
  EXPECT_NE(std::string(u::version()), "");
}

std::u32string lower(const std::u32string& s) {
  std::u32string out;
  u::lower_into(s.data(), s.size(), out);
  return out;
}
std::u32string nfd(const std::u32string& s) {
  std::u32string out;
  u::nfd_into(s.data(), s.size(), out);
  return out;
}

TEST(Unicode, LowerCaseAsPython) {
  EXPECT_EQ(lower(U"Hello WORLD"), U"hello world");
  EXPECT_EQ(lower(U"\u00C9COLE"), U"\u00E9cole");
  EXPECT_EQ(lower(U"\u0130"), U"i\u0307");  // İ lowers to two characters
  // Final sigma: after a cased letter and not before one (case-ignorable ones skipped).
  EXPECT_EQ(lower(U"\u039F\u0394\u039F\u03A3"), U"\u03BF\u03B4\u03BF\u03C2");
  EXPECT_EQ(lower(U"\u03A3\u0391"), U"\u03C3\u03B1");
  EXPECT_EQ(lower(U"\u03A3"), U"\u03C3");
  EXPECT_EQ(lower(U"\u0391\u03A3'"), U"\u03B1\u03C2'");
  EXPECT_EQ(lower(U"\u0391\u03A3'\u0391"), U"\u03B1\u03C3'\u03B1");
  EXPECT_EQ(lower(U"\u0391\u03A3 \u0391"), U"\u03B1\u03C2 \u03B1");
  EXPECT_EQ(lower(U"\u0401"), U"\u0451");  // Ё
}

TEST(Unicode, CanonicalDecomposition) {
  EXPECT_EQ(nfd(U"\u00E9"), U"e\u0301");
  EXPECT_EQ(nfd(U"\u1E69"), U"s\u0323\u0307");  // ṩ: s, dot below (220), dot above (230)
  EXPECT_EQ(nfd(U"a\u0301\u0323"), U"a\u0323\u0301");  // canonical ordering
  EXPECT_EQ(nfd(U"\uD55C"), U"\u1112\u1161\u11AB");  // 한 = ᄒ ᅡ ᆫ
  EXPECT_EQ(nfd(U"\uAC00"), U"\u1100\u1161");        // 가 has no final consonant
  EXPECT_EQ(nfd(U"\u00C5"), U"A\u030A");
  EXPECT_EQ(nfd(U"\u212B"), U"A\u030A");  // ANGSTROM SIGN: singleton decomposition
  EXPECT_EQ(nfd(U"\u037E"), U";");        // GREEK QUESTION MARK
  EXPECT_EQ(nfd(U"\u00DF"), U"\u00DF");   // ß has only a compatibility decomposition
  EXPECT_EQ(nfd(U"plain"), U"plain");
}

}  // namespace
}  // namespace trident::testing
