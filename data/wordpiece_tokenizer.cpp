#include "data/wordpiece_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "data/file_util.h"
#include "data/unicode.h"

namespace trident::data {

namespace {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

constexpr std::string_view kSentencePieceSpace = "\xE2\x96\x81";  // U+2581

}  // namespace

struct WordPieceTokenizer::Impl {
  WordPieceOptions options;
  bool strip = true;
  std::vector<std::string> tokens;  // id -> token as vocab.txt writes it
  StringMap initial, continuation;  // piece (without "##") -> id
  size_t max_piece_chars = 1;       // the longest piece, in code points
  int32_t pad = -1, unk = -1, cls = -1, sep = -1, mask = -1;

  template <typename F>
  void for_each_word(std::string_view text, const F& f) const;
  // Appends the ids of one word (code points w[0..n)).
  template <typename Emit>
  void wordpiece(const char32_t* w, size_t n, const Emit& emit) const;
};

namespace {

struct Scratch {
  std::u32string chars, lowered, decomposed, word;
  std::string utf8;
  std::vector<uint32_t> offsets;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

bool is_space(char32_t c) { return c == ' ' || (unicode::flags(c) & unicode::kPySpace); }

}  // namespace

template <typename F>
void WordPieceTokenizer::Impl::for_each_word(std::string_view text, const F& f) const {
  Scratch& s = scratch();
  // 1-2: decode, clean, white space to ' ', spaces around CJK.
  auto& chars = s.chars;
  chars.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    char32_t c;
    if (p[i] < 0x80) {
      c = p[i++];
    } else if (const size_t len = unicode::utf8_sequence_length(p + i, text.size() - i)) {
      c = unicode::utf8_decode(p + i, len);
      i += len;
    } else {
      c = unicode::kInvalid;
      ++i;
    }
    if (c == 0 || c == 0xFFFD) continue;
    const uint8_t fl = unicode::flags(c);
    if (fl & unicode::kControl) continue;
    if (fl & unicode::kWhitespace) {
      chars.push_back(' ');
    } else if (c >= 0x3400 && unicode::is_cjk(c)) {
      chars.push_back(' ');
      chars.push_back(c);
      chars.push_back(' ');
    } else {
      chars.push_back(c);
    }
  }
  // 3-5: white-space split, lower-case and strip accents per word, split off punctuation.
  size_t b = 0;
  const size_t n = chars.size();
  while (b < n) {
    while (b < n && is_space(chars[b])) ++b;
    size_t e = b;
    while (e < n && !is_space(chars[e])) ++e;
    if (e == b) break;
    const char32_t* w = chars.data() + b;
    size_t wn = e - b;
    if (options.lower_case) {
      s.lowered.clear();
      unicode::lower_into(w, wn, s.lowered);
      w = s.lowered.data();
      wn = s.lowered.size();
    }
    if (strip) {
      s.decomposed.clear();
      unicode::nfd_into(w, wn, s.decomposed);
      auto& d = s.decomposed;
      d.erase(std::remove_if(d.begin(), d.end(), [](char32_t c) { return c >= 0x80 && (unicode::flags(c) & unicode::kMn); }), d.end());
      w = d.data();
      wn = d.size();
    }
    size_t start = 0;
    for (size_t k = 0; k < wn; ++k) {
      const char32_t c = w[k];
      const uint8_t fl = unicode::flags(c);
      if ((fl & unicode::kPunct) || c == ' ' || (fl & unicode::kPySpace)) {
        if (k > start) f(w + start, k - start);
        if (fl & unicode::kPunct) f(w + k, 1);
        start = k + 1;
      }
    }
    if (wn > start) f(w + start, wn - start);
    b = e;
  }
}

template <typename Emit>
void WordPieceTokenizer::Impl::wordpiece(const char32_t* w, size_t n, const Emit& emit) const {
  if (n > static_cast<size_t>(options.max_chars_per_word) || std::find(w, w + n, unicode::kInvalid) != w + n) {
    emit(unk);
    return;
  }
  Scratch& s = scratch();
  auto& utf8 = s.utf8;
  auto& off = s.offsets;
  utf8.clear();
  off.clear();
  for (size_t k = 0; k < n; ++k) {
    off.push_back(static_cast<uint32_t>(utf8.size()));
    unicode::append_utf8(utf8, w[k]);
  }
  off.push_back(static_cast<uint32_t>(utf8.size()));
  // Greedy longest match first. Pieces are found before any is emitted: a word that cannot be
  // covered is one [UNK], not a prefix of pieces and then [UNK].
  int32_t found[128];
  size_t count = 0;
  size_t start = 0;
  while (start < n) {
    const StringMap& map = start == 0 ? initial : continuation;
    int32_t id = -1;
    size_t end = std::min(n, start + max_piece_chars);
    for (; end > start; --end) {
      auto it = map.find(std::string_view(utf8).substr(off[start], off[end] - off[start]));
      if (it != map.end()) {
        id = it->second;
        break;
      }
    }
    if (id < 0) {
      emit(unk);
      return;
    }
    found[count++] = id;
    start = end;
  }
  for (size_t k = 0; k < count; ++k) emit(found[k]);
}

WordPieceTokenizer::WordPieceTokenizer(const std::vector<std::string>& tokens, WordPieceOptions options, const std::string& source) {
  TRIDENT_CHECK(options.max_chars_per_word > 0 && options.max_chars_per_word <= 127, "WordPiece: max_chars_per_word must be in [1, 127], got ",
                options.max_chars_per_word);
  auto impl = std::make_shared<Impl>();
  impl->options = options;
  impl->strip = options.strip_accents < 0 ? options.lower_case : options.strip_accents != 0;
  impl->tokens = tokens;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    if (t.empty()) continue;
    const bool cont = t.size() > 2 && t.compare(0, 2, "##") == 0;
    const std::string_view piece = cont ? std::string_view(t).substr(2) : std::string_view(t);
    // A repeated token takes its later id, as BERT's load_vocab does.
    (cont ? impl->continuation : impl->initial)[std::string(piece)] = static_cast<int32_t>(i);
    impl->max_piece_chars = std::max(impl->max_piece_chars, unicode::decode_utf8(piece).size());
  }
  auto special = [&](const char* name, int32_t& slot) {
    auto it = impl->initial.find(std::string_view(name));
    TRIDENT_CHECK(it != impl->initial.end(), "WordPiece ", source, ": no ", name, " token");
    slot = it->second;
  };
  special("[PAD]", impl->pad);
  special("[UNK]", impl->unk);
  special("[CLS]", impl->cls);
  special("[SEP]", impl->sep);
  special("[MASK]", impl->mask);
  impl_ = std::move(impl);
}

WordPieceTokenizer WordPieceTokenizer::from_file(const std::string& path, WordPieceOptions options) {
  const std::string text = read_file(path, "BERT vocabulary");
  std::vector<std::string> tokens;
  const bool json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (json) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      TRIDENT_FAIL("BERT vocabulary '", path, "' is not valid JSON: ", e.what());
    }
    TRIDENT_CHECK(j.is_array(), "BERT vocabulary '", path, "' is not a JSON array of tokens in id order");
    for (size_t i = 0; i < j.size(); ++i) {
      TRIDENT_CHECK(j[i].is_string(), "BERT vocabulary '", path, "': entry ", i, " is not a string");
      const std::string t = j[i].get<std::string>();
      if (t.compare(0, kSentencePieceSpace.size(), kSentencePieceSpace) == 0)
        tokens.push_back(t.substr(kSentencePieceSpace.size()));  // "▁" alone becomes "", never matched
      else if (t.size() >= 2 && t.front() == '[' && t.back() == ']')
        tokens.push_back(t);
      else
        tokens.push_back("##" + t);
    }
  } else {
    size_t b = 0;
    while (b < text.size()) {
      size_t e = text.find('\n', b);
      if (e == std::string::npos) e = text.size();
      std::string_view line = std::string_view(text).substr(b, e - b);
      // BERT's load_vocab strips each line.
      while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.remove_suffix(1);
      while (!line.empty() && std::isspace(static_cast<unsigned char>(line.front()))) line.remove_prefix(1);
      tokens.emplace_back(line);
      b = e + 1;
    }
  }
  TRIDENT_CHECK(!tokens.empty(), "BERT vocabulary '", path, "' is empty");
  return WordPieceTokenizer(tokens, options, "vocabulary '" + path + "'");
}

void WordPieceTokenizer::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  const Impl& im = *impl_;
  im.for_each_word(text, [&](const char32_t* w, size_t n) { im.wordpiece(w, n, [&](int32_t id) { out.push_back(id); }); });
}

std::vector<int32_t> WordPieceTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  encode_into(text, out);
  return out;
}

std::vector<std::string> WordPieceTokenizer::basic_tokenize(std::string_view text) const {
  std::vector<std::string> words;
  impl_->for_each_word(text, [&](const char32_t* w, size_t n) {
    std::string s;
    for (size_t k = 0; k < n; ++k) unicode::append_utf8(s, w[k] == unicode::kInvalid ? char32_t{0xFFFD} : w[k]);
    words.push_back(std::move(s));
  });
  return words;
}

std::vector<std::string> WordPieceTokenizer::tokenize(std::string_view text) const {
  std::vector<std::string> out;
  for (int32_t id : encode(text)) out.push_back(token(id));
  return out;
}

std::string WordPieceTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    TRIDENT_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), "WordPiece decode: id ", ids[i], " at position ", i, " is outside [0, ", vocab_size(), ")");
    const std::string& t = impl_->tokens[static_cast<size_t>(ids[i])];
    if (t.size() > 2 && t.compare(0, 2, "##") == 0) {
      out.append(t, 2);
    } else {
      if (i > 0) out.push_back(' ');
      out += t;
    }
  }
  return out;
}

int32_t WordPieceTokenizer::vocab_size() const { return static_cast<int32_t>(impl_->tokens.size()); }

int32_t WordPieceTokenizer::id(std::string_view token) const {
  const bool cont = token.size() > 2 && token.substr(0, 2) == "##";
  const StringMap& map = cont ? impl_->continuation : impl_->initial;
  auto it = map.find(cont ? token.substr(2) : token);
  return it == map.end() ? -1 : it->second;
}

const std::string& WordPieceTokenizer::token(int32_t id) const {
  TRIDENT_CHECK(id >= 0 && id < vocab_size(), "WordPiece token: id ", id, " is outside [0, ", vocab_size(), ")");
  return impl_->tokens[static_cast<size_t>(id)];
}

int32_t WordPieceTokenizer::pad_id() const { return impl_->pad; }
int32_t WordPieceTokenizer::unk_id() const { return impl_->unk; }
int32_t WordPieceTokenizer::cls_id() const { return impl_->cls; }
int32_t WordPieceTokenizer::sep_id() const { return impl_->sep; }
int32_t WordPieceTokenizer::mask_id() const { return impl_->mask; }

}  // namespace trident::data
