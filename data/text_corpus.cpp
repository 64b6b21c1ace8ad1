#include "data/text_corpus.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "data/random.h"

namespace trident::data {

namespace fs = std::filesystem;

DocumentSplit parse_document_split(const std::string& name) {
  if (name == "file") return DocumentSplit::kFile;
  if (name == "blank-line") return DocumentSplit::kBlankLine;
  if (name == "line") return DocumentSplit::kLine;
  TRIDENT_FAIL("unknown document split '", name, "': expected file, blank-line or line");
}

std::vector<TextFile> list_text_files(const std::vector<std::string>& inputs) {
  std::vector<TextFile> out;
  std::function<void(const fs::path&)> walk = [&](const fs::path& dir) {
    std::vector<fs::directory_entry> entries;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().filename().string().rfind('.', 0) != 0) entries.push_back(e);
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.path().filename() < b.path().filename(); });
    for (const auto& e : entries) {
      if (e.is_directory())
        walk(e.path());
      else if (e.is_regular_file())
        out.push_back({e.path().string(), static_cast<uint64_t>(e.file_size())});
    }
  };
  for (const std::string& in : inputs) {
    std::error_code ec;
    const auto st = fs::status(in, ec);
    TRIDENT_CHECK(!ec && fs::exists(st), "input '", in, "' does not exist");
    if (fs::is_directory(st))
      walk(in);
    else
      out.push_back({in, static_cast<uint64_t>(fs::file_size(in))});
  }
  return out;
}

namespace {

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; });
}

std::string_view strip_cr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

}  // namespace

void for_each_document(std::string_view text, DocumentSplit split, const std::function<void(std::string_view)>& f) {
  if (split == DocumentSplit::kFile) {
    if (!blank(text)) f(text);
    return;
  }
  size_t doc_begin = std::string_view::npos, doc_end = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    const size_t end = nl == std::string_view::npos ? text.size() : nl;
    const std::string_view line = strip_cr(text.substr(pos, end - pos));
    if (split == DocumentSplit::kLine) {
      if (!blank(line)) f(line);
    } else if (blank(line)) {
      if (doc_begin != std::string_view::npos) f(strip_cr(text.substr(doc_begin, doc_end - doc_begin)));
      doc_begin = std::string_view::npos;
    } else {
      if (doc_begin == std::string_view::npos) doc_begin = pos;
      doc_end = pos + line.size();
    }
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
  }
  if (split == DocumentSplit::kBlankLine && doc_begin != std::string_view::npos) f(text.substr(doc_begin, doc_end - doc_begin));
}

bool ValidationSplit::is_validation(int64_t doc_index) const {
  if (val_docs >= 0) return doc_index < val_docs;
  if (fraction <= 0) return false;
  PhiloxRandom rng(seed, static_cast<uint64_t>(doc_index));
  return rng.uniform() < fraction;
}

ShardedTokenWriter::ShardedTokenWriter(std::string prefix, int64_t shard_tokens) : prefix_(std::move(prefix)), shard_tokens_(shard_tokens) {
  TRIDENT_CHECK(shard_tokens >= 1 && shard_tokens <= kTokenShardMaxTokens, "shard size must be in [1, ", kTokenShardMaxTokens,
                "] tokens, got ", shard_tokens);
}

void ShardedTokenWriter::write(std::span<const int32_t> tokens) {
  while (!tokens.empty()) {
    if (!current_) {
      char name[32];
      std::snprintf(name, sizeof(name), "_%06zu.bin", files_.size());
      files_.push_back(prefix_ + name);
      current_ = std::make_unique<TokenShardWriter>(files_.back());
    }
    const auto room = static_cast<size_t>(shard_tokens_ - current_->count());
    const size_t n = std::min(room, tokens.size());
    current_->write(tokens.first(n));
    total_ += static_cast<int64_t>(n);
    tokens = tokens.subspan(n);
    if (current_->count() == shard_tokens_) {
      current_->close();
      current_.reset();
    }
  }
}

void ShardedTokenWriter::close() {
  if (current_) {
    current_->close();
    current_.reset();
  }
}

void parallel_items(size_t n, int threads, const std::function<void(size_t)>& f) {
  const size_t want = threads > 0 ? static_cast<size_t>(threads) : std::max(1u, std::thread::hardware_concurrency());
  const size_t nt = std::min(want, n);
  if (nt <= 1) {
    for (size_t i = 0; i < n; ++i) f(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex mu;
  std::vector<std::thread> pool;
  for (size_t t = 0; t < nt; ++t)
    pool.emplace_back([&] {
      try {
        for (size_t i; (i = next.fetch_add(1)) < n;) f(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
        next.store(n);
      }
    });
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace trident::data
