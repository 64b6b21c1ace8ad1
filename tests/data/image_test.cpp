// Decoding (data/image.h): JPEG and PNG files written in the test with stb_image_write, grey
// and RGBA converted to RGB, the pixel limit, and every kind of bad input.
#include <cmath>
#include <cstring>

#include "data/image.h"
#include "data/image_test_util.h"
#include "test_util.h"

using namespace trident;
using namespace trident::data;
using namespace trident::testing;

namespace {

struct Size {
  int h, w;
};
// Odd and even sizes, a single pixel, and a single row and column.
const Size kSizes[] = {{1, 1}, {2, 2}, {37, 23}, {48, 64}, {1, 17}, {19, 1}, {33, 50}};

TEST(ImageDecode, PngIsLosslessForEveryChannelCount) {
  for (const Size s : kSizes) {
    for (int channels = 1; channels <= 4; ++channels) {
      SCOPED_TRACE(detail::str(s.h, " x ", s.w, " with ", channels, " channels"));
      const std::vector<uint8_t> px = make_pixels(s.h, s.w, channels, 3 + static_cast<uint64_t>(channels));
      const Image img = decode_image(encode_png(px, s.h, s.w, channels), "test.png");
      ASSERT_EQ(img.height, s.h);
      ASSERT_EQ(img.width, s.w);
      ASSERT_EQ(img.pixels.size(), static_cast<size_t>(s.h) * s.w * 3);
      // Grey is replicated into R, G and B; alpha is dropped.
      for (int y = 0; y < s.h; ++y)
        for (int x = 0; x < s.w; ++x)
          for (int c = 0; c < 3; ++c) {
            const uint8_t want = px[(static_cast<size_t>(y) * s.w + x) * channels + (channels >= 3 ? c : 0)];
            ASSERT_EQ(img.at(y, x, c), want) << "pixel (" << y << ", " << x << ") channel " << c;
          }
    }
  }
}

TEST(ImageDecode, JpegIsCloseToTheEncodedPixels) {
  for (const Size s : kSizes) {
    // stb_image_write stores every JPEG as YCbCr (grey as Y with flat chroma) and ignores a
    // fourth channel; PNG covers true grey and alpha files.
    for (int channels : {1, 3, 4}) {
      SCOPED_TRACE(detail::str(s.h, " x ", s.w, " with ", channels, " channels"));
      const std::vector<uint8_t> px = make_pixels(s.h, s.w, channels, 11, /*smooth=*/true);
      const Image img = decode_image(encode_jpeg(px, s.h, s.w, channels, 95), "test.jpg");
      ASSERT_EQ(img.height, s.h);
      ASSERT_EQ(img.width, s.w);
      const Image want = to_rgb(px, s.h, s.w, channels);
      double total = 0.0;
      int worst = 0;
      for (size_t i = 0; i < img.pixels.size(); ++i) {
        const int d = std::abs(static_cast<int>(img.pixels[i]) - static_cast<int>(want.pixels[i]));
        total += d;
        worst = std::max(worst, d);
      }
      // JPEG at quality 95 on smooth gradients: a couple of levels on average (chroma is
      // subsampled 2x2 for colour images, so single pixels may move more).
      EXPECT_LT(total / static_cast<double>(img.pixels.size()), 3.0);
      EXPECT_LT(worst, 40);
      if (channels == 1) {  // a grey JPEG decodes to R = G = B
        for (size_t p = 0; p < img.pixels.size(); p += 3) {
          ASSERT_EQ(img.pixels[p], img.pixels[p + 1]);
          ASSERT_EQ(img.pixels[p], img.pixels[p + 2]);
        }
      }
    }
  }
}

TEST(ImageDecode, HeaderWithoutDecoding) {
  const std::vector<uint8_t> png = encode_png(make_pixels(37, 23, 4, 1), 37, 23, 4);
  const ImageHeader h = read_image_header(png, "a.png");
  EXPECT_EQ(h.height, 37);
  EXPECT_EQ(h.width, 23);
  EXPECT_EQ(h.channels, 4);
  const std::vector<uint8_t> jpg = encode_jpeg(make_pixels(20, 30, 1, 1), 20, 30, 1);
  const ImageHeader j = read_image_header(jpg, "a.jpg");
  EXPECT_EQ(j.height, 20);
  EXPECT_EQ(j.width, 30);
  EXPECT_EQ(j.channels, 3);  // stb_image_write always writes three-component (YCbCr) JPEGs
}

TEST(ImageDecode, LoadsFilesFromDisk) {
  TempDir dir;
  const std::vector<uint8_t> px = make_pixels(9, 14, 3, 5);
  write_bytes(dir.file("x.png"), encode_png(px, 9, 14, 3));
  const Image img = load_image(dir.file("x.png"));
  EXPECT_EQ(img.pixels.to_vector(), px);
  expect_error([&] { load_image(dir.file("missing.png")); }, {"cannot open", "missing.png"});
}

// The pixel limit is checked on the header: a PNG whose header claims 100000 x 100000 pixels
// but holds almost nothing is refused without stb_image trying to allocate 30 GB.
TEST(ImageDecode, PixelLimitIsCheckedFromTheHeader) {
  const std::vector<uint8_t> px = make_pixels(100, 100, 3, 2);
  const std::vector<uint8_t> png = encode_png(px, 100, 100, 3);
  EXPECT_EQ(decode_image(png, "ok.png", 10000).pixels.to_vector(), px);  // exactly at the limit
  expect_error([&] { decode_image(png, "big.png", 9999); },
               {"big.png", "100 x 100", "10000 pixels", "limit of 9999"});

  // Rewrite the IHDR dimensions (bytes 16..23, big-endian) of a tiny PNG: the header now lies.
  std::vector<uint8_t> bomb = encode_png(make_pixels(2, 2, 3, 1), 2, 2, 3);
  const uint8_t huge[8] = {0x00, 0x01, 0x86, 0xA0, 0x00, 0x01, 0x86, 0xA0};  // 100000, 100000
  std::memcpy(bomb.data() + 16, huge, 8);
  expect_error([&] { decode_image(bomb, "bomb.png"); },
               {"bomb.png", "100000 x 100000", "10000000000 pixels", "limit of 89478485"});
  // The same for a JPEG whose frame header (SOF0: FF C0, length, precision, height, width)
  // claims 60000 x 60000.
  std::vector<uint8_t> jbomb = encode_jpeg(make_pixels(8, 8, 3, 1), 8, 8, 3);
  const uint8_t sof[2] = {0xff, 0xc0};
  auto f = std::search(jbomb.begin(), jbomb.end(), sof, sof + 2);
  ASSERT_NE(f, jbomb.end());
  const uint8_t dims[4] = {0xEA, 0x60, 0xEA, 0x60};
  std::copy(dims, dims + 4, f + 5);
  EXPECT_EQ(read_image_header(jbomb, "bomb.jpg").height, 60000);
  expect_error([&] { decode_image(jbomb, "bomb.jpg"); }, {"bomb.jpg", "60000 x 60000", "3600000000 pixels"});
}

TEST(ImageDecode, BadInputsAreErrorsNamingTheFile) {
  const std::vector<uint8_t> png = encode_png(make_pixels(40, 30, 3, 7), 40, 30, 3);
  const std::vector<uint8_t> jpg = encode_jpeg(make_pixels(40, 30, 3, 7, true), 40, 30, 3);

  expect_error([&] { decode_image({}, "empty.jpg"); }, {"empty.jpg", "empty"});

  const std::string text = "just some text, not an image at all\n";
  const std::vector<uint8_t> txt(text.begin(), text.end());
  expect_error([&] { decode_image(txt, "notes.png"); }, {"notes.png", "not a JPEG, PNG"});

  for (double keep : {0.1, 0.5, 0.95}) {
    SCOPED_TRACE(detail::str("keeping ", keep));
    const std::vector<uint8_t> tp(png.begin(), png.begin() + static_cast<std::ptrdiff_t>(png.size() * keep));
    expect_error([&] { decode_image(tp, "cut.png"); }, {"cut.png", "truncated"});
    const std::vector<uint8_t> tj(jpg.begin(), jpg.begin() + static_cast<std::ptrdiff_t>(jpg.size() * keep));
    expect_error([&] { decode_image(tj, "cut.jpg"); }, {"cut.jpg", "truncated"});
  }
  // Only the signature survives.
  expect_error([&] { decode_image(std::vector<uint8_t>(png.begin(), png.begin() + 8), "sig.png"); },
               {"sig.png", "truncated or corrupt PNG header"});
  expect_error([&] { decode_image(std::vector<uint8_t>(jpg.begin(), jpg.begin() + 3), "soi.jpg"); }, {"soi.jpg", "truncated"});

  // Corrupt: the zlib header of the PNG's first IDAT chunk, and a JPEG whose Huffman-table
  // marker (FF C4) is overwritten.
  std::vector<uint8_t> bad_png = png;
  const uint8_t idat[4] = {'I', 'D', 'A', 'T'};
  auto at = std::search(bad_png.begin(), bad_png.end(), idat, idat + 4);
  ASSERT_NE(at, bad_png.end());
  at[4] = 0xff;
  at[5] = 0xff;
  expect_error([&] { decode_image(bad_png, "corrupt.png"); }, {"corrupt.png", "cannot decode"});
  std::vector<uint8_t> bad_jpg = jpg;
  const uint8_t dht[2] = {0xff, 0xc4};
  auto h = std::search(bad_jpg.begin(), bad_jpg.end(), dht, dht + 2);
  ASSERT_NE(h, bad_jpg.end());
  h[1] = 0x00;
  expect_error([&] { decode_image(bad_jpg, "corrupt.jpg"); }, {"corrupt.jpg"});
}

}  // namespace
