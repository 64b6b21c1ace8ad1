#include "data/gpt2_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "data/file_util.h"
#include "data/unicode.h"

namespace trident::data {

namespace {

constexpr const char* kPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kEndOfText = "<|endoftext|>";

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68 bytes
// for U+0100 upwards in byte order, so every token string is printable.
std::array<char32_t, 256> byte_to_symbol() {
  std::array<char32_t, 256> sym{};
  std::array<bool, 256> printable{};
  for (int b = '!'; b <= '~'; ++b) printable[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) sym[b] = printable[b] ? static_cast<char32_t>(b) : next++;
  return sym;
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

std::atomic<uint64_t> g_next_serial{1};

}  // namespace

struct Gpt2Tokenizer::Impl {
  uint64_t serial = g_next_serial.fetch_add(1);
  pcre2_code* code = nullptr;
  bool jit = false;
  std::vector<std::string> bytes_of;  // id -> bytes
  std::array<int32_t, 256> byte_id{};
  struct Merge {
    int32_t rank, id;
  };
  std::unordered_map<uint64_t, Merge> merges;
  int32_t eot = -1;

  ~Impl() {
    if (code) pcre2_code_free(code);
  }

  const Merge* find_merge(int32_t a, int32_t b) const {
    auto it = merges.find(pair_key(a, b));
    return it == merges.end() ? nullptr : &it->second;
  }

  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  template <typename F>
  void for_each_piece(std::string_view text, const F& f) const;
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const;
};

namespace {

// Per-thread state: PCRE2 match data and the piece cache of the tokenizer this thread used last.
// NOTE: a cache belongs to one tokenizer (by serial number, never reused), and is dropped when
// the thread switches tokenizers or when it outgrows kMaxCacheEntries.
constexpr size_t kMaxCacheEntries = size_t{1} << 17;
// Longer pieces (runs of digits, white space or symbols) rarely repeat; they skip the cache.
constexpr size_t kMaxCachedPieceBytes = 64;

struct ThreadState {
  pcre2_match_data* match = nullptr;
  uint64_t owner = 0;
  struct Span {
    uint32_t offset, length;
  };
  std::unordered_map<std::string, Span, StringHash, std::equal_to<>> cache;
  std::vector<int32_t> arena;
  // BPE scratch.
  std::vector<int32_t> ids, prev, next;
  std::vector<uint32_t> batch;

  ThreadState() {
    match = pcre2_match_data_create(1, nullptr);
    TRIDENT_ASSERT(match != nullptr, "pcre2_match_data_create failed");
  }
  ~ThreadState() { pcre2_match_data_free(match); }
  void own(uint64_t serial) {
    if (owner == serial) return;
    cache.clear();
    arena.clear();
    owner = serial;
  }
};

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

}  // namespace

void Gpt2Tokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  ThreadState& ts = thread_state();
  const auto n = static_cast<int32_t>(piece.size());
  if (n == 0) return;
  auto& ids = ts.ids;
  auto& prev = ts.prev;
  auto& next = ts.next;
  ids.resize(n);
  prev.resize(n);
  next.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    ids[i] = byte_id[static_cast<unsigned char>(piece[i])];
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  // (rank, position of the pair's left symbol); symbols keep the position of their first byte.
  using Entry = std::pair<int32_t, int32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  for (int32_t i = 0; i + 1 < n; ++i)
    if (const Merge* m = find_merge(ids[i], ids[i + 1])) heap.push({m->rank, i});
  auto& batch = ts.batch;
  while (!heap.empty()) {
    const int32_t rank = heap.top().first;
    batch.clear();
    while (!heap.empty() && heap.top().first == rank) {
      batch.push_back(static_cast<uint32_t>(heap.top().second));
      heap.pop();
    }
    // Every occurrence of the best pair, left to right, skipping overlaps (a merged symbol is
    // no longer the pair's left half), exactly as the reference's sweep.
    std::sort(batch.begin(), batch.end());
    for (const uint32_t ubatch : batch) {
      const auto i = static_cast<int32_t>(ubatch);
      const int32_t j = next[i];
      if (ids[i] < 0 || j < 0) continue;
      const Merge* m = find_merge(ids[i], ids[j]);
      if (!m || m->rank != rank) continue;  // stale: the pair changed since it was queued
      ids[i] = m->id;
      ids[j] = -1;
      next[i] = next[j];
      if (next[j] >= 0) prev[next[j]] = i;
      if (prev[i] >= 0)
        if (const Merge* l = find_merge(ids[prev[i]], ids[i])) heap.push({l->rank, prev[i]});
      if (next[i] >= 0)
        if (const Merge* r = find_merge(ids[i], ids[next[i]])) heap.push({r->rank, i});
    }
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(ids[i]);
}

void Gpt2Tokenizer::Impl::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (piece.size() > kMaxCachedPieceBytes) {
    bpe(piece, out);
    return;
  }
  ThreadState& ts = thread_state();
  ts.own(serial);
  if (auto it = ts.cache.find(piece); it != ts.cache.end()) {
    out.insert(out.end(), ts.arena.begin() + it->second.offset, ts.arena.begin() + it->second.offset + it->second.length);
    return;
  }
  const size_t start = out.size();
  bpe(piece, out);
  if (ts.cache.size() >= kMaxCacheEntries) {
    ts.cache.clear();
    ts.arena.clear();
  }
  const auto offset = static_cast<uint32_t>(ts.arena.size());
  ts.arena.insert(ts.arena.end(), out.begin() + static_cast<std::ptrdiff_t>(start), out.end());
  ts.cache.emplace(std::string(piece), ThreadState::Span{offset, static_cast<uint32_t>(out.size() - start)});
}

template <typename F>
void Gpt2Tokenizer::Impl::for_each_piece(std::string_view text, const F& f) const {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  pcre2_match_data* md = thread_state().match;
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  // Pre-tokenizes the well-formed run s[b, e) with the pattern.
  auto run_pattern = [&](size_t b, size_t e) {
    size_t pos = b;
    while (pos < e) {
      int rc;
      if (jit) {
        rc = pcre2_jit_match(code, s + b, e - b, pos - b, 0, md, nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(code, s + b, e - b, pos - b, PCRE2_NO_UTF_CHECK, md, nullptr);
      } else {
        rc = pcre2_match(code, s + b, e - b, pos - b, PCRE2_NO_UTF_CHECK, md, nullptr);
      }
      // Every character is a letter, a digit, white space or none of these, so the pattern
      // matches at every position; a failure would be a PCRE2 resource limit.
      TRIDENT_CHECK(rc > 0, "GPT-2 pre-tokenization: PCRE2 error ", rc, " at byte ", pos);
      const size_t ms = b + ov[0], me = b + ov[1];
      TRIDENT_ASSERT(ms == pos && me > ms, "GPT-2 pattern skipped bytes at ", pos);
      f(text.substr(ms, me - ms));
      pos = me;
    }
  };
  size_t i = 0;
  while (i < n) {
    // A well-formed run: ASCII eight bytes at a time, then sequence by sequence.
    size_t j = i;
    while (j < n) {
      if (j + 8 <= n) {
        uint64_t w;
        std::memcpy(&w, s + j, 8);
        if ((w & 0x8080808080808080ull) == 0) {
          j += 8;
          continue;
        }
      }
      const size_t len = unicode::utf8_sequence_length(s + j, n - j);
      if (len == 0) break;
      j += len;
    }
    if (j > i) run_pattern(i, j);
    // A run of bytes outside any well-formed sequence: one piece.
    size_t k = j;
    while (k < n && unicode::utf8_sequence_length(s + k, n - k) == 0) ++k;
    if (k > j) f(text.substr(j, k - j));
    i = k;
  }
}

void Gpt2Tokenizer::Impl::encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
  for_each_piece(text, [&](std::string_view piece) { encode_piece(piece, out); });
}

// ---- loading ----

namespace {

std::string symbols_to_bytes(const std::string& token, const std::string& path, const std::unordered_map<char32_t, int>& byte_of) {
  std::string bytes;
  for (char32_t c : unicode::decode_utf8(token)) {
    auto it = byte_of.find(c);
    TRIDENT_CHECK(it != byte_of.end(), "GPT-2 vocabulary '", path, "': token \"", token, "\" has a character outside GPT-2's byte alphabet");
    bytes.push_back(static_cast<char>(it->second));
  }
  return bytes;
}

}  // namespace

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& encoder_json_path, const std::string& vocab_bpe_path) {
  auto impl = std::make_shared<Impl>();
  const auto sym = byte_to_symbol();
  std::unordered_map<char32_t, int> byte_of;
  for (int b = 0; b < 256; ++b) byte_of[sym[b]] = b;

  // encoder.json
  const std::string json_text = read_file(encoder_json_path, "GPT-2 vocabulary");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    TRIDENT_FAIL("GPT-2 vocabulary '", encoder_json_path, "' is not valid JSON: ", e.what());
  }
  TRIDENT_CHECK(j.is_object() && !j.empty(), "GPT-2 vocabulary '", encoder_json_path, "' is not a JSON object of token -> id");
  const auto n = static_cast<int64_t>(j.size());
  impl->bytes_of.resize(static_cast<size_t>(n));
  std::vector<bool> seen(static_cast<size_t>(n), false);
  StringMap id_of;
  id_of.reserve(static_cast<size_t>(n));
  for (auto it = j.begin(); it != j.end(); ++it) {
    TRIDENT_CHECK(it.value().is_number_integer(), "GPT-2 vocabulary '", encoder_json_path, "': the id of \"", it.key(), "\" is not an integer");
    const auto id = it.value().get<int64_t>();
    TRIDENT_CHECK(id >= 0 && id < n && !seen[static_cast<size_t>(id)], "GPT-2 vocabulary '", encoder_json_path, "': id ", id, " of \"",
                  it.key(), "\" is out of [0, ", n, ") or repeated (ids must number the tokens from 0)");
    seen[static_cast<size_t>(id)] = true;
    std::string bytes = symbols_to_bytes(it.key(), encoder_json_path, byte_of);
    impl->bytes_of[static_cast<size_t>(id)] = bytes;
    id_of.emplace(std::move(bytes), static_cast<int32_t>(id));
    if (it.key() == kEndOfText) impl->eot = static_cast<int32_t>(id);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = id_of.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    TRIDENT_CHECK(it != id_of.end(), "GPT-2 vocabulary '", encoder_json_path, "' has no token for byte ", b);
    impl->byte_id[b] = it->second;
  }

  // vocab.bpe
  const std::string bpe_text = read_file(vocab_bpe_path, "GPT-2 merges");
  std::istringstream lines(bpe_text);
  std::string line;
  int64_t line_no = 0;
  int32_t rank = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    TRIDENT_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < line.size() && line.find(' ', sp + 1) == std::string::npos,
                  "GPT-2 merges '", vocab_bpe_path, "' line ", line_no, ": expected two tokens separated by one space, got \"", line, "\"");
    const std::string a = symbols_to_bytes(line.substr(0, sp), vocab_bpe_path, byte_of);
    const std::string b = symbols_to_bytes(line.substr(sp + 1), vocab_bpe_path, byte_of);
    auto ia = id_of.find(a), ib = id_of.find(b), iab = id_of.find(a + b);
    TRIDENT_CHECK(ia != id_of.end() && ib != id_of.end() && iab != id_of.end(), "GPT-2 merges '", vocab_bpe_path, "' line ", line_no,
                  ": \"", line, "\" names a token (or makes one) that '", encoder_json_path, "' lacks");
    // A repeated merge takes its later rank, as dict(zip(merges, range(...))) does.
    impl->merges[pair_key(ia->second, ib->second)] = Impl::Merge{rank++, iab->second};
  }

  // The pattern.
  int err = 0;
  PCRE2_SIZE err_off = 0;
  impl->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  if (!impl->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    TRIDENT_FAIL("GPT-2 pattern does not compile: ", reinterpret_cast<const char*>(msg));
  }
  impl->jit = pcre2_jit_compile(impl->code, PCRE2_JIT_COMPLETE) == 0;
  impl_ = std::move(impl);
}

Gpt2Tokenizer Gpt2Tokenizer::from_dir(const std::string& dir) { return Gpt2Tokenizer(dir + "/encoder.json", dir + "/vocab.bpe"); }

// ---- public API ----

void Gpt2Tokenizer::encode_into(std::string_view text, std::vector<int32_t>& out, Special special) const {
  if (special == Special::kAllow && impl_->eot >= 0) {
    size_t pos = 0;
    while (true) {
      const size_t hit = text.find(kEndOfText, pos);
      impl_->encode_ordinary(text.substr(pos, hit == std::string_view::npos ? std::string_view::npos : hit - pos), out);
      if (hit == std::string_view::npos) break;
      out.push_back(impl_->eot);
      pos = hit + kEndOfText.size();
    }
    return;
  }
  impl_->encode_ordinary(text, out);
}

std::vector<int32_t> Gpt2Tokenizer::encode(std::string_view text, Special special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode_into(text, out, special);
  return out;
}

std::string Gpt2Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    TRIDENT_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), "GPT-2 decode: id ", ids[i], " at position ", i, " is outside [0, ", vocab_size(), ")");
    out += impl_->bytes_of[static_cast<size_t>(ids[i])];
  }
  return out;
}

std::vector<std::string_view> Gpt2Tokenizer::pretokenize(std::string_view text) const {
  std::vector<std::string_view> pieces;
  impl_->for_each_piece(text, [&](std::string_view p) { pieces.push_back(p); });
  return pieces;
}

int32_t Gpt2Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->bytes_of.size()); }
int32_t Gpt2Tokenizer::eot_id() const { return impl_->eot; }
std::string_view Gpt2Tokenizer::token_bytes(int32_t id) const {
  TRIDENT_CHECK(id >= 0 && id < vocab_size(), "GPT-2 token_bytes: id ", id, " is outside [0, ", vocab_size(), ")");
  return impl_->bytes_of[static_cast<size_t>(id)];
}
bool Gpt2Tokenizer::jit() const { return impl_->jit; }

}  // namespace trident::data
