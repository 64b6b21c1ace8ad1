// Transforms (data/transforms.h): the fused resample/crop/flip/normalize kernel against a
// direct double-precision reference and against PyTorch, torchvision's crop parameters, and
// the training and evaluation pipelines on decoded JPEG and PNG files.
#include <cmath>

#include "data/image_test_util.h"
#include "data/transforms.h"
#include "test_util.h"

using namespace trident;
using namespace trident::data;
using namespace trident::testing;

namespace {

// |got - want| <= atol everywhere (values are normalized pixels, at most a few units).
::testing::AssertionResult near(const Tensor& got, const std::vector<double>& want, double atol) {
  const std::vector<double> g = got.to_vector<double>();
  if (g.size() != want.size()) return ::testing::AssertionFailure() << g.size() << " values, expected " << want.size();
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::fabs(g[i] - want[i]) <= atol))
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << want[i];
  return ::testing::AssertionSuccess();
}

Image grey_image(const std::vector<std::vector<double>>& rows) {
  Image img(static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size()));
  size_t i = 0;
  for (const auto& r : rows)
    for (double v : r)
      for (int c = 0; c < 3; ++c) img.pixels[i++] = static_cast<uint8_t>(v);
  return img;
}

Image random_image(int h, int w, uint64_t seed) { return to_rgb(make_pixels(h, w, 3, seed), h, w, 3); }

// The identity normalization scaled back by 255 gives resampled pixel values.
std::vector<double> times255(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  for (double& x : v) x *= 255.0;
  return v;
}

// PyTorch 1.13 produced these: torch.nn.functional.interpolate(x, size, mode="bilinear",
// align_corners=False, antialias=True) on the 5 x 6 and 2 x 2 images below.
TEST(Resample, MatchesPyTorchAntialiasedBilinear) {
  const Image img = grey_image({{10, 20, 40, 80, 160, 250},
                                {0, 5, 15, 35, 75, 155},
                                {255, 200, 150, 100, 50, 0},
                                {1, 2, 3, 4, 5, 6},
                                {9, 8, 7, 6, 5, 4}});
  const Normalization id = Normalization::identity();
  const CropBox all{0, 0, 5, 6};
  const std::vector<double> to_2x3 = {56.9285774230957, 61.80682373046875, 110.2727279663086,
                                      52.72077560424805, 33.21590805053711, 16.487010955810547};
  const std::vector<double> to_3x4 = {8.660715103149414,  27.539684295654297, 78.17460632324219, 177.14285278320312,
                                      130.93055725097656, 93.20989227294922,  60.567893981933594, 39.4444465637207,
                                      5.517856597900391,  5.317460060119629,  5.111110210418701,  4.910714149475098};
  const std::vector<double> up = {0.0,  10.000001907348633, 50.0,  90.0,  100.0, 100.0,  97.5, 87.5,
                                  77.5, 75.0,               200.0, 185.0, 125.0, 65.0,   50.0};
  for (int c = 0; c < 3; ++c) {
    SCOPED_TRACE(detail::str("channel ", c));
    std::vector<double> a = times255(resample_to_tensor(img, all, 2, 3, 0, 0, 2, 3, false, id, kF32));
    std::vector<double> b = times255(resample_to_tensor(img, all, 3, 4, 0, 0, 3, 4, false, id, kF32));
    for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(a[c * 6 + i], to_2x3[i], 1e-3) << i;
    for (size_t i = 0; i < 12; ++i) EXPECT_NEAR(b[c * 12 + i], to_3x4[i], 1e-3) << i;
  }
  // Enlarging is plain bilinear with half-pixel centres (the same numbers without antialias).
  const Image small = grey_image({{0, 100}, {200, 50}});
  std::vector<double> u = times255(resample_to_tensor(small, {0, 0, 2, 2}, 3, 5, 0, 0, 3, 5, false, id, kF32));
  for (size_t i = 0; i < 15; ++i) EXPECT_NEAR(u[i], up[i], 1e-3) << i;
}

// Same size, no flip: the crop's pixels, exactly, as (v / 255 - mean) / std.
TEST(Resample, IdentitySizeIsAnExactCropAndNormalize) {
  const Image img = random_image(31, 44, 9);
  const Normalization norm;  // ImageNet's
  const CropBox box{3, 5, 17, 26};
  const Tensor t = resample_to_tensor(img, box, 17, 26, 0, 0, 17, 26, false, norm, kF32);
  ASSERT_EQ(t.sizes(), (Shape{3, 17, 26}));
  const std::vector<float> v = t.to_vector<float>();
  for (int c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 17; ++y)
      for (int64_t x = 0; x < 26; ++x) {
        const double want = (img.at(3 + y, 5 + x, c) / 255.0 - norm.mean[c]) / norm.std[c];
        ASSERT_NEAR(v[static_cast<size_t>((c * 17 + y) * 26 + x)], want, 2e-6) << c << " " << y << " " << x;
      }
}

TEST(Resample, FlipMirrorsColumns) {
  const Image img = random_image(12, 9, 4);
  const Normalization id = Normalization::identity();
  const Tensor t = resample_to_tensor(img, {2, 1, 10, 7}, 10, 7, 0, 0, 10, 7, true, id, kF32);
  const std::vector<float> v = t.to_vector<float>();
  for (int c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 10; ++y)
      for (int64_t x = 0; x < 7; ++x)
        ASSERT_FLOAT_EQ(v[static_cast<size_t>((c * 10 + y) * 7 + x)] * 255.f,
                        static_cast<float>(img.at(2 + y, 1 + (6 - x), c)));
}

// The fused kernel against the direct double-precision reference: shrinking and enlarging,
// odd and even sizes, crop boxes, output windows, flips, ImageNet normalization.
TEST(Resample, MatchesDirectReference) {
  struct Case {
    int h, w;
    CropBox box;
    int64_t rh, rw, top, left, oh, ow;
    bool flip;
  };
  const Case cases[] = {
      {37, 23, {0, 0, 37, 23}, 16, 16, 0, 0, 16, 16, false},  // shrink, non-integer factors
      {37, 23, {0, 0, 37, 23}, 16, 16, 0, 0, 16, 16, true},
      {40, 60, {4, 10, 30, 41}, 15, 20, 0, 0, 15, 20, false},  // shrink by 2, by 2.05
      {24, 18, {1, 2, 21, 13}, 50, 31, 0, 0, 50, 31, true},   // enlarge
      {50, 33, {0, 0, 50, 33}, 45, 30, 7, 3, 24, 24, false},   // a window of the resized image
      {29, 52, {5, 11, 20, 35}, 9, 70, 2, 20, 6, 41, true},    // shrink one axis, enlarge the other
      {1, 1, {0, 0, 1, 1}, 5, 4, 0, 0, 5, 4, false},           // one pixel everywhere
      {33, 1, {0, 0, 33, 1}, 7, 3, 0, 0, 7, 3, true},
  };
  const Normalization norm;
  for (const Case& k : cases) {
    SCOPED_TRACE(detail::str(k.h, " x ", k.w, " box ", k.box.height, " x ", k.box.width, " -> ", k.rh, " x ", k.rw,
                             " window ", k.oh, " x ", k.ow, k.flip ? " flipped" : ""));
    const Image img = random_image(k.h, k.w, static_cast<uint64_t>(k.h * 100 + k.w));
    const Tensor got = resample_to_tensor(img, k.box, k.rh, k.rw, k.top, k.left, k.oh, k.ow, k.flip, norm, kF32);
    ASSERT_EQ(got.sizes(), (Shape{3, k.oh, k.ow}));
    ASSERT_EQ(got.dtype(), kF32);
    // f32 sums of a few dozen terms of normalized magnitude ~2: a few ulps of 2.
    EXPECT_TRUE(near(got, reference_resample(img, k.box, k.rh, k.rw, k.top, k.left, k.oh, k.ow, k.flip, norm), 2e-5));
  }
}

TEST(Resample, Bf16IsTheRoundedF32Result) {
  const Image img = random_image(30, 41, 8);
  const Normalization norm;
  const Tensor f = resample_to_tensor(img, {2, 3, 25, 33}, 19, 17, 0, 0, 19, 17, true, norm, kF32);
  const Tensor b = resample_to_tensor(img, {2, 3, 25, 33}, 19, 17, 0, 0, 19, 17, true, norm, kBF16);
  ASSERT_EQ(b.dtype(), kBF16);
  ASSERT_EQ(b.sizes(), f.sizes());
  const float* fp = f.data<float>();
  const BFloat16* bp = b.data<BFloat16>();
  for (int64_t i = 0; i < f.numel(); ++i) ASSERT_EQ(bp[i].bits, BFloat16(fp[i]).bits) << i;
}

TEST(Resample, BadArgumentsAreErrors) {
  const Image img = random_image(10, 12, 1);
  const Normalization n;
  expect_error([&] { resample_to_tensor(img, {5, 0, 6, 12}, 4, 4, 0, 0, 4, 4, false, n, kF32); },
               {"crop", "top 5", "6 x 12", "10 x 12 image"});
  expect_error([&] { resample_to_tensor(img, {0, 0, 10, 12}, 4, 4, 1, 0, 4, 4, false, n, kF32); },
               {"output window", "resized 4 x 4"});
  expect_error([&] { resample_to_tensor(img, {0, 0, 10, 12}, 4, 4, 0, 0, 4, 4, false, n, kF64); }, {"f32 or bf16", "f64"});
}

// torchvision's RandomResizedCrop.get_params, transcribed from its Python source, drawing the
// same uniforms in the same order.
CropBox torchvision_get_params(int64_t height, int64_t width, Generator& gen, double s0, double s1, double r0,
                               double r1) {
  const double area = static_cast<double>(height * width);
  for (int i = 0; i < 10; ++i) {
    const double target_area = area * (s0 + (s1 - s0) * uniform_draw(gen));
    const double lr0 = std::log(r0), lr1 = std::log(r1);
    const double aspect_ratio = std::exp(lr0 + (lr1 - lr0) * uniform_draw(gen));
    const int64_t w = static_cast<int64_t>(std::nearbyint(std::sqrt(target_area * aspect_ratio)));
    const int64_t h = static_cast<int64_t>(std::nearbyint(std::sqrt(target_area / aspect_ratio)));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int64_t top = static_cast<int64_t>(std::floor(uniform_draw(gen) * static_cast<double>(height - h + 1)));
      const int64_t left = static_cast<int64_t>(std::floor(uniform_draw(gen) * static_cast<double>(width - w + 1)));
      return {top, left, h, w};
    }
  }
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w, h;
  if (in_ratio < r0) {
    w = width;
    h = static_cast<int64_t>(std::nearbyint(static_cast<double>(w) / r0));
  } else if (in_ratio > r1) {
    h = height;
    w = static_cast<int64_t>(std::nearbyint(static_cast<double>(h) * r1));
  } else {
    w = width;
    h = height;
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

TEST(RandomResizedCrop, FollowsTorchvisionAndStaysInRange) {
  int64_t within = 0;
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    const int64_t H = 100 + static_cast<int64_t>(seed % 7) * 53, W = 80 + static_cast<int64_t>(seed % 5) * 97;
    Generator a(seed), b(seed);
    const CropBox box = random_resized_crop_box(H, W, a);
    ASSERT_EQ(box, torchvision_get_params(H, W, b, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0)) << "seed " << seed;
    ASSERT_EQ(a.state(), b.state()) << "same number of draws, seed " << seed;
    ASSERT_TRUE(box.top >= 0 && box.left >= 0 && box.height > 0 && box.width > 0 && box.top + box.height <= H &&
                box.left + box.width <= W);
    const double frac = static_cast<double>(box.height * box.width) / static_cast<double>(H * W);
    const double ratio = static_cast<double>(box.width) / static_cast<double>(box.height);
    // Rounding w and h moves the area and ratio a little past the bounds on small crops.
    if (frac > 0.07 && frac <= 1.0 && ratio > 0.7 && ratio < 1.4) ++within;
  }
  EXPECT_EQ(within, 2000);
}

TEST(RandomResizedCrop, FallsBackToTheCentreCrop) {
  Generator g(1);
  // 10 x 1000: no crop of at least 8% of the area with ratio <= 4/3 fits in 10 rows, so after
  // 10 tries the centre crop with ratio clamped to 4/3: h = 10, w = round(13.33) = 13.
  EXPECT_EQ(random_resized_crop_box(10, 1000, g), (CropBox{0, 493, 10, 13}));
  EXPECT_EQ(random_resized_crop_box(1000, 10, g), (CropBox{493, 0, 13, 10}));  // w = 10, h = round(10 / 0.75)
  // A scale above 1 never fits; a ratio inside the bounds keeps the whole image.
  EXPECT_EQ(random_resized_crop_box(100, 120, g, {2.0, 2.0}), (CropBox{0, 0, 100, 120}));
  expect_error([&] { random_resized_crop_box(0, 5, g); }, {"empty image"});
  expect_error([&] { random_resized_crop_box(5, 5, g, {0.5, 0.1}); }, {"scale"});
}

TEST(TrainTransform, IsCropThenFlipFromTheGenerator) {
  const Image img = random_image(45, 61, 3);
  TrainTransformOptions o;
  o.size = 24;
  const TrainTransform t(o);
  int flips = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    Generator g(seed), ref(seed);
    const Tensor out = t(img, g);
    ASSERT_EQ(out.sizes(), (Shape{3, 24, 24}));
    const CropBox box = random_resized_crop_box(45, 61, ref);
    const bool flip = uniform_draw(ref) < 0.5;
    flips += flip;
    EXPECT_TRUE(near(out, reference_resample(img, box, 24, 24, 0, 0, 24, 24, flip, o.normalization), 2e-5))
        << "seed " << seed;
    Generator again(seed);
    EXPECT_TRUE(all_close(t(img, again), out, 0, 0)) << "same generator, same result";
  }
  EXPECT_GT(flips, 5);
  EXPECT_LT(flips, 35);
}

TEST(TrainTransform, FlipProbabilityAndSizes) {
  const Image img = random_image(30, 40, 2);
  TrainTransformOptions never;
  never.size = 16;
  never.flip_probability = 0.0;
  TrainTransformOptions always = never;
  always.flip_probability = 1.0;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    Generator a(seed), b(seed);
    const Tensor x = TrainTransform(never)(img, a), y = TrainTransform(always)(img, b);
    // Same crop (same draws), mirrored.
    const std::vector<float> xv = x.to_vector<float>(), yv = y.to_vector<float>();
    for (int64_t r = 0; r < 3 * 16; ++r)
      for (int64_t c = 0; c < 16; ++c) ASSERT_EQ(xv[static_cast<size_t>(r * 16 + c)], yv[static_cast<size_t>(r * 16 + 15 - c)]);
  }
  for (int64_t size : {224, 331, 480}) {  // ResNet, AmoebaNet-D, AmoebaNet-B at 480
    TrainTransformOptions o;
    o.size = size;
    o.dtype = kBF16;
    Generator g(size);
    const Tensor out = TrainTransform(o)(img, g);
    EXPECT_EQ(out.sizes(), (Shape{3, size, size}));
    EXPECT_EQ(out.dtype(), kBF16);
  }
  TrainTransformOptions bad;
  bad.flip_probability = 1.5;
  expect_error([&] { TrainTransform t(bad); }, {"flip_probability"});
}

TEST(EvalTransform, ResizesTheShorterSideThenCentreCrops) {
  // 375 x 500 (an ImageNet-typical landscape image): the shorter side 375 -> 256, the longer
  // int(256 * 500 / 375) = 341; the crop starts at round(32 / 2) = 16 and round(117 / 2) = 58
  // (58.5 rounds to even).
  const Image land = random_image(375, 500, 1);
  const Normalization norm;
  Generator g(0);
  const EvalTransform t224;
  EXPECT_EQ(t224.resize(), 256);
  const Tensor out = t224(land, g);
  ASSERT_EQ(out.sizes(), (Shape{3, 224, 224}));
  EXPECT_TRUE(all_close(out, resample_to_tensor(land, {0, 0, 375, 500}, 256, 341, 16, 58, 224, 224, false, norm, kF32), 0, 0));
  // Portrait 500 x 333: width -> 256, height int(256 * 500 / 333) = 384; offsets 80 and 16.
  const Image port = random_image(500, 333, 2);
  EXPECT_TRUE(all_close(t224(port, g), resample_to_tensor(port, {0, 0, 500, 333}, 384, 256, 80, 16, 224, 224, false, norm, kF32), 0, 0));

  // Against the direct reference on a small image: 23 x 37, resize 20, crop 16: 20 x 32 ->
  // offsets 2 and 8.
  EvalTransformOptions o;
  o.size = 16;
  o.resize = 20;
  const Image small = random_image(23, 37, 6);
  EXPECT_TRUE(near(EvalTransform(o)(small, g), reference_resample(small, {0, 0, 23, 37}, 20, 32, 2, 8, 16, 16, false, norm), 2e-5));

  // Default resize sizes: size / 0.875 rounded.
  EvalTransformOptions a;
  a.size = 331;
  EXPECT_EQ(EvalTransform(a).resize(), 378);
  a.size = 480;
  EXPECT_EQ(EvalTransform(a).resize(), 549);
  a.resize = 400;
  expect_error([&] { EvalTransform t(a); }, {"resize (400)", "crop size (480)"});
}

// The whole pipeline on files: decode a JPEG or PNG written here, then transform; the result
// equals transforming the decoded image (and for PNG, the original pixels).
TEST(Pipeline, DecodedFilesThroughTheTransforms) {
  TempDir dir;
  for (int channels : {1, 3, 4}) {
    for (const auto& [h, w] : std::vector<std::pair<int, int>>{{75, 100}, {64, 48}, {33, 47}}) {
      SCOPED_TRACE(detail::str(h, " x ", w, " with ", channels, " channels"));
      const std::vector<uint8_t> px = make_pixels(h, w, channels, 21, true);
      write_bytes(dir.file("a.png"), encode_png(px, h, w, channels));
      write_bytes(dir.file("a.jpg"), encode_jpeg(px, h, w, channels));
      const Image png = load_image(dir.file("a.png"));
      const Image jpg = load_image(dir.file("a.jpg"));
      EXPECT_EQ(png.pixels.to_vector(), to_rgb(px, h, w, channels).pixels.to_vector());
      TrainTransformOptions o;
      o.size = 32;
      for (const Image* img : {&png, &jpg}) {
        Generator g(7), ref(7);
        const Tensor out = TrainTransform(o)(*img, g);
        const CropBox box = random_resized_crop_box(h, w, ref);
        const bool flip = uniform_draw(ref) < 0.5;
        EXPECT_TRUE(near(out, reference_resample(*img, box, 32, 32, 0, 0, 32, 32, flip, o.normalization), 2e-5));
      }
    }
  }
}

}  // namespace
