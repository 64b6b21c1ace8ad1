// Image datasets (data/image_datasets.h): ImageNet folder discovery and bad files, CIFAR-10/100
// and IDX files written by the test (IDX plain and gzip), Fashion-MNIST when installed.
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "data/image_datasets.h"
#include "data/image_test_util.h"
#include "test_util.h"

using namespace trident;
using namespace trident::data;
using namespace trident::testing;

namespace {

namespace fs = std::filesystem;

// ---- ImageNet folder layout -----------------------------------------------------------------------

// root/<split>/<wnid>/ with PNG and JPEG images of odd and even sizes, some noise files.
void write_png(const std::string& path, int h, int w, int channels, uint64_t seed) {
  write_bytes(path, encode_png(make_pixels(h, w, channels, seed), h, w, channels));
}

TEST(ImageFolder, DiscoversClassesAndFilesInSortedOrder) {
  TempDir root;
  const fs::path train = root.path() / "train";
  // Created out of order; "n10" sorts after "n02" by bytes.
  write_png((train / "n10000000" / "b.png").string(), 20, 30, 3, 1);
  write_png((train / "n02000000" / "z.PNG").string(), 21, 17, 1, 2);
  write_png((train / "n02000000" / "a.png").string(), 40, 40, 4, 3);
  write_bytes((train / "n02000000" / "c.JPEG").string(), encode_jpeg(make_pixels(33, 28, 3, 4, true), 33, 28, 3));
  write_png((train / "n01000000" / "x.png").string(), 16, 16, 3, 5);
  write_bytes((train / "n01000000" / "README.txt").string(), {'h', 'i'});  // not an image name: ignored
  fs::create_directories(train / "n01000000" / "subfolder.png");           // a folder: ignored

  ImageFolderOptions o;
  EvalTransformOptions eo;
  eo.size = 12;
  eo.resize = 14;
  o.transform = std::make_shared<EvalTransform>(eo);
  const ImageFolderDataset ds(root.path().string(), "train", o);
  EXPECT_EQ(ds.classes(), (std::vector<std::string>{"n01000000", "n02000000", "n10000000"}));
  ASSERT_EQ(ds.size(), 5);
  const std::vector<std::pair<std::string, int64_t>> want = {
      {"n01000000/x.png", 0}, {"n02000000/a.png", 1}, {"n02000000/c.JPEG", 1}, {"n02000000/z.PNG", 1}, {"n10000000/b.png", 2}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(ds.samples()[i].path, (train / want[i].first).string());
    EXPECT_EQ(ds.samples()[i].label, want[i].second);
    Generator g(0);
    const Example ex = ds.get(static_cast<int64_t>(i), g);
    ASSERT_EQ(ex.size(), 2u);
    EXPECT_EQ(ex[0].sizes(), (Shape{3, 12, 12}));
    EXPECT_EQ(ex[0].dtype(), kF32);
    EXPECT_EQ(ex[1].dim(), 0);
    EXPECT_EQ(ex[1].dtype(), kI64);
    EXPECT_EQ(ex[1].item<int64_t>(), want[i].second);
    // The image is the transform of the decoded file.
    EXPECT_TRUE(all_close(ex[0], EvalTransform(eo)(load_image(ds.samples()[i].path), g), 0, 0));
  }
  EXPECT_EQ(ds.skipped_count(), 0);
  expect_error([&] { Generator g(0); ds.get(5, g); }, {"index 5", "[0, 5)"});

  // Any split name; the default transform is the 224 evaluation pipeline.
  write_png((root.path() / "val" / "n01000000" / "v.png").string(), 10, 12, 3, 6);
  const ImageFolderDataset val(root.path().string(), "val");
  ASSERT_EQ(val.size(), 1);
  Generator g(0);
  EXPECT_EQ(val.get(0, g)[0].sizes(), (Shape{3, 224, 224}));
}

TEST(ImageFolder, EmptyOrMissingFoldersAreErrorsNamingThem) {
  TempDir root;
  expect_error([&] { ImageFolderDataset ds(root.path().string(), "train"); }, {(root.path() / "train").string(), "not a folder"});
  fs::create_directories(root.path() / "train");
  write_bytes((root.path() / "train" / "stray.png").string(), {1, 2, 3});
  expect_error([&] { ImageFolderDataset ds(root.path().string(), "train"); },
               {"no class folders", (root.path() / "train").string()});
  fs::create_directories(root.path() / "train" / "n01");
  write_bytes((root.path() / "train" / "n01" / "notes.txt").string(), {1});
  expect_error([&] { ImageFolderDataset ds(root.path().string(), "train"); },
               {(root.path() / "train" / "n01").string(), "no image"});
}

// NOTE [Bad image files]: empty, non-image, truncated, corrupt and over-the-limit files are
// skipped with one warning each and counted, or are errors naming the file under `strict`.
TEST(ImageFolder, BadFilesAreSkippedWarnedOnceAndCounted) {
  TempDir root;
  const fs::path cls = root.path() / "train" / "n01";
  const std::vector<uint8_t> good_png = encode_png(make_pixels(20, 20, 3, 1), 20, 20, 3);
  const std::vector<uint8_t> jpg = encode_jpeg(make_pixels(30, 30, 3, 2, true), 30, 30, 3);
  write_bytes((cls / "0_good.png").string(), good_png);
  write_bytes((cls / "1_empty.JPEG").string(), {});
  const std::string text = "<html>not an image</html>";
  write_bytes((cls / "2_text.jpg").string(), std::vector<uint8_t>(text.begin(), text.end()));
  write_bytes((cls / "3_truncated.JPEG").string(), std::vector<uint8_t>(jpg.begin(), jpg.begin() + static_cast<std::ptrdiff_t>(jpg.size() / 2)));
  std::vector<uint8_t> corrupt = good_png;
  const uint8_t idat[4] = {'I', 'D', 'A', 'T'};
  auto at = std::search(corrupt.begin(), corrupt.end(), idat, idat + 4);
  at[4] = at[5] = 0xff;
  write_bytes((cls / "4_corrupt.png").string(), corrupt);
  write_bytes((cls / "5_big.png").string(), encode_png(make_pixels(60, 50, 3, 3), 60, 50, 3));  // 3000 pixels
  write_bytes((cls / "6_good.JPEG").string(), jpg);

  ImageFolderOptions o;
  EvalTransformOptions eo;
  eo.size = 8;
  eo.resize = 8;
  o.transform = std::make_shared<EvalTransform>(eo);
  o.max_pixels = 2500;
  const ImageFolderDataset ds(root.path().string(), "train", o);
  ASSERT_EQ(ds.size(), 7);
  Generator g(0);
  const Tensor good6 = ds.get(6, g)[0];

  ::testing::internal::CaptureStderr();
  // Each bad index gives the next readable example: 1..5 -> 6.
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t i = 1; i <= 5; ++i) {
      const Example ex = ds.get(i, g);
      EXPECT_TRUE(all_close(ex[0], good6, 0, 0)) << "index " << i;
    }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(ds.skipped_count(), 5);
  const std::vector<std::string> names = {"1_empty.JPEG", "2_text.jpg", "3_truncated.JPEG", "4_corrupt.png", "5_big.png"};
  for (const std::string& n : names) {
    const std::string path = (cls / n).string();
    // One warning per file, however often it is asked for.
    size_t count = 0;
    for (size_t p = err.find(path); p != std::string::npos; p = err.find(path, p + 1)) ++count;
    EXPECT_EQ(count, 1u) << n << " in:\n" << err;
  }
  EXPECT_NE(err.find("more than the limit of 2500"), std::string::npos) << err;
  std::vector<std::string> want_files;
  for (const std::string& n : names) want_files.push_back((cls / n).string());
  EXPECT_EQ(ds.skipped_files(), want_files);

  // Under strict, an error naming the file.
  o.strict = true;
  const ImageFolderDataset strict(root.path().string(), "train", o);
  for (size_t k = 0; k < names.size(); ++k) {
    expect_error([&] { strict.get(static_cast<int64_t>(k + 1), g); }, {(cls / names[k]).string()});
  }
  EXPECT_EQ(strict.skipped_count(), 0);
  EXPECT_NO_THROW(strict.get(0, g));
}

TEST(ImageFolder, SkippingWrapsAroundAndFailsWhenNothingIsReadable) {
  TempDir root;
  const fs::path cls = root.path() / "train" / "n01";
  write_bytes((cls / "a.png").string(), encode_png(make_pixels(9, 9, 3, 1), 9, 9, 3));
  write_bytes((cls / "b.png").string(), {0, 1, 2});
  ImageFolderOptions o;
  EvalTransformOptions eo;
  eo.size = 4;
  o.transform = std::make_shared<EvalTransform>(eo);
  const ImageFolderDataset ds(root.path().string(), "train", o);
  Generator g(0);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(ds.get(1, g)[1].item<int64_t>(), 0);  // b is bad: wraps to a
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(ds.skipped_count(), 1);

  TempDir bad;
  write_bytes((bad.path() / "train" / "n01" / "x.png").string(), {});
  const ImageFolderDataset none(bad.path().string(), "train", o);
  ::testing::internal::CaptureStderr();
  expect_error([&] { none.get(0, g); }, {"none of the 1 files"});
  ::testing::internal::GetCapturedStderr();
}

// ---- CIFAR -------------------------------------------------------------------------------------------

// A CIFAR record: label byte(s), then R, G, B planes of 32 x 32.
std::vector<uint8_t> cifar_record(std::vector<uint8_t> labels, uint64_t seed) {
  std::vector<uint8_t> rec = std::move(labels);
  const std::vector<uint8_t> px = make_pixels(32, 32, 3, seed);  // interleaved
  for (int c = 0; c < 3; ++c)
    for (int p = 0; p < 1024; ++p) rec.push_back(px[static_cast<size_t>(p * 3 + c)]);
  return rec;
}

TEST(Cifar, Cifar10RecordsAcrossFiles) {
  TempDir dir;
  std::vector<uint8_t> f1, f2;
  const uint8_t labels[5] = {3, 0, 9, 3, 7};
  for (int r = 0; r < 3; ++r) {
    auto rec = cifar_record({labels[r]}, static_cast<uint64_t>(r));
    f1.insert(f1.end(), rec.begin(), rec.end());
  }
  for (int r = 3; r < 5; ++r) {
    auto rec = cifar_record({labels[r]}, static_cast<uint64_t>(r));
    f2.insert(f2.end(), rec.begin(), rec.end());
  }
  write_bytes(dir.file("data_batch_1.bin"), f1);
  write_bytes(dir.file("data_batch_2.bin"), f2);
  const CifarDataset ds({dir.file("data_batch_1.bin"), dir.file("data_batch_2.bin")});
  ASSERT_EQ(ds.size(), 5);
  for (int64_t i = 0; i < 5; ++i) {
    Generator g(0);
    const Example ex = ds.get(i, g);
    EXPECT_EQ(ex[1].item<int64_t>(), labels[i]);
    ASSERT_EQ(ex[0].sizes(), (Shape{3, 32, 32}));
    // The planes, / 255, in order: [c, y, x] = plane c at y * 32 + x.
    const std::vector<uint8_t> px = make_pixels(32, 32, 3, static_cast<uint64_t>(i));
    const std::vector<float> v = ex[0].to_vector<float>();
    for (int c = 0; c < 3; ++c)
      for (int p = 0; p < 1024; ++p)
        ASSERT_FLOAT_EQ(v[static_cast<size_t>(c * 1024 + p)] * 255.f, static_cast<float>(px[static_cast<size_t>(p * 3 + c)]));
  }
  // Through the training transform.
  CifarOptions o;
  TrainTransformOptions t;
  t.size = 32;
  t.dtype = kBF16;
  o.transform = std::make_shared<TrainTransform>(t);
  const CifarDataset aug({dir.file("data_batch_1.bin")}, o);
  Generator g(1);
  const Example ex = aug.get(2, g);
  EXPECT_EQ(ex[0].sizes(), (Shape{3, 32, 32}));
  EXPECT_EQ(ex[0].dtype(), kBF16);
  EXPECT_EQ(ex[1].item<int64_t>(), 9);

  EXPECT_EQ(CifarDataset::standard_files("/d", CifarVariant::Cifar10, true).size(), 5u);
  EXPECT_EQ(CifarDataset::standard_files("/d", CifarVariant::Cifar10, false), (std::vector<std::string>{"/d/test_batch.bin"}));
  EXPECT_EQ(CifarDataset::standard_files("/d", CifarVariant::Cifar100, true), (std::vector<std::string>{"/d/train.bin"}));
}

TEST(Cifar, Cifar100FineOrCoarseLabel) {
  TempDir dir;
  std::vector<uint8_t> f;
  const uint8_t coarse[3] = {4, 19, 0}, fine[3] = {30, 99, 55};
  for (int r = 0; r < 3; ++r) {
    auto rec = cifar_record({coarse[r], fine[r]}, static_cast<uint64_t>(10 + r));
    f.insert(f.end(), rec.begin(), rec.end());
  }
  write_bytes(dir.file("train.bin"), f);
  CifarOptions o;
  o.variant = CifarVariant::Cifar100;
  const CifarDataset by_fine({dir.file("train.bin")}, o);  // fine is the default
  o.label = CifarLabel::Coarse;
  const CifarDataset by_coarse({dir.file("train.bin")}, o);
  ASSERT_EQ(by_fine.size(), 3);
  for (int64_t i = 0; i < 3; ++i) {
    Generator g(0);
    EXPECT_EQ(by_fine.get(i, g)[1].item<int64_t>(), fine[i]);
    EXPECT_EQ(by_coarse.get(i, g)[1].item<int64_t>(), coarse[i]);
    const std::vector<uint8_t> px = make_pixels(32, 32, 3, static_cast<uint64_t>(10 + i));
    EXPECT_EQ(by_fine.image(i).pixels.to_vector(), px);  // the record's image after both label bytes
  }
}

TEST(Cifar, BadFilesAreErrorsNamingThem) {
  TempDir dir;
  std::vector<uint8_t> two = cifar_record({1}, 1);
  auto r2 = cifar_record({2}, 2);
  two.insert(two.end(), r2.begin(), r2.end());
  std::vector<uint8_t> ragged = two;
  ragged.resize(ragged.size() + 5);
  write_bytes(dir.file("ragged.bin"), ragged);
  expect_error([&] { CifarDataset ds({dir.file("ragged.bin")}); },
               {dir.file("ragged.bin"), "6151 bytes", "not a multiple", "3073"});
  write_bytes(dir.file("two.bin"), two);  // 6146 bytes: two CIFAR-10 records, not CIFAR-100 ones
  CifarOptions c100;
  c100.variant = CifarVariant::Cifar100;
  expect_error([&] { CifarDataset ds({dir.file("two.bin")}, c100); }, {dir.file("two.bin"), "6146 bytes", "3074"});
  write_bytes(dir.file("empty.bin"), {});
  expect_error([&] { CifarDataset ds({dir.file("empty.bin")}); }, {dir.file("empty.bin"), "empty"});
  expect_error([&] { CifarDataset ds({dir.file("none.bin")}); }, {"cannot open", dir.file("none.bin")});
  write_bytes(dir.file("label.bin"), cifar_record({10}, 3));
  expect_error([&] { CifarDataset ds({dir.file("label.bin")}); }, {dir.file("label.bin"), "record 0", "label 10"});
  expect_error([&] { CifarDataset ds(std::vector<std::string>{}); }, {"no files"});
}

// ---- IDX ---------------------------------------------------------------------------------------------

std::vector<uint8_t> be32(uint32_t v) {
  return {static_cast<uint8_t>(v >> 24), static_cast<uint8_t>(v >> 16), static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v)};
}

// An IDX file: magic, dims, data.
std::vector<uint8_t> idx_file(uint32_t magic, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> f = be32(magic);
  for (uint32_t d : dims) {
    auto b = be32(d);
    f.insert(f.end(), b.begin(), b.end());
  }
  f.insert(f.end(), data.begin(), data.end());
  return f;
}

TEST(Idx, PlainAndGzipFilesReadTheSame) {
  TempDir dir;
  const int n = 7, rows = 5, cols = 4;
  const std::vector<uint8_t> px = make_pixels(n * rows, cols, 1, 4);
  const std::vector<uint8_t> labels = {0, 9, 3, 3, 1, 7, 255};
  const std::vector<uint8_t> images_file = idx_file(0x803, {n, rows, cols}, px);
  const std::vector<uint8_t> labels_file = idx_file(0x801, {n}, labels);
  write_bytes(dir.file("images"), images_file);
  write_bytes(dir.file("labels"), labels_file);
  write_bytes(dir.file("images.gz"), gzip(images_file));
  write_bytes(dir.file("labels.gz"), gzip(labels_file));
  ASSERT_NE(read_bytes(dir.file("images.gz")), images_file);  // really compressed

  const IdxArray a = read_idx(dir.file("images.gz"), 3);
  EXPECT_EQ(a.dims, (std::vector<int64_t>{n, rows, cols}));
  EXPECT_EQ(a.data, px);

  for (const auto& [img, lab] : std::vector<std::pair<std::string, std::string>>{{"images", "labels"}, {"images.gz", "labels.gz"}}) {
    SCOPED_TRACE(img);
    const IdxDataset ds(dir.file(img), dir.file(lab));
    ASSERT_EQ(ds.size(), n);
    EXPECT_EQ(ds.rows(), rows);
    EXPECT_EQ(ds.cols(), cols);
    IdxOptions raw;
    raw.dtype = kU8;
    const IdxDataset ds_u8(dir.file(img), dir.file(lab), raw);
    IdxOptions normed;
    normed.mean = 0.2860f;
    normed.std = 0.3530f;
    const IdxDataset ds_norm(dir.file(img), dir.file(lab), normed);
    for (int64_t i = 0; i < n; ++i) {
      Generator g(0);
      const Example ex = ds.get(i, g);
      EXPECT_EQ(ex[1].item<int64_t>(), labels[static_cast<size_t>(i)]);
      ASSERT_EQ(ex[0].sizes(), (Shape{1, rows, cols}));
      const std::vector<float> v = ex[0].to_vector<float>();
      const std::vector<float> vn = ds_norm.get(i, g)[0].to_vector<float>();
      const Tensor u = ds_u8.get(i, g)[0];
      ASSERT_EQ(u.dtype(), kU8);
      const uint8_t* up = u.data<uint8_t>();
      for (int k = 0; k < rows * cols; ++k) {
        const uint8_t p = px[static_cast<size_t>(i * rows * cols + k)];
        ASSERT_FLOAT_EQ(v[static_cast<size_t>(k)] * 255.f, static_cast<float>(p));
        ASSERT_NEAR(vn[static_cast<size_t>(k)], (p / 255.0 - 0.2860) / 0.3530, 1e-5);
        ASSERT_EQ(up[k], p);
      }
    }
  }
}

TEST(Idx, InconsistentFilesAreErrorsNamingThem) {
  TempDir dir;
  const std::vector<uint8_t> px = make_pixels(6 * 3, 3, 1, 1);
  write_bytes(dir.file("images"), idx_file(0x803, {6, 3, 3}, px));
  write_bytes(dir.file("labels5"), idx_file(0x801, {5}, {1, 2, 3, 4, 5}));
  expect_error([&] { IdxDataset ds(dir.file("images"), dir.file("labels5")); },
               {dir.file("images"), "6 images", dir.file("labels5"), "5 labels"});
  // Dims that disagree with the byte count, short and long.
  std::vector<uint8_t> short_px(px.begin(), px.end() - 1);
  write_bytes(dir.file("short"), idx_file(0x803, {6, 3, 3}, short_px));
  expect_error([&] { read_idx(dir.file("short"), 3); }, {dir.file("short"), "[6, 3, 3]", "54 data bytes", "has 53"});
  std::vector<uint8_t> long_px = px;
  long_px.push_back(0);
  write_bytes(dir.file("long.gz"), gzip(idx_file(0x803, {6, 3, 3}, long_px)));
  expect_error([&] { read_idx(dir.file("long.gz"), 3); }, {dir.file("long.gz"), "54 data bytes", "has 55"});
  write_bytes(dir.file("labels6"), idx_file(0x801, {6}, {1, 2, 3, 4, 5, 6}));
  // Images and labels swapped: the magic names the kind.
  expect_error([&] { IdxDataset ds(dir.file("labels6"), dir.file("images")); }, {dir.file("labels6"), "magic 0x801", "0x803"});
  write_bytes(dir.file("tiny"), {0, 0, 8});
  expect_error([&] { read_idx(dir.file("tiny"), 1); }, {dir.file("tiny"), "3 bytes"});
  write_bytes(dir.file("nodims"), {0, 0, 8, 3, 0, 0});
  expect_error([&] { read_idx(dir.file("nodims"), 3); }, {dir.file("nodims"), "too few for the 3 dims"});
  // A truncated and a corrupt gzip stream.
  const std::vector<uint8_t> gz = gzip(idx_file(0x803, {6, 3, 3}, px));
  write_bytes(dir.file("cut.gz"), std::vector<uint8_t>(gz.begin(), gz.end() - 12));
  expect_error([&] { read_idx(dir.file("cut.gz"), 3); }, {dir.file("cut.gz"), "truncated"});
  std::vector<uint8_t> bad = gz;
  for (size_t i = 12; i < 20 && i < bad.size(); ++i) bad[i] ^= 0xa5;
  write_bytes(dir.file("bad.gz"), bad);
  expect_error([&] { read_idx(dir.file("bad.gz"), 3); }, {dir.file("bad.gz")});
  expect_error([&] { read_idx(dir.file("absent.gz"), 3); }, {"cannot open", dir.file("absent.gz")});
}

// The Debian package dataset-fashion-mnist (scripts/setup.sh installs it).
TEST(Idx, FashionMnistWhenInstalled) {
  const fs::path dir = "/usr/share/datasets/fashion-mnist";
  const std::string names[4] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                                "t10k-labels-idx1-ubyte.gz"};
  for (const std::string& n : names)
    if (!fs::exists(dir / n))
      GTEST_SKIP() << (dir / n).string() << " not found: install the Debian package dataset-fashion-mnist (scripts/setup.sh)";
  const IdxDataset train((dir / names[0]).string(), (dir / names[1]).string());
  const IdxDataset test((dir / names[2]).string(), (dir / names[3]).string());
  EXPECT_EQ(train.size(), 60000);
  EXPECT_EQ(test.size(), 10000);
  EXPECT_EQ(train.rows(), 28);
  EXPECT_EQ(train.cols(), 28);
  EXPECT_EQ(train.label(0), 9);  // the first training example is an ankle boot (class 9)
  // Ten classes, balanced: 6000 per class in training, 1000 in test (Fashion-MNIST's README).
  for (const auto& [ds, per_class] : {std::pair<const IdxDataset*, int64_t>{&train, 6000}, {&test, 1000}}) {
    std::vector<int64_t> counts(10, 0);
    for (int64_t i = 0; i < ds->size(); ++i) {
      const int64_t l = ds->label(i);
      ASSERT_TRUE(l >= 0 && l < 10) << "label " << l << " at " << i;
      ++counts[static_cast<size_t>(l)];
    }
    for (int64_t c : counts) EXPECT_EQ(c, per_class);
  }
  Generator g(0);
  const Example ex = train.get(0, g);
  EXPECT_EQ(ex[0].sizes(), (Shape{1, 28, 28}));
  const std::vector<float> v = ex[0].to_vector<float>();
  EXPECT_GE(*std::min_element(v.begin(), v.end()), 0.f);
  EXPECT_LE(*std::max_element(v.begin(), v.end()), 1.f);
  EXPECT_GT(*std::max_element(v.begin(), v.end()), 0.5f);  // not a blank image
}

}  // namespace
