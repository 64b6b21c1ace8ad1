// Helpers for the image-data tests: temporary folders, images encoded with stb_image_write,
// gzip with zlib, and direct (slow, double precision) references for the transforms.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data/image.h"
#include "data/transforms.h"

namespace trident::testing {

// A fresh folder under the system's temporary folder, removed with everything in it when the
// object goes.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes);
std::vector<uint8_t> read_bytes(const std::string& path);

// Pixels with `channels` interleaved channels (1 grey, 2 grey + alpha, 3 RGB, 4 RGBA), each a
// deterministic function of (y, x, c, seed); `smooth` gives gentle gradients that JPEG keeps
// well, otherwise values look random.
std::vector<uint8_t> make_pixels(int height, int width, int channels, uint64_t seed, bool smooth = false);

// Encoded in memory with stb_image_write.
std::vector<uint8_t> encode_png(const std::vector<uint8_t>& pixels, int height, int width, int channels);
std::vector<uint8_t> encode_jpeg(const std::vector<uint8_t>& pixels, int height, int width, int channels,
                                 int quality = 95);

// RGB image from interleaved pixels of 1..4 channels, as the decoder converts them: grey
// replicated, alpha dropped.
data::Image to_rgb(const std::vector<uint8_t>& pixels, int height, int width, int channels);

// gzip of `bytes` (zlib's deflate with the gzip wrapper).
std::vector<uint8_t> gzip(const std::vector<uint8_t>& bytes);

// NOTE [Bilinear resampling] written directly: the weight of source pixel i (of L) for output j
// of a resize to R, in double, normalized over all L pixels.
std::vector<double> reference_weights(int64_t L, int64_t R, int64_t j);

// resample_to_tensor's contract computed the slow way: every output value is the double sum
// over the whole crop box of wy * wx * pixel, then flipped and normalized. [3, out_h, out_w] f64.
std::vector<double> reference_resample(const data::Image& img, const data::CropBox& box, int64_t resized_h,
                                       int64_t resized_w, int64_t out_top, int64_t out_left, int64_t out_h,
                                       int64_t out_w, bool hflip, const data::Normalization& norm);

}  // namespace trident::testing
