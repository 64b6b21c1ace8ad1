#include "data/image.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include "core/error.h"

// stb_image's implementation lives in this file and only here. Its failure reason is
// thread-local (stb_image 2.27 declares it STBI_THREAD_LOCAL under C++11), and no global
// option (vertical flip, iPhone PNG conversion) is ever set, so the loader's workers may
// decode concurrently.
#define STBI_ONLY_JPEG
#define STBI_ONLY_PNG
#define STBI_ONLY_BMP
#define STBI_ONLY_GIF
#define STBI_ONLY_PNM
#define STBI_NO_STDIO
// Pixels are adopted by PixelBuffer, which frees with std::free.
#define STBI_MALLOC(size) std::malloc(size)
#define STBI_REALLOC(p, size) std::realloc(p, size)
#define STBI_FREE(p) std::free(p)
#define STB_IMAGE_IMPLEMENTATION
#include <stb_image.h>

namespace trident::data {

PixelBuffer::PixelBuffer(size_t size) : data_(static_cast<uint8_t*>(std::calloc(size ? size : 1, 1))), size_(size) {
  TRIDENT_CHECK(data_ != nullptr, "PixelBuffer: out of memory for ", size, " bytes");
}

PixelBuffer::PixelBuffer(const std::vector<uint8_t>& bytes) : PixelBuffer(bytes.size()) {
  if (!bytes.empty()) std::memcpy(data(), bytes.data(), bytes.size());
}

PixelBuffer PixelBuffer::adopt(uint8_t* data, size_t size) {
  PixelBuffer b;
  b.data_.reset(data);
  b.size_ = size;
  return b;
}

PixelBuffer::PixelBuffer(const PixelBuffer& o) : PixelBuffer(o.size_) {
  if (o.size_) std::memcpy(data(), o.data(), o.size_);
}

PixelBuffer& PixelBuffer::operator=(const PixelBuffer& o) {
  if (this != &o) *this = PixelBuffer(o);
  return *this;
}

namespace {

const char* failure_reason() {
  const char* r = stbi_failure_reason();
  return r && *r ? r : "unknown";
}

int checked_length(std::span<const uint8_t> bytes, const std::string& name) {
  TRIDENT_CHECK(bytes.size() <= static_cast<size_t>(std::numeric_limits<int>::max()), "image ", name, ": ",
                bytes.size(), " bytes, more than stb_image reads (2 GiB)");
  return static_cast<int>(bytes.size());
}

}  // namespace

namespace {

uint32_t be16(const uint8_t* p) { return (uint32_t{p[0]} << 8) | p[1]; }
uint32_t be32(const uint8_t* p) { return (be16(p) << 16) | be16(p + 2); }

// PNG and JPEG headers are read here rather than by stbi_info, which refuses (as "unknown image
// type") any image over 2^30 bytes before the limit could be checked and named.
bool is_png(std::span<const uint8_t> b) {
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return b.size() >= 8 && std::memcmp(b.data(), sig, 8) == 0;
}

ImageHeader png_header(std::span<const uint8_t> b, const std::string& name) {
  // Signature, then the IHDR chunk: length, "IHDR", width, height, bit depth, colour type.
  TRIDENT_CHECK(b.size() >= 26 && std::memcmp(b.data() + 12, "IHDR", 4) == 0, "image ", name,
                ": truncated or corrupt PNG header (no IHDR chunk)");
  static const int channels_of_type[7] = {1, 0, 3, 3, 2, 0, 4};  // grey, -, RGB, palette, grey+alpha, -, RGBA
  const uint8_t type = b[25];
  TRIDENT_CHECK(type <= 6 && channels_of_type[type] != 0, "image ", name, ": corrupt PNG header (colour type ",
                int{type}, ")");
  return {be32(b.data() + 16), be32(b.data() + 20), channels_of_type[type]};
}

bool is_jpeg(std::span<const uint8_t> b) { return b.size() >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff; }

ImageHeader jpeg_header(std::span<const uint8_t> b, const std::string& name) {
  // Walk the marker segments after SOI to the frame header (SOF0..SOF15 but DHT C4, JPG C8,
  // DAC CC): length, precision, height, width, components.
  size_t p = 2;
  while (p + 4 <= b.size()) {
    TRIDENT_CHECK(b[p] == 0xff, "image ", name, ": corrupt JPEG header (no marker at byte ", p, ")");
    const uint8_t m = b[p + 1];
    if (m == 0xff) {  // fill byte
      ++p;
      continue;
    }
    if (m == 0x01 || (m >= 0xd0 && m <= 0xd7)) {  // markers without a segment
      p += 2;
      continue;
    }
    TRIDENT_CHECK(m != 0xd9 && m != 0xda, "image ", name, ": corrupt JPEG (no frame header before ",
                  m == 0xd9 ? "the end of the image" : "the scan", ")");
    const size_t len = be16(b.data() + p + 2);
    if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc) {
      TRIDENT_CHECK(len >= 8 && p + 10 <= b.size(), "image ", name, ": truncated or corrupt JPEG frame header");
      return {be16(b.data() + p + 7), be16(b.data() + p + 5), b[p + 9]};
    }
    TRIDENT_CHECK(len >= 2, "image ", name, ": corrupt JPEG header (segment length ", len, ")");
    p += 2 + len;
  }
  TRIDENT_FAIL("image ", name, ": truncated JPEG header (the file ends before the frame header)");
}

}  // namespace

ImageHeader read_image_header(std::span<const uint8_t> bytes, const std::string& name) {
  TRIDENT_CHECK(!bytes.empty(), "image ", name, ": the file is empty");
  if (is_png(bytes)) return png_header(bytes, name);
  if (is_jpeg(bytes)) return jpeg_header(bytes, name);
  int w = 0, h = 0, c = 0;
  const int ok = stbi_info_from_memory(bytes.data(), checked_length(bytes, name), &w, &h, &c);
  TRIDENT_CHECK(ok, "image ", name, ": not a JPEG, PNG, BMP, GIF or PNM image, or its header is corrupt (stb_image: ",
                failure_reason(), ")");
  return {w, h, c};
}

Image decode_image(std::span<const uint8_t> bytes, const std::string& name, int64_t max_pixels) {
  const ImageHeader header = read_image_header(bytes, name);
  TRIDENT_CHECK(header.width > 0 && header.height > 0, "image ", name, ": its header says ", header.width, " x ",
                header.height, " pixels");
  // Checked before decoding: the pixel memory is never allocated for an image over the limit.
  const int64_t pixels = header.width * header.height;
  TRIDENT_CHECK(pixels <= max_pixels, "image ", name, ": its header claims ", header.width, " x ", header.height, " = ",
                pixels, " pixels, more than the limit of ", max_pixels);
  int w = 0, h = 0, c = 0;
  PixelBuffer data;
  if (stbi_uc* p = stbi_load_from_memory(bytes.data(), checked_length(bytes, name), &w, &h, &c, 3)) {
    data = PixelBuffer::adopt(p, static_cast<size_t>(w) * static_cast<size_t>(h) * 3);
  }
  TRIDENT_CHECK(data.data() != nullptr, "image ", name, ": cannot decode (truncated or corrupt; stb_image: ",
                failure_reason(), ")");
  TRIDENT_CHECK(w == header.width && h == header.height, "image ", name, ": corrupt header (it says ", header.width,
                " x ", header.height, " but stb_image decoded ", w, " x ", h, ")");
  Image img;
  img.height = h;
  img.width = w;
  img.pixels = std::move(data);
  return img;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  TRIDENT_CHECK(f != nullptr, "cannot open ", path, ": ", std::strerror(errno));
  std::vector<uint8_t> bytes;
  // The size from fseek/ftell is only a hint (it fails on pipes, and files change): read until
  // a short read, growing as needed. One byte more than the hint sees the end in one read.
  size_t hint = 1 << 16;
  if (std::fseek(f.get(), 0, SEEK_END) == 0) {
    const long end = std::ftell(f.get());
    if (end >= 0) hint = static_cast<size_t>(end) + 1;
    std::rewind(f.get());
  }
  size_t used = 0;
  bytes.resize(hint);
  for (;;) {
    const size_t got = std::fread(bytes.data() + used, 1, bytes.size() - used, f.get());
    used += got;
    if (used < bytes.size()) break;
    bytes.resize(bytes.size() * 2);
  }
  TRIDENT_CHECK(!std::ferror(f.get()), "error reading ", path, ": ", std::strerror(errno));
  bytes.resize(used);
  return bytes;
}

Image load_image(const std::string& path, int64_t max_pixels) { return decode_image(read_file(path), path, max_pixels); }

}  // namespace trident::data
