// Reading a text corpus for apps/prepare_text and apps/prepare_bert: input files and folders,
// documents, the train/validation split, shards that roll over, and a small ordered thread pool.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/token_shard.h"

namespace trident::data {

// What a document is: a whole file; a block of lines between blank lines; or one line.
enum class DocumentSplit { kFile, kBlankLine, kLine };
// "file", "blank-line" or "line"; the error lists them.
DocumentSplit parse_document_split(const std::string& name);

struct TextFile {
  std::string path;
  uint64_t bytes = 0;
};
// The files of `inputs`, each a file or a folder (walked recursively, entries sorted by name,
// names starting with '.' skipped), in the order given. Errors name a missing input.
std::vector<TextFile> list_text_files(const std::vector<std::string>& inputs);

// Calls f on each document of `text` (views into it), skipping documents that hold only white
// space. A file document is the text as it is; a blank-line or line document has no line
// terminators at either end (lines inside a blank-line document keep their '\n').
void for_each_document(std::string_view text, DocumentSplit split, const std::function<void(std::string_view)>& f);

// Which documents are for validation: the first `val_docs` when val_docs >= 0, otherwise each
// document independently with probability `fraction`, drawn from Philox stream (seed, index),
// so the choice streams and does not depend on the number of threads.
struct ValidationSplit {
  double fraction = 0.01;
  int64_t val_docs = -1;
  uint64_t seed = 0;
  bool is_validation(int64_t doc_index) const;
};

// Token shards <prefix>_000000.bin, <prefix>_000001.bin, ... of `shard_tokens` tokens each (the
// last one shorter); a shard is renamed into place when full or at close(). No file is written
// when no token is.
class ShardedTokenWriter {
 public:
  ShardedTokenWriter(std::string prefix, int64_t shard_tokens);
  void write(std::span<const int32_t> tokens);
  void close();
  int64_t tokens() const { return total_; }
  const std::vector<std::string>& files() const { return files_; }

 private:
  std::string prefix_;
  int64_t shard_tokens_;
  int64_t total_ = 0;
  std::unique_ptr<TokenShardWriter> current_;
  std::vector<std::string> files_;
};

// Runs f(i) for i in [0, n) on `threads` threads (0: all cores), items handed out in order from
// a shared counter; the first exception is rethrown after all threads stop.
void parallel_items(size_t n, int threads, const std::function<void(size_t)>& f);

}  // namespace trident::data
