#include "data/image_datasets.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>

#include "core/factory.h"

namespace trident::data {

namespace fs = std::filesystem;

namespace {

bool has_extension(const fs::path& p, const std::vector<std::string>& extensions) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (std::string e : extensions) {
    std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (ext == e) return true;
  }
  return false;
}

Tensor label_tensor(int64_t label) { return scalar_tensor(static_cast<double>(label), kI64); }

}  // namespace

// ---- ImageNet folder layout --------------------------------------------------------------------

ImageFolderDataset::ImageFolderDataset(const std::string& root, const std::string& split, ImageFolderOptions options)
    : options_(std::move(options)) {
  if (!options_.transform) options_.transform = std::make_shared<EvalTransform>();
  TRIDENT_CHECK(options_.max_pixels > 0, "ImageFolderDataset: max_pixels must be positive, got ", options_.max_pixels);
  const fs::path dir = fs::path(root) / split;
  std::error_code ec;
  TRIDENT_CHECK(fs::is_directory(dir, ec), "ImageFolderDataset: ", dir.string(), " is not a folder (expected ",
                "<root>/<split>/<class>/<images>)");
  try {
    for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
      if (e.is_directory()) classes_.push_back(e.path().filename().string());
    }
    TRIDENT_CHECK(!classes_.empty(), "ImageFolderDataset: no class folders in ", dir.string());
    std::sort(classes_.begin(), classes_.end());
    for (size_t c = 0; c < classes_.size(); ++c) {
      const fs::path class_dir = dir / classes_[c];
      std::vector<std::string> files;
      for (const fs::directory_entry& e : fs::directory_iterator(class_dir)) {
        if (!e.is_directory() && has_extension(e.path(), options_.extensions)) files.push_back(e.path().string());
      }
      TRIDENT_CHECK(!files.empty(), "ImageFolderDataset: class folder ", class_dir.string(),
                    " holds no image (no file ending in one of ", options_.extensions, ")");
      std::sort(files.begin(), files.end());
      for (std::string& f : files) samples_.push_back({std::move(f), static_cast<int64_t>(c)});
    }
  } catch (const fs::filesystem_error& e) {  // unreadable folder, permissions
    TRIDENT_FAIL("ImageFolderDataset: cannot list ", e.path1().string(), ": ", e.code().message());
  }
}

Example ImageFolderDataset::get(int64_t index, Generator& gen) const {
  const int64_t n = size();
  TRIDENT_CHECK(index >= 0 && index < n, "ImageFolderDataset: index ", index, " out of range [0, ", n, ")");
  // NOTE [Bad image files]: a bad file gives way to the next readable one.
  for (int64_t k = 0; k < n; ++k) {
    const Sample& s = samples_[static_cast<size_t>((index + k) % n)];
    {
      std::lock_guard<std::mutex> lock(skipped_mu_);
      if (skipped_set_.count(s.path)) continue;
    }
    Image img;
    try {
      img = load_image(s.path, options_.max_pixels);
    } catch (const Error& e) {
      if (options_.strict) throw;
      std::lock_guard<std::mutex> lock(skipped_mu_);
      if (skipped_set_.insert(s.path).second) {
        skipped_.push_back(s.path);
        // The message names the file.
        std::cerr << "trident: warning: ImageFolderDataset skips a bad file: " << e.message() << "\n";
      }
      continue;
    }
    return {(*options_.transform)(img, gen), label_tensor(s.label)};
  }
  TRIDENT_FAIL("ImageFolderDataset: none of the ", n, " files is a readable image (every one was skipped)");
}

int64_t ImageFolderDataset::skipped_count() const {
  std::lock_guard<std::mutex> lock(skipped_mu_);
  return static_cast<int64_t>(skipped_.size());
}

std::vector<std::string> ImageFolderDataset::skipped_files() const {
  std::lock_guard<std::mutex> lock(skipped_mu_);
  return skipped_;
}

// ---- CIFAR ---------------------------------------------------------------------------------------

CifarDataset::CifarDataset(const std::vector<std::string>& files, CifarOptions options) : options_(std::move(options)) {
  if (!options_.transform) options_.transform = std::make_shared<ToTensorTransform>();
  const bool c100 = options_.variant == CifarVariant::Cifar100;
  const int64_t label_bytes = c100 ? 2 : 1;
  record_ = label_bytes + kPixels;
  TRIDENT_CHECK(!files.empty(), "CifarDataset: no files given");
  for (const std::string& f : files) {
    std::vector<uint8_t> bytes = read_file(f);
    const int64_t size = static_cast<int64_t>(bytes.size());
    TRIDENT_CHECK(size > 0, "CifarDataset: ", f, " is empty");
    TRIDENT_CHECK(size % record_ == 0, "CifarDataset: ", f, " has ", size, " bytes, not a multiple of the ",
                  c100 ? "CIFAR-100" : "CIFAR-10", " record size ", record_, " (", label_bytes, " label byte",
                  label_bytes > 1 ? "s" : "", " + 3072 pixel bytes)");
    for (int64_t r = 0; r < size / record_; ++r) {
      const uint8_t* rec = bytes.data() + r * record_;
      if (c100) {
        TRIDENT_CHECK(rec[0] < 20 && rec[1] < 100, "CifarDataset: ", f, " record ", r, " has coarse label ",
                      int{rec[0]}, " and fine label ", int{rec[1]}, " (CIFAR-100 has 20 and 100)");
      } else {
        TRIDENT_CHECK(rec[0] < 10, "CifarDataset: ", f, " record ", r, " has label ", int{rec[0]},
                      " (CIFAR-10 has 10 classes; is it a CIFAR-100 file?)");
      }
    }
    data_.insert(data_.end(), bytes.begin(), bytes.end());
  }
  count_ = static_cast<int64_t>(data_.size()) / record_;
}

std::vector<std::string> CifarDataset::standard_files(const std::string& folder, CifarVariant variant, bool train) {
  const fs::path dir(folder);
  std::vector<std::string> files;
  if (variant == CifarVariant::Cifar10) {
    if (train) {
      for (int i = 1; i <= 5; ++i) files.push_back((dir / ("data_batch_" + std::to_string(i) + ".bin")).string());
    } else {
      files.push_back((dir / "test_batch.bin").string());
    }
  } else {
    files.push_back((dir / (train ? "train.bin" : "test.bin")).string());
  }
  return files;
}

Image CifarDataset::image(int64_t index) const {
  TRIDENT_CHECK(index >= 0 && index < count_, "CifarDataset: index ", index, " out of range [0, ", count_, ")");
  const uint8_t* planes = data_.data() + index * record_ + (record_ - kPixels);
  Image img(32, 32);
  for (int64_t p = 0; p < 32 * 32; ++p)
    for (int64_t c = 0; c < 3; ++c) img.pixels[static_cast<size_t>(p * 3 + c)] = planes[c * 1024 + p];
  return img;
}

int64_t CifarDataset::label(int64_t index) const {
  TRIDENT_CHECK(index >= 0 && index < count_, "CifarDataset: index ", index, " out of range [0, ", count_, ")");
  const uint8_t* rec = data_.data() + index * record_;
  if (options_.variant == CifarVariant::Cifar10) return rec[0];
  return options_.label == CifarLabel::Coarse ? rec[0] : rec[1];
}

Example CifarDataset::get(int64_t index, Generator& gen) const {
  return {(*options_.transform)(image(index), gen), label_tensor(label(index))};
}

// ---- IDX -----------------------------------------------------------------------------------------

namespace {

// Inflates a gzip stream (all its members, as gunzip does).
std::vector<uint8_t> gunzip(const std::vector<uint8_t>& in, const std::string& path) {
  std::vector<uint8_t> out;
  // The last four bytes hold the uncompressed size mod 2^32: a good first guess, believed only
  // up to deflate's best ratio (1032:1), so a damaged file cannot ask for gigabytes.
  size_t guess = in.size() * 4;
  if (in.size() >= 18) {
    const uint8_t* t = in.data() + in.size() - 4;
    const size_t isize = uint32_t{t[0]} | (uint32_t{t[1]} << 8) | (uint32_t{t[2]} << 16) | (uint32_t{t[3]} << 24);
    if (isize <= in.size() * 1032) guess = std::max(guess, isize);
  }
  out.resize(std::max<size_t>(guess, 1024));
  z_stream zs{};
  TRIDENT_CHECK(inflateInit2(&zs, 15 + 16) == Z_OK, "read_idx: ", path, ": cannot start zlib");
  zs.next_in = const_cast<Bytef*>(in.data());
  size_t used = 0, consumed = 0;
  int rc = Z_OK;
  for (;;) {
    if (used == out.size()) out.resize(out.size() * 2);
    const size_t in_chunk = std::min<size_t>(in.size() - consumed, 1u << 30);
    const size_t out_chunk = std::min<size_t>(out.size() - used, 1u << 30);
    zs.next_in = const_cast<Bytef*>(in.data() + consumed);
    zs.avail_in = static_cast<uInt>(in_chunk);
    zs.next_out = out.data() + used;
    zs.avail_out = static_cast<uInt>(out_chunk);
    rc = inflate(&zs, Z_NO_FLUSH);
    consumed += in_chunk - zs.avail_in;
    used += out_chunk - zs.avail_out;
    if (rc == Z_STREAM_END) {
      if (consumed == in.size()) break;
      inflateReset(&zs);  // another gzip member follows
      continue;
    }
    if (rc == Z_BUF_ERROR && zs.avail_out != 0 && consumed == in.size()) {
      inflateEnd(&zs);
      TRIDENT_FAIL("read_idx: ", path, ": the gzip stream is truncated (ends after ", in.size(),
                   " compressed bytes, ", used, " inflated)");
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      const std::string why = zs.msg ? zs.msg : "zlib error " + std::to_string(rc);
      inflateEnd(&zs);
      TRIDENT_FAIL("read_idx: ", path, ": corrupt gzip stream (", why, ")");
    }
  }
  inflateEnd(&zs);
  out.resize(used);
  return out;
}

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

IdxArray read_idx(const std::string& path, int expected_dims) {
  std::vector<uint8_t> bytes = read_file(path);
  if (bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b) bytes = gunzip(bytes, path);
  const uint32_t expected_magic = 0x800u | static_cast<uint32_t>(expected_dims);
  TRIDENT_CHECK(bytes.size() >= 4, "read_idx: ", path, " has ", bytes.size(), " bytes, too few for an IDX header");
  const uint32_t magic = big_endian_u32(bytes.data());
  TRIDENT_CHECK(magic == expected_magic, "read_idx: ", path, ": magic 0x", std::hex, magic, " but expected 0x",
                expected_magic, std::dec, " (u8 data, ", expected_dims, " dims)");
  const size_t header = 4 + 4 * static_cast<size_t>(expected_dims);
  TRIDENT_CHECK(bytes.size() >= header, "read_idx: ", path, " has ", bytes.size(), " bytes, too few for the ",
                expected_dims, " dims of its header");
  IdxArray a;
  unsigned __int128 expected = 1;  // three u32 dims cannot overflow it
  for (int d = 0; d < expected_dims; ++d) {
    a.dims.push_back(big_endian_u32(bytes.data() + 4 + 4 * d));
    expected *= static_cast<uint64_t>(a.dims.back());
  }
  const size_t have = bytes.size() - header;
  TRIDENT_CHECK(expected == have, "read_idx: ", path, ": the header's dims ", a.dims, " need ",
                expected <= std::numeric_limits<uint64_t>::max() ? std::to_string(static_cast<uint64_t>(expected))
                                                                   : std::string("more than 2^64"),
                " data bytes but the file has ", have);
  a.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return a;
}

IdxDataset::IdxDataset(const std::string& images_path, const std::string& labels_path, IdxOptions options)
    : options_(options) {
  TRIDENT_CHECK(options_.dtype == kF32 || options_.dtype == kBF16 || options_.dtype == kU8,
                "IdxDataset: dtype must be f32, bf16 or u8, got ", options_.dtype);
  TRIDENT_CHECK(options_.std != 0.f, "IdxDataset: std is 0");
  IdxArray images = read_idx(images_path, 3);
  IdxArray labels = read_idx(labels_path, 1);
  TRIDENT_CHECK(images.dims[0] == labels.dims[0], "IdxDataset: ", images_path, " holds ", images.dims[0],
                " images but ", labels_path, " holds ", labels.dims[0], " labels");
  count_ = images.dims[0];
  rows_ = images.dims[1];
  cols_ = images.dims[2];
  images_ = std::move(images.data);
  labels_ = std::move(labels.data);
}

int64_t IdxDataset::label(int64_t index) const {
  TRIDENT_CHECK(index >= 0 && index < count_, "IdxDataset: index ", index, " out of range [0, ", count_, ")");
  return labels_[static_cast<size_t>(index)];
}

Example IdxDataset::get(int64_t index, Generator& /*gen*/) const {
  const int64_t lab = label(index);
  const int64_t n = rows_ * cols_;
  const uint8_t* src = images_.data() + index * n;
  Tensor img = empty({1, rows_, cols_}, options_.dtype);
  if (options_.dtype == kU8) {
    std::memcpy(img.data<uint8_t>(), src, static_cast<size_t>(n));
  } else {
    const float scale = 1.f / (255.f * options_.std), shift = -options_.mean / options_.std;
    if (options_.dtype == kF32) {
      float* dst = img.data<float>();
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]) * scale + shift;
    } else {
      BFloat16* dst = img.data<BFloat16>();
      for (int64_t i = 0; i < n; ++i) dst[i] = BFloat16(static_cast<float>(src[i]) * scale + shift);
    }
  }
  return {img, label_tensor(lab)};
}

}  // namespace trident::data
