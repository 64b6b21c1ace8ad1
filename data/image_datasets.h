// Image datasets: the ImageNet folder layout, CIFAR-10/100 binaries and IDX files (MNIST,
// Fashion-MNIST). Every example is {image, label}: the image a [C, H, W] tensor, the label an
// i64 scalar (shape []).
//
// NOTE [Bad image files]: the folder dataset decodes lazily, in Dataset::get, so a file can turn
// out empty, truncated, corrupt, not an image, or over the pixel limit only there. By default
// such a file is skipped: a warning naming it goes to stderr (once per file), it is counted
// (skipped_count(), skipped_files()), and get() returns the next readable example in index
// order instead (wrapping around), so a batch stays full and the result still depends only on
// the files, not on thread timing. Under `strict` get() throws an Error naming the file. The
// in-memory formats (CIFAR, IDX) are checked whole when opened and a bad file is always an
// error naming it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/image.h"
#include "data/transforms.h"

namespace trident::data {

// ---- ImageNet folder layout --------------------------------------------------------------------

struct ImageFolderOptions {
  // Image -> tensor. Null means EvalTransform() (resize 256, centre crop 224, ImageNet
  // normalization, f32); training passes a TrainTransform.
  std::shared_ptr<const ImageTransform> transform;
  int64_t max_pixels = kDefaultMaxPixels;
  bool strict = false;  // a bad file is an Error instead of a skip (NOTE [Bad image files])
  // File name endings that count as images (compared without regard to case); other files are
  // ignored, as torchvision's ImageFolder does.
  std::vector<std::string> extensions{".jpeg", ".jpg", ".png", ".bmp", ".gif", ".ppm", ".pgm", ".pnm"};
};

// root/<split>/<class>/<image>, e.g. imagenet/train/n01440764/n01440764_10026.JPEG. Classes
// are the sub-folders of root/<split>, sorted by name (byte order, so ImageNet's wnids give the
// standard 0..999 labels); the images of each class are sorted by name. Any split name works
// ("train", "val", ...). Errors, naming the folder: root/<split> missing or not a folder, no
// class folders in it, a class folder with no image, no image at all.
// Example: {image [3, S, S] (the transform's size and dtype), label i64 []}.
class ImageFolderDataset final : public Dataset {
 public:
  struct Sample {
    std::string path;
    int64_t label;
  };

  ImageFolderDataset(const std::string& root, const std::string& split, ImageFolderOptions options = {});
  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  Example get(int64_t index, Generator& gen) const override;

  const std::vector<std::string>& classes() const { return classes_; }
  const std::vector<Sample>& samples() const { return samples_; }
  // Distinct files skipped so far (NOTE [Bad image files]), in the order they were met.
  int64_t skipped_count() const;
  std::vector<std::string> skipped_files() const;

 private:
  ImageFolderOptions options_;
  std::vector<std::string> classes_;
  std::vector<Sample> samples_;
  mutable std::mutex skipped_mu_;
  mutable std::set<std::string> skipped_set_;
  mutable std::vector<std::string> skipped_;
};

// ---- CIFAR ---------------------------------------------------------------------------------------

enum class CifarVariant { Cifar10, Cifar100 };
enum class CifarLabel { Fine, Coarse };  // CIFAR-100 only; CIFAR-10 has one label

struct CifarOptions {
  CifarVariant variant = CifarVariant::Cifar10;
  CifarLabel label = CifarLabel::Fine;
  // Image (32 x 32 RGB) -> tensor. Null means ToTensorTransform(identity normalization): the
  // pixels / 255 as [3, 32, 32] f32.
  std::shared_ptr<const ImageTransform> transform;
};

// CIFAR binary files: records of the label byte(s) (CIFAR-10: the class; CIFAR-100: coarse
// then fine) and 3072 pixel bytes, the R, G and B planes of a 32 x 32 image, rows top to
// bottom. Every file is read into memory when opened. Errors, naming the file: it cannot be
// read, it is empty, its size is not a multiple of the record size (3073 or 3074 bytes), a label
// is out of range (10 classes; 20 coarse, 100 fine). Example: {image, label i64 []}.
class CifarDataset final : public Dataset {
 public:
  CifarDataset(const std::vector<std::string>& files, CifarOptions options = {});
  int64_t size() const override { return count_; }
  Example get(int64_t index, Generator& gen) const override;

  // The standard files under the extracted folder: CIFAR-10 data_batch_1..5.bin / test_batch.bin
  // (cifar-10-batches-bin), CIFAR-100 train.bin / test.bin (cifar-100-binary).
  static std::vector<std::string> standard_files(const std::string& folder, CifarVariant variant, bool train);
  static constexpr int64_t kPixels = 3 * 32 * 32;
  // The 32 x 32 image of record `index`, interleaved (data/image.h layout).
  Image image(int64_t index) const;
  int64_t label(int64_t index) const;

 private:
  CifarOptions options_;
  int64_t record_ = 0;
  int64_t count_ = 0;
  std::vector<uint8_t> data_;  // every record of every file, back to back
};

// ---- IDX (MNIST, Fashion-MNIST) ------------------------------------------------------------------

// An IDX file: big-endian magic (two zero bytes, the element type, the number of dims), the
// dims as big-endian u32, then the data. Only u8 elements (type 0x08) are read.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

// Reads an IDX file, plain or gzip-compressed (recognized by its first two bytes, 1f 8b, and
// inflated with zlib). `expected_dims` is 3 for images (magic 0x00000803) and 1 for labels
// (0x00000801). Errors name the file: unreadable or truncated gzip stream, wrong magic, data
// size not the product of the dims.
IdxArray read_idx(const std::string& path, int expected_dims);

struct IdxOptions {
  // f32 or bf16: pixels / 255 (then (x - mean) / std); u8: the raw bytes (mean and std unused).
  DType dtype = kF32;
  float mean = 0.f;  // MNIST's usual 0.1307 and 0.3081; Fashion-MNIST's 0.2860 and 0.3530
  float std = 1.f;
};

// An images file and a labels file (e.g. train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz).
// Errors, naming the files: either read_idx error, or different image and label counts.
// Example: {image [1, rows, cols], label i64 []}.
class IdxDataset final : public Dataset {
 public:
  IdxDataset(const std::string& images_path, const std::string& labels_path, IdxOptions options = {});
  int64_t size() const override { return count_; }
  Example get(int64_t index, Generator& gen) const override;
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t label(int64_t index) const;

 private:
  IdxOptions options_;
  int64_t count_ = 0, rows_ = 0, cols_ = 0;
  std::vector<uint8_t> images_;
  std::vector<uint8_t> labels_;
};

}  // namespace trident::data
