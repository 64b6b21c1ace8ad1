// Images: reading files and decoding them with stb_image into the RGB buffer the transforms
// (data/transforms.h) work on.
//
// Decoding reads the header first and refuses an image whose width x height is over a limit
// before any pixel memory is allocated (a 1 KB PNG can claim 100000 x 100000 pixels). Every
// error names the file; datasets turn them into skips or errors (data/image_datasets.h).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace trident::data {

// Bytes in one malloc'd block, so the block stb_image decodes into is adopted rather than
// copied. (Copying it into a std::vector cost more than the copy: with two half-megabyte blocks
// alive and then freed together, glibc returns the heap top to the system after every image and
// the next image faults its pages in again, 2.5 ms per 500 x 375 image here.)
class PixelBuffer {
 public:
  PixelBuffer() = default;
  explicit PixelBuffer(size_t size);  // zero-filled
  explicit PixelBuffer(const std::vector<uint8_t>& bytes);
  // Takes ownership of `data`, a block from std::malloc of at least `size` bytes.
  static PixelBuffer adopt(uint8_t* data, size_t size);
  PixelBuffer(const PixelBuffer& o);
  PixelBuffer& operator=(const PixelBuffer& o);
  PixelBuffer(PixelBuffer&&) noexcept = default;
  PixelBuffer& operator=(PixelBuffer&&) noexcept = default;

  size_t size() const { return size_; }
  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  uint8_t& operator[](size_t i) { return data_.get()[i]; }
  const uint8_t& operator[](size_t i) const { return data_.get()[i]; }
  std::vector<uint8_t> to_vector() const { return {data(), data() + size_}; }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t size_ = 0;
};

// An 8-bit RGB image, rows top to bottom, channels interleaved: channel c of pixel (y, x) is
// pixels[(y * width + x) * 3 + c].
struct Image {
  int64_t height = 0;
  int64_t width = 0;
  PixelBuffer pixels;

  Image() = default;
  // Zero pixels of the given size.
  Image(int64_t h, int64_t w) : height(h), width(w), pixels(static_cast<size_t>(h * w * 3)) {}

  uint8_t at(int64_t y, int64_t x, int c) const { return pixels[static_cast<size_t>((y * width + x) * 3 + c)]; }
};

// The default pixel limit: Pillow's decompression-bomb threshold (PIL.Image.MAX_IMAGE_PIXELS).
// ImageNet's largest training image has about 12 million pixels.
inline constexpr int64_t kDefaultMaxPixels = 89478485;

struct ImageHeader {
  int64_t width = 0;
  int64_t height = 0;
  int channels = 0;  // in the file: 1 grey, 2 grey + alpha, 3 RGB, 4 RGBA
};

// The formats compiled into stb_image here: JPEG (baseline and progressive), PNG (8 and 16
// bits), BMP, GIF (first frame) and PNM. TGA is left out on purpose: it has no signature, so
// stb_image would take many non-image files for one.

// Width, height and channels from the header alone. Throws Error naming `name` when the
// bytes are not an image in one of those formats.
ImageHeader read_image_header(std::span<const uint8_t> bytes, const std::string& name);

// Decodes to RGB (grey is replicated into the three channels, alpha is dropped as Pillow's
// convert("RGB") does, 16-bit samples are reduced to 8). Checks the header's pixel count
// against `max_pixels` before decoding. Throws Error naming `name` for an empty, truncated,
// corrupt or non-image input and for one over the limit.
Image decode_image(std::span<const uint8_t> bytes, const std::string& name, int64_t max_pixels = kDefaultMaxPixels);

// The whole file; an Error naming it if it cannot be opened or read.
std::vector<uint8_t> read_file(const std::string& path);

// read_file then decode_image.
Image load_image(const std::string& path, int64_t max_pixels = kDefaultMaxPixels);

}  // namespace trident::data
