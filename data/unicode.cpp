#include "data/unicode.h"

#include <algorithm>

#include "trident_unicode_tables.h"

namespace trident::data::unicode {

namespace tables = unicode_tables;

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    const size_t len = utf8_sequence_length(p + i, s.size() - i);
    if (len == 0) {
      out.push_back(kInvalid);
      ++i;
    } else {
      out.push_back(utf8_decode(p + i, len));
      i += len;
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint8_t flags(char32_t cp) {
  if (cp >= 0x110000) return 0;
  const unsigned block = tables::kStage1[cp >> tables::kBlockBits];
  return tables::kStage2[(block << tables::kBlockBits) | (cp & ((1u << tables::kBlockBits) - 1))];
}

bool is_cjk(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

namespace {

template <typename Row, size_t N>
const Row* find_row(const Row (&rows)[N], char32_t cp) {
  const Row* it = std::lower_bound(rows, rows + N, cp, [](const Row& r, char32_t c) { return r.cp < c; });
  return it != rows + N && it->cp == cp ? it : nullptr;
}

bool final_sigma_context(const char32_t* s, size_t n, size_t i) {
  // Before: skipping case-ignorable characters, a cased one. After: skipping them, no cased one.
  size_t j = i;
  while (j > 0 && (flags(s[j - 1]) & kCaseIgnorable)) --j;
  if (j == 0 || !(flags(s[j - 1]) & kCased)) return false;
  size_t k = i + 1;
  while (k < n && (flags(s[k]) & kCaseIgnorable)) ++k;
  return k == n || !(flags(s[k]) & kCased);
}

// Hangul syllable decomposition (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = 19 * kNCount;

}  // namespace

int combining_class(char32_t cp) {
  if (!(flags(cp) & kMapped)) return 0;
  const auto* r = find_row(tables::kCombiningClass, cp);
  return r ? r->ccc : 0;
}

void lower_into(const char32_t* s, size_t n, std::u32string& out) {
  for (size_t i = 0; i < n; ++i) {
    const char32_t c = s[i];
    if (c < 0x80) {
      out.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
      continue;
    }
    if (!(flags(c) & kMapped)) {
      out.push_back(c);
      continue;
    }
    if (c == 0x3A3 && final_sigma_context(s, n, i)) {
      out.push_back(0x3C2);
      continue;
    }
    const auto* r = find_row(tables::kLower, c);
    if (!r) {
      out.push_back(c);
      continue;
    }
    out.append(tables::kPool + r->offset, r->length);
  }
}

void nfd_into(const char32_t* s, size_t n, std::u32string& out) {
  const size_t start = out.size();
  bool any_mark = false;
  for (size_t i = 0; i < n; ++i) {
    const char32_t c = s[i];
    if (c < 0x80 || !(flags(c) & kMapped)) {
      out.push_back(c);
      continue;
    }
    if (c >= kSBase && c < kSBase + kSCount) {
      const int k = static_cast<int>(c - kSBase);
      out.push_back(kLBase + k / kNCount);
      out.push_back(kVBase + (k % kNCount) / kTCount);
      if (k % kTCount) out.push_back(kTBase + k % kTCount);
      continue;
    }
    any_mark = true;
    if (const auto* r = find_row(tables::kDecomposition, c))
      out.append(tables::kPool + r->offset, r->length);
    else
      out.push_back(c);
  }
  if (!any_mark) return;
  // Canonical ordering: every run of characters with a non-zero combining class is sorted
  // stably by class (Unicode 3.11).
  size_t i = start;
  while (i < out.size()) {
    if (combining_class(out[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out.size() && combining_class(out[j]) != 0) ++j;
    std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(i), out.begin() + static_cast<std::ptrdiff_t>(j),
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
}

const char* version() { return tables::kUnicodeVersion; }

}  // namespace trident::data::unicode
