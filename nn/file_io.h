// Durable file I/O for state files and checkpoints (POSIX): CRC32C, files written under a
// temporary name and renamed into place after fsync, read-only memory maps, positioned reads.
// Every error is a trident::Error naming the file and the operating system's reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace trident::nn {

// CRC32C (Castagnoli, the iSCSI/ext4 checksum): crc32c(data) of a whole buffer, or extend a
// running value: crc32c(crc32c(a), b) == crc32c(a + b). Uses the SSE4.2 instruction when the
// CPU has it (checked at run time), else a table-driven loop; both give the same value.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// The portable table-driven version, exposed so tests can compare the two.
uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc = 0);

// The size and CRC32C of a file as written.
struct FileDigest {
  uint64_t size = 0;
  uint32_t crc32c = 0;
};

// A new file opened for writing (it must not exist yet), counting its size and CRC32C as bytes
// go in. finish() flushes it to disk (fsync) and closes it; a file destroyed unfinished is
// removed, so an exception half-way leaves nothing behind.
class OutputFile {
 public:
  explicit OutputFile(std::string path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* data, size_t n);
  FileDigest finish();
  const std::string& path() const { return path_; }
  uint64_t size() const { return digest_.size; }

 private:
  std::string path_;
  int fd_ = -1;
  bool finished_ = false;
  FileDigest digest_;
};

// Writes `path` atomically: `fill` writes into a temporary file in the same directory, which is
// fsynced and renamed over `path`, and the directory is fsynced. Readers see the old file or the
// complete new one, never a partial file; on an exception the temporary file is removed.
FileDigest write_file_atomically(const std::string& path, const std::function<void(OutputFile&)>& fill);

// A unique name for a temporary sibling of `path`: "<dir>/.<name>.<tag>-<pid>-<counter>-<random>".
// The leading dot keeps it out of checkpoint listings.
std::string temporary_sibling(const std::string& path, const std::string& tag);

// Flushes a directory's entries (after a rename or a new file in it) to disk.
void fsync_directory(const std::string& dir);

// A whole file mapped into memory. The mapping is private and writable: writes to it (for
// example to a tensor loaded from it) stay in this process's copy-on-write pages and never reach
// the file. It stays valid after the descriptor is closed, until the last owner goes.
class MappedFile {
 public:
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return static_cast<const uint8_t*>(addr_); }
  uint8_t* mutable_data() const { return static_cast<uint8_t*>(addr_); }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  void* addr_ = nullptr;
  size_t size_ = 0;
};

// A file opened for positioned reads.
class InputFile {
 public:
  explicit InputFile(std::string path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Reads exactly n bytes at `offset`; an error if the file ends first.
  void read_at(uint64_t offset, void* dst, size_t n) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The size and CRC32C of an existing file (read in large chunks).
FileDigest digest_file(const std::string& path);

}  // namespace trident::nn
