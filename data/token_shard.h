// Token shards in llm.c's format (karpathy/llm.c dev/data/data_common.py), so data prepared by
// llm.c's scripts or by apps/prepare_text reads the same.
//
// NOTE [Token shards]: a header of 256 little-endian int32: [0] magic 20240520, [1] version 1
// (GPT-2: uint16 tokens), [2] the number of tokens N, the rest 0; then N little-endian uint16
// tokens and nothing else, so the file is exactly 1024 + 2N bytes. Writers write under a
// temporary name and rename when complete (data/file_util.h AtomicFile); readers map the file
// and check the header against the file size, naming the file in every error.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/file_util.h"

namespace trident::data {

inline constexpr int32_t kTokenShardMagic = 20240520;
inline constexpr int32_t kTokenShardVersion = 1;
inline constexpr int64_t kTokenShardHeaderBytes = 256 * 4;
// The header stores the count as an int32.
inline constexpr int64_t kTokenShardMaxTokens = INT32_MAX;

// Streams tokens into a shard: write() any number of times, then close(). A writer destroyed
// before close() leaves no file behind (and none of a previous file with that name is touched).
class TokenShardWriter {
 public:
  explicit TokenShardWriter(const std::string& path);
  // Tokens must lie in [0, 65535] (uint16); the error names the offending token and its index.
  void write(std::span<const int32_t> tokens);
  void write(std::span<const uint16_t> tokens);
  int64_t count() const { return count_; }
  // Writes the header and renames the file into place.
  void close();

 private:
  void reserve(size_t n);
  AtomicFile file_;
  int64_t count_ = 0;
  std::vector<uint16_t> buf_;
};

// Writes a whole shard at once.
void write_token_shard(const std::string& path, std::span<const int32_t> tokens);

// A shard mapped read-only. Thread-safe to read from any number of threads.
class TokenShard {
 public:
  explicit TokenShard(const std::string& path);
  int64_t size() const { return count_; }
  const uint16_t* data() const { return tokens_; }
  std::span<const uint16_t> tokens() const { return {tokens_, static_cast<size_t>(count_)}; }
  uint16_t operator[](int64_t i) const { return tokens_[i]; }
  const std::string& path() const { return file_->path(); }

 private:
  std::shared_ptr<MappedFile> file_;
  const uint16_t* tokens_ = nullptr;
  int64_t count_ = 0;
};

// The files matching a glob(3) pattern ("data/brown_train_*.bin"), sorted; an error names the
// pattern when nothing matches.
std::vector<std::string> glob_files(const std::string& pattern);

}  // namespace trident::data
