// Small file helpers shared by data/: whole-file reads, atomic writes, read-only memory maps.
// Every error names the file and what it was meant to be.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace trident::data {

// The whole file as bytes. `what` says what the file is ("GPT-2 vocabulary") for the error.
std::string read_file(const std::string& path, const char* what);

// Creates the folder that output prefix `prefix` ("data/brown" writes data/brown_train_000000.bin)
// puts its files in, with its parents, when missing. Errors name the prefix and the folder.
void make_prefix_folder(const std::string& prefix);

// A file written under a temporary name in the same directory and renamed to `path` by
// commit(), so that readers never see a partial file. Without commit() (an exception on the way)
// the destructor removes the temporary file.
class AtomicFile {
 public:
  AtomicFile(const std::string& path, const char* what);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  // Overwrites bytes at `offset` (for headers written last).
  void write_at(uint64_t offset, const void* data, size_t bytes);
  uint64_t bytes_written() const { return written_; }
  // Flushes, closes and renames the temporary file onto the destination.
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  const char* what_;
  std::FILE* f_ = nullptr;
  uint64_t written_ = 0;
};

// A read-only memory map of a whole file (an empty file maps to nothing).
class MappedFile {
 public:
  MappedFile(const std::string& path, const char* what);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace trident::data
