// Helpers for the nn/ state-file tests: a scratch directory per test, raw bytes, files by hand.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "test_util.h"

namespace trident::testing {

// A fresh directory for one test, removed afterwards.
class ScratchDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("trident_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::filesystem::path dir_;
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The little-endian bytes of a list of values.
template <typename U>
std::string le_bytes(const std::vector<U>& values) {
  std::string out;
  for (U v : values) {
    using Bits = std::conditional_t<sizeof(U) == 8, uint64_t, std::conditional_t<sizeof(U) == 4, uint32_t, std::conditional_t<sizeof(U) == 2, uint16_t, uint8_t>>>;
    Bits b;
    std::memcpy(&b, &v, sizeof(U));
    for (size_t i = 0; i < sizeof(U); ++i) out.push_back(static_cast<char>((b >> (8 * i)) & 0xFF));
  }
  return out;
}

// A safetensors file assembled by hand: the 8-byte length, the header text as given, the data.
inline std::string safetensors_bytes(const std::string& header, const std::string& data) {
  return le_bytes<uint64_t>({header.size()}) + header + data;
}

// A contiguous tensor holding exactly these bytes.
inline Tensor tensor_from_bytes(DType dtype, const Shape& shape, const std::string& bytes) {
  Tensor t = empty(shape, dtype);
  EXPECT_EQ(t.nbytes(), bytes.size());
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

// A tensor's bytes in row-major order.
inline std::string tensor_bytes(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

}  // namespace trident::testing
