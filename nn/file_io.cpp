#include "nn/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>
#include <vector>

#include "core/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define TRIDENT_CRC32C_SSE42 1
#endif

namespace trident::nn {

namespace {

std::string os_error(int err) { return std::system_category().message(err); }

// ---- CRC32C -------------------------------------------------------------------------------
// Reflected Castagnoli polynomial 0x1EDC6F41. Tables for slicing-by-8: table[k][b] is the CRC of
// byte b followed by k zero bytes, so eight input bytes are folded with eight lookups.
constexpr uint32_t kCastagnoliReflected = 0x82F63B78u;

constexpr std::array<std::array<uint32_t, 256>, 8> make_crc_tables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? kCastagnoliReflected : 0u);
    t[0][b] = c;
  }
  for (int k = 1; k < 8; ++k)
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  return t;
}
constexpr auto kCrcTables = make_crc_tables();

uint32_t crc32c_tables(uint32_t c, const uint8_t* p, size_t n) {
  while (n >= 8) {
    // Little-endian assembly of the first four bytes, whatever the host's byte order.
    const uint32_t lo = c ^ (uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24);
    c = kCrcTables[7][lo & 0xFF] ^ kCrcTables[6][(lo >> 8) & 0xFF] ^ kCrcTables[5][(lo >> 16) & 0xFF] ^
        kCrcTables[4][lo >> 24] ^ kCrcTables[3][p[4]] ^ kCrcTables[2][p[5]] ^ kCrcTables[1][p[6]] ^
        kCrcTables[0][p[7]];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ kCrcTables[0][(c ^ *p++) & 0xFF];
  return c;
}

#ifdef TRIDENT_CRC32C_SSE42
// The SSE4.2 crc32 instruction computes exactly this CRC, 8 bytes per instruction (several
// GB/s, against about 1 GB/s for the tables), so verifying a large checkpoint costs little.
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(uint32_t c, const uint8_t* p, size_t n) {
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0) {
    c = _mm_crc32_u8(c, *p++);
    --n;
  }
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
    p += 8;
    n -= 8;
  }
  c = static_cast<uint32_t>(c64);
  while (n--) c = _mm_crc32_u8(c, *p++);
  return c;
}
bool have_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

}  // namespace

uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc) {
  return ~crc32c_tables(~crc, static_cast<const uint8_t*>(data), n);
}

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
#ifdef TRIDENT_CRC32C_SSE42
  if (have_sse42()) return ~crc32c_sse42(~crc, static_cast<const uint8_t*>(data), n);
#endif
  return crc32c_portable(data, n, crc);
}

// ---- writing ------------------------------------------------------------------------------

OutputFile::OutputFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  TRIDENT_CHECK(fd_ >= 0, "cannot create file '", path_, "': ", os_error(errno));
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) ::unlink(path_.c_str());
}

void OutputFile::write(const void* data, size_t n) {
  TRIDENT_CHECK(fd_ >= 0 && !finished_, "write to file '", path_, "' after it was finished");
  const uint8_t* p = static_cast<const uint8_t*>(data);
  digest_.crc32c = crc32c(p, n, digest_.crc32c);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t(1) << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      TRIDENT_FAIL("cannot write to file '", path_, "' (", digest_.size, " bytes written so far): ", os_error(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
    digest_.size += static_cast<uint64_t>(w);
  }
}

FileDigest OutputFile::finish() {
  TRIDENT_CHECK(fd_ >= 0 && !finished_, "file '", path_, "' finished twice");
  if (::fsync(fd_) != 0) TRIDENT_FAIL("cannot flush file '", path_, "' to disk: ", os_error(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) TRIDENT_FAIL("cannot close file '", path_, "': ", os_error(errno));
  finished_ = true;
  return digest_;
}

std::string temporary_sibling(const std::string& path, const std::string& tag) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const std::string name = p.filename().string();
  TRIDENT_CHECK(!name.empty() && name != "." && name != "..", "'", path, "' does not name a file or directory");
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = [] {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd();
  }();
  const uint64_t k = counter.fetch_add(1);
  char suffix[64];
  std::snprintf(suffix, sizeof(suffix), "%s-%ld-%llu-%08llx", tag.c_str(), static_cast<long>(::getpid()),
                static_cast<unsigned long long>(k), static_cast<unsigned long long>((salt ^ (k * 0x9E3779B97F4A7C15ull)) & 0xFFFFFFFFull));
  return (p.parent_path() / ("." + name + "." + suffix)).string();
}

void fsync_directory(const std::string& dir) {
  const std::string d = dir.empty() ? std::string(".") : dir;
  const int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TRIDENT_CHECK(fd >= 0, "cannot open directory '", d, "' to flush it: ", os_error(errno));
  // Some file systems cannot fsync a directory (EINVAL); there is nothing more to do there.
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  TRIDENT_CHECK(rc == 0 || err == EINVAL, "cannot flush directory '", d, "' to disk: ", os_error(err));
}

FileDigest write_file_atomically(const std::string& path, const std::function<void(OutputFile&)>& fill) {
  const std::string tmp = temporary_sibling(path, "tmp");
  FileDigest digest;
  {
    OutputFile f(tmp);  // removed by its destructor if fill or finish throws
    fill(f);
    digest = f.finish();
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    TRIDENT_FAIL("cannot rename '", tmp, "' to '", path, "': ", os_error(err));
  }
  fsync_directory(std::filesystem::path(path).parent_path().string());
  return digest;
}

// ---- reading ------------------------------------------------------------------------------

namespace {
// Opens a regular file for reading and returns its descriptor and size.
int open_regular(const std::string& path, uint64_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TRIDENT_CHECK(fd >= 0, "cannot open file '", path, "': ", os_error(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    TRIDENT_FAIL("cannot stat file '", path, "': ", os_error(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    TRIDENT_FAIL("'", path, "' is not a regular file");
  }
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}
}  // namespace

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  uint64_t size = 0;
  const int fd = open_regular(path, &size);
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  m->size_ = static_cast<size_t>(size);
  if (size > 0) {
    void* a = ::mmap(nullptr, m->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    TRIDENT_CHECK(a != MAP_FAILED, "cannot map file '", path, "' (", size, " bytes) into memory: ", os_error(err));
    m->addr_ = a;
  } else {
    ::close(fd);
  }
  return m;
}

MappedFile::~MappedFile() {
  if (addr_ != nullptr) ::munmap(addr_, size_);
}

InputFile::InputFile(std::string path) : path_(std::move(path)) { fd_ = open_regular(path_, &size_); }

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::read_at(uint64_t offset, void* dst, size_t n) const {
  uint8_t* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd_, p, std::min<size_t>(n, size_t(1) << 30), static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      TRIDENT_FAIL("cannot read file '", path_, "' at byte ", offset, ": ", os_error(errno));
    }
    TRIDENT_CHECK(r > 0, "file '", path_, "' ends at byte ", offset, ", ", n, " bytes short (was it truncated while being read?)");
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

FileDigest digest_file(const std::string& path) {
  InputFile f(path);
  FileDigest d;
  d.size = f.size();
  std::vector<uint8_t> buf(std::min<uint64_t>(f.size(), uint64_t(8) << 20));
  for (uint64_t off = 0; off < f.size();) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), f.size() - off));
    f.read_at(off, buf.data(), n);
    d.crc32c = crc32c(buf.data(), n, d.crc32c);
    off += n;
  }
  return d;
}

}  // namespace trident::nn
