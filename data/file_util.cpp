#include "data/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/error.h"

namespace trident::data {

void make_prefix_folder(const std::string& prefix) {
  const std::filesystem::path folder = std::filesystem::path(prefix).parent_path();
  if (folder.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  TRIDENT_CHECK(!ec && std::filesystem::is_directory(folder), "output prefix '", prefix, "': cannot create the folder '",
                folder.string(), "'", ec ? ": " + ec.message() : std::string(": a file of that name is in the way"));
}

std::string read_file(const std::string& path, const char* what) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  TRIDENT_CHECK(f != nullptr, what, " '", path, "': cannot open: ", std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, got);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  TRIDENT_CHECK(!failed, what, " '", path, "': read error");
  return out;
}

namespace {
std::atomic<uint64_t> g_tmp_counter{0};
}

AtomicFile::AtomicFile(const std::string& path, const char* what)
    : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(g_tmp_counter.fetch_add(1))), what_(what) {
  f_ = std::fopen(tmp_.c_str(), "wb");
  TRIDENT_CHECK(f_ != nullptr, what_, " '", path_, "': cannot create '", tmp_, "': ", std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (f_) {
    std::fclose(f_);
    std::remove(tmp_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t bytes) {
  TRIDENT_CHECK(f_ != nullptr, what_, " '", path_, "': write after commit");
  TRIDENT_CHECK(std::fwrite(data, 1, bytes, f_) == bytes, what_, " '", path_, "': write failed: ", std::strerror(errno));
  written_ += bytes;
}

void AtomicFile::write_at(uint64_t offset, const void* data, size_t bytes) {
  TRIDENT_CHECK(f_ != nullptr, what_, " '", path_, "': write after commit");
  TRIDENT_CHECK(std::fflush(f_) == 0 && std::fseek(f_, static_cast<long>(offset), SEEK_SET) == 0 && std::fwrite(data, 1, bytes, f_) == bytes &&
                    std::fseek(f_, 0, SEEK_END) == 0,
                what_, " '", path_, "': write failed: ", std::strerror(errno));
}

void AtomicFile::commit() {
  TRIDENT_CHECK(f_ != nullptr, what_, " '", path_, "': committed twice");
  const bool ok = std::fflush(f_) == 0 && ::fsync(::fileno(f_)) == 0;
  const int err = errno;
  std::fclose(f_);
  f_ = nullptr;
  if (!ok) {
    std::remove(tmp_.c_str());
    TRIDENT_FAIL(what_, " '", path_, "': flush failed: ", std::strerror(err));
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp_.c_str());
    TRIDENT_FAIL(what_, " '", path_, "': cannot rename '", tmp_, "' onto it: ", std::strerror(e));
  }
}

MappedFile::MappedFile(const std::string& path, const char* what) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TRIDENT_CHECK(fd >= 0, what, " '", path, "': cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    TRIDENT_FAIL(what, " '", path, "': cannot stat: ", std::strerror(e));
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    const int e = errno;
    ::close(fd);
    TRIDENT_CHECK(p != MAP_FAILED, what, " '", path, "': cannot map: ", std::strerror(e));
    data_ = static_cast<const unsigned char*>(p);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
}

}  // namespace trident::data
