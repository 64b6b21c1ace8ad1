#include "data/token_shard.h"

#include <glob.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/error.h"

namespace trident::data {

static_assert(std::endian::native == std::endian::little, "token shards are little-endian; a big-endian host would need byte swaps");

namespace {
constexpr size_t kBufferTokens = size_t{1} << 20;
}

TokenShardWriter::TokenShardWriter(const std::string& path) : file_(path, "token shard") {
  const int32_t zeros[256] = {};
  file_.write(zeros, sizeof(zeros));  // the header is written by close(), when the count is known
}

void TokenShardWriter::reserve(size_t n) {
  TRIDENT_CHECK(count_ + static_cast<int64_t>(n) <= kTokenShardMaxTokens, "token shard '", file_.path(), "': more than ",
                kTokenShardMaxTokens, " tokens (the header's int32 count)");
  if (buf_.size() + n > kBufferTokens && !buf_.empty()) {
    file_.write(buf_.data(), buf_.size() * sizeof(uint16_t));
    buf_.clear();
  }
}

void TokenShardWriter::write(std::span<const int32_t> tokens) {
  reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    TRIDENT_CHECK(tokens[i] >= 0 && tokens[i] <= 65535, "token shard '", file_.path(), "': token ", tokens[i], " (index ",
                  count_ + static_cast<int64_t>(i), ") does not fit uint16");
    buf_.push_back(static_cast<uint16_t>(tokens[i]));
  }
  count_ += static_cast<int64_t>(tokens.size());
}

void TokenShardWriter::write(std::span<const uint16_t> tokens) {
  reserve(tokens.size());
  buf_.insert(buf_.end(), tokens.begin(), tokens.end());
  count_ += static_cast<int64_t>(tokens.size());
}

void TokenShardWriter::close() {
  if (!buf_.empty()) file_.write(buf_.data(), buf_.size() * sizeof(uint16_t));
  buf_.clear();
  int32_t header[256] = {};
  header[0] = kTokenShardMagic;
  header[1] = kTokenShardVersion;
  header[2] = static_cast<int32_t>(count_);
  file_.write_at(0, header, sizeof(header));
  file_.commit();
}

void write_token_shard(const std::string& path, std::span<const int32_t> tokens) {
  TokenShardWriter w(path);
  w.write(tokens);
  w.close();
}

TokenShard::TokenShard(const std::string& path) : file_(std::make_shared<MappedFile>(path, "token shard")) {
  const uint64_t bytes = file_->size();
  TRIDENT_CHECK(bytes >= static_cast<uint64_t>(kTokenShardHeaderBytes), "token shard '", path, "': ", bytes,
                " bytes, shorter than the 1024-byte header");
  int32_t header[256];
  std::memcpy(header, file_->data(), sizeof(header));
  TRIDENT_CHECK(header[0] == kTokenShardMagic, "token shard '", path, "': magic number ", header[0], ", expected ", kTokenShardMagic,
                " (not an llm.c token shard)");
  TRIDENT_CHECK(header[1] == kTokenShardVersion, "token shard '", path, "': version ", header[1], ", expected ", kTokenShardVersion,
                " (uint16 GPT-2 tokens)");
  TRIDENT_CHECK(header[2] >= 0, "token shard '", path, "': negative token count ", header[2]);
  const uint64_t body = bytes - static_cast<uint64_t>(kTokenShardHeaderBytes);
  const uint64_t want = static_cast<uint64_t>(header[2]) * 2;
  TRIDENT_CHECK(body >= want, "token shard '", path, "': truncated: the header says ", header[2], " tokens (", want, " bytes) but only ",
                body, " bytes follow it");
  TRIDENT_CHECK(body == want, "token shard '", path, "': the header's count, ", header[2], " tokens (", want,
                " bytes), disagrees with the file size: ", body, " bytes follow the header");
  count_ = header[2];
  tokens_ = reinterpret_cast<const uint16_t*>(file_->data() + kTokenShardHeaderBytes);
}

std::vector<std::string> glob_files(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  TRIDENT_CHECK(!out.empty(), "no file matches '", pattern, "'");
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace trident::data
