#include "test_util.h"

using namespace trident;
using trident::testing::error_message;

namespace {
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST(Errors, CheckCarriesFileLineAndValues) {
  try {
    const int x = 3;
    TRIDENT_CHECK(x == 4, "expected x to be 4, but got ", x, " with shape ", Shape{2, 3});
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "error_test.cpp:")) << e.what();
    EXPECT_EQ(e.message(), "expected x to be 4, but got 3 with shape [2, 3]");
    EXPECT_GT(e.line(), 0);
  }
}

TEST(Errors, AssertSaysItIsABug) {
  const std::string m = error_message([] { TRIDENT_ASSERT(1 + 1 == 3, "arithmetic"); });
  EXPECT_TRUE(has(m, "internal assertion")) << m;
  EXPECT_TRUE(has(m, "bug")) << m;
}

TEST(Errors, ShapeMismatchNamesBothShapes) {
  const std::string m = error_message([] { add(zeros({2, 3}), zeros({4, 3})); });
  EXPECT_TRUE(has(m, "[2, 3]") && has(m, "[4, 3]")) << m;
  const std::string mm = error_message([] { matmul(zeros({2, 3}), zeros({4, 5})); });
  EXPECT_TRUE(has(mm, "[2, 3]") && has(mm, "[4, 5]") && has(mm, "3") && has(mm, "4")) << mm;
}

TEST(Errors, DtypeMismatchNamesBothDtypes) {
  const std::string m = error_message([] { mul(zeros({2}, kF32), zeros({2}, kF64)); });
  EXPECT_TRUE(has(m, "f32") && has(m, "f64")) << m;
  const std::string d = error_message([] { div(zeros({2}, kI64), zeros({2}, kI64)); });
  EXPECT_TRUE(has(d, "i64")) << d;
}

TEST(Errors, DeviceMismatchNamesTheDevices) {
  // Without a GPU a CUDA tensor cannot be made, so the device check is exercised through a
  // storage that claims to live on cuda:0 (never dereferenced: the check comes first).
  float fake[4];
  auto st = std::make_shared<Storage>(fake, sizeof fake, Device::cuda(0), nullptr);
  Tensor g = make_tensor(st, kF32, {4}, {1}, 0);
  const std::string m = error_message([&] { add(zeros({4}), g); });
  EXPECT_TRUE(has(m, "cpu") && has(m, "cuda:0")) << m;
}

TEST(Errors, DimOutOfRange) {
  const std::string m = error_message([] { sum(zeros({2, 3}), {2}); });
  EXPECT_TRUE(has(m, "dim 2") && has(m, "2 dims")) << m;
  EXPECT_THROW(transpose(zeros({2}), 0, 1), Error);
  EXPECT_THROW(zeros({2, 3}).size(-3), Error);
}

TEST(Errors, ReshapeSizeMismatch) {
  const std::string m = error_message([] { reshape(zeros({2, 3}), {4, 2}); });
  EXPECT_TRUE(has(m, "[4, 2]") && has(m, "6")) << m;
  EXPECT_THROW(reshape(zeros({2, 3}), {-1, -1}), Error);
  EXPECT_THROW(view(transpose(zeros({2, 3}), 0, 1), {6}), Error);
}
