#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using autograd::TensorList;

TEST(Shape, ViewReshapeAndInference) {
  Tensor a = arange(24, kF32);
  EXPECT_EQ(view(a, {2, -1, 4}).sizes(), (Shape{2, 3, 4}));
  Tensor t = transpose(view(a, {4, 6}), 0, 1);
  EXPECT_THROW(view(t, {24}), Error);
  Tensor r = reshape(t, {24});  // copies
  EXPECT_NE(r.storage(), a.storage());
  EXPECT_EQ(r.to_vector<float>()[1], 6.f);
  // Views that merge or split only contiguous runs need no copy.
  Tensor b = view(a, {2, 3, 4});
  Tensor p = permute(b, {1, 0, 2});         // [3, 2, 4], inner dim still contiguous
  EXPECT_EQ(reshape(p, {3, 2, 2, 2}).storage(), a.storage());
  EXPECT_EQ(flatten(b, 1).sizes(), (Shape{2, 12}));
  EXPECT_EQ(flatten(b).sizes(), (Shape{24}));
  EXPECT_EQ(flatten(scalar_tensor(1)).sizes(), (Shape{1}));
  EXPECT_EQ(reshape(scalar_tensor(3), {1, 1}).sizes(), (Shape{1, 1}));
  EXPECT_EQ(reshape(zeros({0, 5}), {5, 0, 3}).sizes(), (Shape{5, 0, 3}));
}

TEST(Shape, TransposePermuteSqueezeUnsqueeze) {
  Tensor a = reshape(arange(6, kF32), {1, 2, 3});
  EXPECT_EQ(permute(a, {2, 0, 1}).sizes(), (Shape{3, 1, 2}));
  EXPECT_EQ(permute(a, {2, 0, 1}).to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_THROW(permute(a, {0, 0, 1}), Error);
  EXPECT_THROW(permute(a, {0, 1}), Error);
  EXPECT_EQ(squeeze(a).sizes(), (Shape{2, 3}));
  EXPECT_EQ(squeeze(a, 0).sizes(), (Shape{2, 3}));
  EXPECT_EQ(squeeze(a, 1).sizes(), (Shape{1, 2, 3}));
  EXPECT_EQ(unsqueeze(a, -1).sizes(), (Shape{1, 2, 3, 1}));
  EXPECT_EQ(unsqueeze(a, 3).sizes(), (Shape{1, 2, 3, 1}));
  EXPECT_THROW(unsqueeze(a, 5), Error);
  EXPECT_EQ(t(reshape(a, {2, 3})).sizes(), (Shape{3, 2}));
  EXPECT_THROW(t(a), Error);
}

TEST(ShapeGradcheck, EveryViewOp) {
  Tensor x = rand_leaf({2, 3, 4}, 71);
  auto check = [&](const char* name, std::function<Tensor(const Tensor&)> f) {
    // Multiply by a fixed pattern so each output element's gradient is distinct.
    EXPECT_TRUE(grad_ok(gradcheck(
        [&](const TensorList& in) {
          Tensor y = f(in[0]);
          return mul(y, reshape(arange(static_cast<double>(y.numel()), kF64), y.sizes()));
        },
        {x})))
        << name;
  };
  check("view", [](const Tensor& v) { return view(v, {6, 4}); });
  check("reshape-copy", [](const Tensor& v) { return reshape(transpose(v, 0, 2), {-1}); });
  check("flatten", [](const Tensor& v) { return flatten(v, 0, 1); });
  check("transpose", [](const Tensor& v) { return transpose(v, 0, 2); });
  check("permute", [](const Tensor& v) { return permute(v, {1, 2, 0}); });
  check("unsqueeze", [](const Tensor& v) { return unsqueeze(v, 1); });
  check("squeeze", [](const Tensor& v) { return squeeze(unsqueeze(v, 0)); });
  check("expand", [](const Tensor& v) { return expand(unsqueeze(v, 0), {3, 2, 3, 4}); });
  check("expand-size1", [](const Tensor& v) { return expand(sum(v, {1}, true), {2, 5, 4}); });
  check("contiguous", [](const Tensor& v) { return contiguous(transpose(v, 1, 2)); });
  check("clone", [](const Tensor& v) { return v.clone(); });
}
