#include "data/image_test_util.h"

#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <stdexcept>

// stb_image_write's implementation, for the tests only (the library decodes, never encodes).
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image_write.h>

namespace trident::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  path_ = fs::temp_directory_path() /
          ("trident_image_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1)));
  fs::remove_all(path_);
  fs::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot write " + path);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::vector<uint8_t> make_pixels(int height, int width, int channels, uint64_t seed, bool smooth) {
  std::vector<uint8_t> p(static_cast<size_t>(height) * width * channels);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < channels; ++c) {
        uint64_t v;
        if (smooth) {
          v = static_cast<uint64_t>(40 + 60 * c + (150.0 - 50 * c) * (0.5 + 0.5 * std::sin(0.07 * x + 0.05 * y + seed)));
        } else {
          v = (static_cast<uint64_t>(y) * 7919 + static_cast<uint64_t>(x) * 104729 + static_cast<uint64_t>(c) * 1299709 +
               seed * 15485863) * 2654435761u;
          v >>= 13;
        }
        p[(static_cast<size_t>(y) * width + x) * channels + c] = static_cast<uint8_t>(v & 0xff);
      }
  return p;
}

namespace {
void append(void* ctx, void* data, int size) {
  auto* out = static_cast<std::vector<uint8_t>*>(ctx);
  out->insert(out->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
}
}  // namespace

std::vector<uint8_t> encode_png(const std::vector<uint8_t>& pixels, int height, int width, int channels) {
  std::vector<uint8_t> out;
  if (!stbi_write_png_to_func(append, &out, width, height, channels, pixels.data(), width * channels))
    throw std::runtime_error("stbi_write_png failed");
  return out;
}

std::vector<uint8_t> encode_jpeg(const std::vector<uint8_t>& pixels, int height, int width, int channels,
                                 int quality) {
  std::vector<uint8_t> out;
  if (!stbi_write_jpg_to_func(append, &out, width, height, channels, pixels.data(), quality))
    throw std::runtime_error("stbi_write_jpg failed");
  return out;
}

data::Image to_rgb(const std::vector<uint8_t>& pixels, int height, int width, int channels) {
  data::Image img(height, width);
  for (size_t p = 0; p < static_cast<size_t>(height) * width; ++p)
    for (int c = 0; c < 3; ++c) img.pixels[p * 3 + c] = pixels[p * channels + (channels >= 3 ? c : 0)];
  return img;
}

std::vector<uint8_t> gzip(const std::vector<uint8_t>& bytes) {
  z_stream zs{};
  if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) throw std::runtime_error("deflateInit2");
  std::vector<uint8_t> out(deflateBound(&zs, bytes.size()) + 64);
  zs.next_in = const_cast<Bytef*>(bytes.data());
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) throw std::runtime_error("deflate did not finish");
  out.resize(zs.total_out);
  return out;
}

std::vector<double> reference_weights(int64_t L, int64_t R, int64_t j) {
  const double scale = static_cast<double>(L) / static_cast<double>(R);
  const double support = scale > 1.0 ? scale : 1.0;
  const double centre = (static_cast<double>(j) + 0.5) * scale;
  std::vector<double> w(static_cast<size_t>(L));
  double total = 0.0;
  for (int64_t i = 0; i < L; ++i) {
    const double t = 1.0 - std::fabs((static_cast<double>(i) + 0.5 - centre) / support);
    w[static_cast<size_t>(i)] = t > 0.0 ? t : 0.0;
    total += w[static_cast<size_t>(i)];
  }
  for (double& v : w) v /= total;
  return w;
}

std::vector<double> reference_resample(const data::Image& img, const data::CropBox& box, int64_t resized_h,
                                       int64_t resized_w, int64_t out_top, int64_t out_left, int64_t out_h,
                                       int64_t out_w, bool hflip, const data::Normalization& norm) {
  std::vector<double> out(static_cast<size_t>(3 * out_h * out_w));
  for (int64_t y = 0; y < out_h; ++y) {
    const std::vector<double> wy = reference_weights(box.height, resized_h, out_top + y);
    for (int64_t x = 0; x < out_w; ++x) {
      const std::vector<double> wx = reference_weights(box.width, resized_w, out_left + x);
      for (int c = 0; c < 3; ++c) {
        double v = 0.0;
        for (int64_t i = 0; i < box.height; ++i)
          for (int64_t k = 0; k < box.width; ++k)
            v += wy[static_cast<size_t>(i)] * wx[static_cast<size_t>(k)] * img.at(box.top + i, box.left + k, c);
        const int64_t ox = hflip ? out_w - 1 - x : x;
        out[static_cast<size_t>((c * out_h + y) * out_w + ox)] = (v / 255.0 - norm.mean[c]) / norm.std[c];
      }
    }
  }
  return out;
}

}  // namespace trident::testing
