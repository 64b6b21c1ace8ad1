#include "data/transforms.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/factory.h"

namespace trident::data {

double uniform_draw(Generator& gen) {
  const PhiloxState s = gen.reserve(1);
  uint32_t o[4];
  philox::block(s.seed, s.offset, 0, o);
  return philox::uniform_f64(o[0], o[1]);
}

namespace {

// U(lo, hi) and a uniform integer in [lo, hi] (torch.randint(lo, hi + 1)).
double uniform_between(Generator& gen, double lo, double hi) { return lo + (hi - lo) * uniform_draw(gen); }
int64_t uniform_int(Generator& gen, int64_t lo, int64_t hi) {
  const int64_t n = hi - lo + 1;
  return lo + std::min<int64_t>(n - 1, static_cast<int64_t>(uniform_draw(gen) * static_cast<double>(n)));
}

// Python's round(): to nearest, halves to even (the default floating-point rounding mode).
int64_t round_half_even(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

// NOTE [Bilinear resampling], one axis: for each of `out` output positions starting at
// `out_first` of a resize from `in` source pixels to `resized`, the first source pixel and
// `taps` weights (zero-padded), normalized to sum to 1.
struct AxisWeights {
  int64_t taps = 0;
  std::vector<int64_t> first;
  std::vector<float> weights;  // [out, taps]
};

AxisWeights axis_weights(int64_t in, int64_t resized, int64_t out_first, int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(resized);
  const double support = std::max(scale, 1.0);
  AxisWeights a;
  a.taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  a.first.resize(static_cast<size_t>(out));
  a.weights.assign(static_cast<size_t>(out * a.taps), 0.f);
  std::vector<double> w(static_cast<size_t>(a.taps));
  for (int64_t j = 0; j < out; ++j) {
    const double centre = (static_cast<double>(out_first + j) + 0.5) * scale;
    int64_t lo = std::max<int64_t>(0, static_cast<int64_t>(std::floor(centre - support)));
    int64_t hi = std::min<int64_t>(in, static_cast<int64_t>(std::ceil(centre + support)));
    double total = 0.0;
    int64_t n = 0;
    for (int64_t i = lo; i < hi; ++i) {
      const double t = std::max(0.0, 1.0 - std::fabs((static_cast<double>(i) + 0.5 - centre) / support));
      if (n == 0 && t == 0.0) {  // drop leading zeros so the taps start at the first weight
        ++lo;
        continue;
      }
      w[static_cast<size_t>(n++)] = t;
      total += t;
    }
    TRIDENT_ASSERT(n <= a.taps && total > 0.0, "resampling weights: ", n, " taps for at most ", a.taps);
    a.first[static_cast<size_t>(j)] = lo;
    float* dst = &a.weights[static_cast<size_t>(j * a.taps)];
    for (int64_t k = 0; k < n; ++k) dst[k] = static_cast<float>(w[static_cast<size_t>(k)] / total);
  }
  return a;
}

// Four floats as one SSE/NEON register (GCC and Clang vector extension).
typedef float Float4 __attribute__((vector_size(16)));

// One output row at a time: the source rows under it are blended (vertical pass: contiguous,
// u8 to f32, vectorizes), then that one row is resampled horizontally, normalized and written
// to the three planes (mirrored when flipping). Vertical first because the horizontal pass is
// the gather-like one, and this way it runs on out_h rows instead of the crop's height.
template <typename Out>
void resample_kernel(const Image& img, const CropBox& box, const AxisWeights& wy, const AxisWeights& wx, int64_t out_h,
                     int64_t out_w, bool hflip, const Normalization& norm, Out* out) {
  // Source columns the output window needs, relative to the box.
  const int64_t col_lo = wx.first.front();
  const int64_t col_hi = std::min<int64_t>(box.width, wx.first.back() + wx.taps);
  const int64_t span = (col_hi - col_lo) * 3;
  // The blended row, padded with zeros so every output reads a full `taps` window (the weights
  // past a window's end are zero).
  std::vector<float> row(static_cast<size_t>(span + wx.taps * 3 + 4), 0.f);
  float scale[3], shift[3];
  for (int c = 0; c < 3; ++c) {
    scale[c] = 1.f / (255.f * norm.std[static_cast<size_t>(c)]);
    shift[c] = -norm.mean[static_cast<size_t>(c)] / norm.std[static_cast<size_t>(c)];
  }
  const int64_t plane = out_h * out_w;
  const int64_t taps_x = wx.taps;
  for (int64_t y = 0; y < out_h; ++y) {
    const int64_t first = wy.first[static_cast<size_t>(y)];
    const float* w = wy.weights.data() + y * wy.taps;
    const int64_t taps = std::min<int64_t>(wy.taps, box.height - first);
    float* r = row.data();
    for (int64_t i = 0; i < span; ++i) r[i] = 0.f;
    for (int64_t k = 0; k < taps; ++k) {
      const float wk = w[k];
      if (wk == 0.f) continue;
      const uint8_t* src = img.pixels.data() + ((box.top + first + k) * img.width + box.left + col_lo) * 3;
      for (int64_t i = 0; i < span; ++i) r[i] += wk * static_cast<float>(src[i]);
    }
    Out* d0 = out + y * out_w;
    Out* d1 = d0 + plane;
    Out* d2 = d1 + plane;
    for (int64_t x = 0; x < out_w; ++x) {
      const float* p = r + (wx.first[static_cast<size_t>(x)] - col_lo) * 3;
      const float* wt = wx.weights.data() + x * taps_x;
      // One pixel's R, G, B (and the next pixel's R, unused) per 4-lane vector: one
      // multiply-add per tap instead of three (the row's padding keeps the fourth lane inside).
      Float4 acc = {0.f, 0.f, 0.f, 0.f};
      for (int64_t k = 0; k < taps_x; ++k) {
        Float4 v;
        std::memcpy(&v, p + 3 * k, sizeof v);
        acc += wt[k] * v;
      }
      const int64_t ox = hflip ? out_w - 1 - x : x;
      d0[ox] = static_cast<Out>(acc[0] * scale[0] + shift[0]);
      d1[ox] = static_cast<Out>(acc[1] * scale[1] + shift[1]);
      d2[ox] = static_cast<Out>(acc[2] * scale[2] + shift[2]);
    }
  }
}

}  // namespace

CropBox random_resized_crop_box(int64_t height, int64_t width, Generator& gen, std::array<double, 2> scale,
                                std::array<double, 2> ratio) {
  TRIDENT_CHECK(height > 0 && width > 0, "random_resized_crop_box: empty image (", height, " x ", width, ")");
  TRIDENT_CHECK(scale[0] > 0 && scale[0] <= scale[1], "random_resized_crop_box: scale must be 0 < min <= max, got (",
                scale[0], ", ", scale[1], ")");
  TRIDENT_CHECK(ratio[0] > 0 && ratio[0] <= ratio[1], "random_resized_crop_box: ratio must be 0 < min <= max, got (",
                ratio[0], ", ", ratio[1], ")");
  const double area = static_cast<double>(height) * static_cast<double>(width);
  const double log_lo = std::log(ratio[0]), log_hi = std::log(ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * uniform_between(gen, scale[0], scale[1]);
    const double aspect = std::exp(uniform_between(gen, log_lo, log_hi));
    const int64_t w = round_half_even(std::sqrt(target * aspect));
    const int64_t h = round_half_even(std::sqrt(target / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int64_t top = uniform_int(gen, 0, height - h);
      const int64_t left = uniform_int(gen, 0, width - w);
      return {top, left, h, w};
    }
  }
  // Ten misses (a very long or tall image): the centre crop with the ratio clamped.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < ratio[0]) {
    h = round_half_even(static_cast<double>(w) / ratio[0]);
  } else if (in_ratio > ratio[1]) {
    w = round_half_even(static_cast<double>(h) * ratio[1]);
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

Tensor resample_to_tensor(const Image& img, const CropBox& box, int64_t resized_h, int64_t resized_w, int64_t out_top,
                          int64_t out_left, int64_t out_h, int64_t out_w, bool hflip, const Normalization& norm,
                          DType dtype) {
  TRIDENT_CHECK(static_cast<int64_t>(img.pixels.size()) == img.height * img.width * 3,
                "resample_to_tensor: the image is ", img.height, " x ", img.width, " but holds ", img.pixels.size(),
                " bytes");
  TRIDENT_CHECK(box.height > 0 && box.width > 0 && box.top >= 0 && box.left >= 0 &&
                    box.top + box.height <= img.height && box.left + box.width <= img.width,
                "resample_to_tensor: crop (top ", box.top, ", left ", box.left, ", ", box.height, " x ", box.width,
                ") is not inside the ", img.height, " x ", img.width, " image");
  TRIDENT_CHECK(resized_h > 0 && resized_w > 0 && out_h > 0 && out_w > 0 && out_top >= 0 && out_left >= 0 &&
                    out_top + out_h <= resized_h && out_left + out_w <= resized_w,
                "resample_to_tensor: output window (top ", out_top, ", left ", out_left, ", ", out_h, " x ", out_w,
                ") is not inside the resized ", resized_h, " x ", resized_w, " image");
  TRIDENT_CHECK(dtype == kF32 || dtype == kBF16, "resample_to_tensor: output dtype must be f32 or bf16, got ", dtype);
  for (int c = 0; c < 3; ++c)
    TRIDENT_CHECK(norm.std[static_cast<size_t>(c)] != 0.f, "resample_to_tensor: std of channel ", c, " is 0");
  const AxisWeights wy = axis_weights(box.height, resized_h, out_top, out_h);
  const AxisWeights wx = axis_weights(box.width, resized_w, out_left, out_w);
  Tensor out = empty({3, out_h, out_w}, dtype);
  if (dtype == kF32) {
    resample_kernel(img, box, wy, wx, out_h, out_w, hflip, norm, out.data<float>());
  } else {
    resample_kernel(img, box, wy, wx, out_h, out_w, hflip, norm, out.data<BFloat16>());
  }
  return out;
}

TrainTransform::TrainTransform(TrainTransformOptions options) : options_(options) {
  TRIDENT_CHECK(options_.size > 0, "TrainTransform: size must be positive, got ", options_.size);
  TRIDENT_CHECK(options_.flip_probability >= 0 && options_.flip_probability <= 1,
                "TrainTransform: flip_probability must be in [0, 1], got ", options_.flip_probability);
}

Tensor TrainTransform::operator()(const Image& img, Generator& gen) const {
  const CropBox box = random_resized_crop_box(img.height, img.width, gen, options_.scale, options_.ratio);
  const bool flip = uniform_draw(gen) < options_.flip_probability;
  const int64_t s = options_.size;
  return resample_to_tensor(img, box, s, s, 0, 0, s, s, flip, options_.normalization, options_.dtype);
}

EvalTransform::EvalTransform(EvalTransformOptions options)
    : options_(options),
      resize_(options.resize > 0 ? options.resize : round_half_even(static_cast<double>(options.size) / 0.875)) {
  TRIDENT_CHECK(options_.size > 0, "EvalTransform: size must be positive, got ", options_.size);
  TRIDENT_CHECK(resize_ >= options_.size, "EvalTransform: resize (", resize_, ") must be at least the crop size (",
                options_.size, ")");
}

Tensor EvalTransform::operator()(const Image& img, Generator& /*gen*/) const {
  TRIDENT_CHECK(img.height > 0 && img.width > 0, "EvalTransform: empty image (", img.height, " x ", img.width, ")");
  // torchvision: the shorter side becomes `resize`, the longer int(resize * long / short).
  const bool tall = img.height >= img.width;
  const int64_t shorter = tall ? img.width : img.height, longer = tall ? img.height : img.width;
  const int64_t resized_long = static_cast<int64_t>(static_cast<double>(resize_ * longer) / static_cast<double>(shorter));
  const int64_t rh = tall ? resized_long : resize_, rw = tall ? resize_ : resized_long;
  const int64_t s = options_.size;
  const int64_t top = round_half_even(static_cast<double>(rh - s) / 2.0);
  const int64_t left = round_half_even(static_cast<double>(rw - s) / 2.0);
  return resample_to_tensor(img, {0, 0, img.height, img.width}, rh, rw, top, left, s, s, false, options_.normalization,
                            options_.dtype);
}

Tensor ToTensorTransform::operator()(const Image& img, Generator& /*gen*/) const {
  return resample_to_tensor(img, {0, 0, img.height, img.width}, img.height, img.width, 0, 0, img.height, img.width,
                            false, norm_, dtype_);
}

}  // namespace trident::data
