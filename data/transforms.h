// Image transforms: torchvision's ImageNet training and evaluation pipelines, fused.
//
// Training: RandomResizedCrop(size, scale = (0.08, 1), ratio = (3/4, 4/3)), RandomHorizontalFlip
// (p = 0.5), ToTensor, Normalize(ImageNet mean, std). Evaluation: Resize(shorter side to
// `resize`), CenterCrop(size), ToTensor, Normalize. Each runs as one resampling pass from the
// decoded 8-bit RGB image straight to the normalized [3, H, W] tensor (f32 or bf16): the crop is
// a window of the source, the flip a reversed write, the normalization a multiply-add on the
// way out, and nothing is rounded back to 8 bits in between (torchvision with Pillow rounds
// the resized image to 8 bits before ToTensor; the difference is below 1/255 per pixel).
//
// NOTE [Bilinear resampling]: resizing a source window of L pixels to R pixels (per axis) maps
// output pixel j to the source centre c = (j + 0.5) * L / R (pixel i's centre is i + 0.5) and
// averages source pixels with triangle weights max(0, 1 - |i + 0.5 - c| / s), s = max(L / R, 1),
// normalized to sum to 1 over the pixels inside the window. Enlarging (s = 1) this is plain
// bilinear interpolation with half-pixel centres (PyTorch's align_corners=False; edge pixels
// extend outwards); shrinking, the triangle widens with the scale so every source pixel
// contributes (antialiasing), which is Pillow's BILINEAR filter and PyTorch's
// interpolate(mode="bilinear", antialias=True). The two axes are separable: rows first, then
// columns, in f32.
//
// All randomness comes from the Generator passed in (the loader seeds it per example).
#pragma once

#include <array>
#include <cstdint>

#include "core/rng.h"
#include "core/tensor.h"
#include "data/image.h"

namespace trident::data {

// (v / 255 - mean[c]) / std[c]; the defaults are ImageNet's.
struct Normalization {
  std::array<float, 3> mean{0.485f, 0.456f, 0.406f};
  std::array<float, 3> std{0.229f, 0.224f, 0.225f};
  // v / 255 unchanged (torchvision's ToTensor alone).
  static Normalization identity() { return {{0.f, 0.f, 0.f}, {1.f, 1.f, 1.f}}; }
};

// A window of an image: rows [top, top + height), columns [left, left + width).
struct CropBox {
  int64_t top = 0;
  int64_t left = 0;
  int64_t height = 0;
  int64_t width = 0;
  bool operator==(const CropBox&) const = default;
};

// One uniform double in [0, 1) from `gen` (one Philox block per draw, 53 random bits). Every
// random choice of the transforms is made from these draws, in the order documented below.
double uniform_draw(Generator& gen);

// torchvision's RandomResizedCrop.get_params for an image of height x width: up to 10 tries of
// (area fraction ~ U(scale), log aspect ratio ~ U(log ratio)) -> w = round(sqrt(area * ratio)),
// h = round(sqrt(area / ratio)) (halves to even, as Python's round), accepted if it fits, then
// top ~ U{0..height-h}, left ~ U{0..width-w}; after 10 misses the centre crop of the whole image
// with its aspect ratio clamped into `ratio`. Draws per try: area, ratio; then top, left.
CropBox random_resized_crop_box(int64_t height, int64_t width, Generator& gen,
                                std::array<double, 2> scale = {0.08, 1.0},
                                std::array<double, 2> ratio = {3.0 / 4.0, 4.0 / 3.0});

// The general kernel under both pipelines: resamples `box` of `img` to resized_h x resized_w
// (NOTE [Bilinear resampling]), keeps the output window of out_h x out_w at (out_top,
// out_left) of that resized image, mirrors it left-right when `hflip`, normalizes, and returns
// [3, out_h, out_w] of `dtype` (f32 or bf16).
Tensor resample_to_tensor(const Image& img, const CropBox& box, int64_t resized_h, int64_t resized_w,
                          int64_t out_top, int64_t out_left, int64_t out_h, int64_t out_w, bool hflip,
                          const Normalization& norm, DType dtype);

// An image to an example tensor, drawing any randomness from `gen`.
class ImageTransform {
 public:
  virtual ~ImageTransform() = default;
  virtual Tensor operator()(const Image& img, Generator& gen) const = 0;
};

struct TrainTransformOptions {
  int64_t size = 224;  // 224 for ResNet-style training; 331 and 480 for AmoebaNet
  std::array<double, 2> scale{0.08, 1.0};
  std::array<double, 2> ratio{3.0 / 4.0, 4.0 / 3.0};
  double flip_probability = 0.5;
  Normalization normalization;
  DType dtype = kF32;
};

// RandomResizedCrop + RandomHorizontalFlip + Normalize. Draws: the crop (above), then one draw
// for the flip (flipped when it is below flip_probability).
class TrainTransform final : public ImageTransform {
 public:
  explicit TrainTransform(TrainTransformOptions options = {});
  Tensor operator()(const Image& img, Generator& gen) const override;
  const TrainTransformOptions& options() const { return options_; }

 private:
  TrainTransformOptions options_;
};

struct EvalTransformOptions {
  int64_t size = 224;
  // The shorter side after resizing; 0 means round(size / 0.875): 256 for 224, 378 for 331,
  // 549 for 480 (the usual 87.5% centre crop).
  int64_t resize = 0;
  Normalization normalization;
  DType dtype = kF32;
};

// Resize (shorter side to `resize`, the longer to floor(resize * long / short), as
// torchvision) + CenterCrop(size) (offsets round((resized - size) / 2), halves to even) +
// Normalize. No randomness.
class EvalTransform final : public ImageTransform {
 public:
  explicit EvalTransform(EvalTransformOptions options = {});
  Tensor operator()(const Image& img, Generator& gen) const override;
  const EvalTransformOptions& options() const { return options_; }
  int64_t resize() const { return resize_; }

 private:
  EvalTransformOptions options_;
  int64_t resize_;
};

// The whole image, normalized, at its own size (ToTensor + Normalize): CIFAR, small images.
class ToTensorTransform final : public ImageTransform {
 public:
  explicit ToTensorTransform(Normalization norm = Normalization::identity(), DType dtype = kF32)
      : norm_(norm), dtype_(dtype) {}
  Tensor operator()(const Image& img, Generator& gen) const override;

 private:
  Normalization norm_;
  DType dtype_;
};

}  // namespace trident::data
