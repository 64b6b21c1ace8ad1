// TensorArg (NOTE [Kernel arguments]): what a hand-written kernel sees of a tensor, checked on
// CPU tensors, including views that are not contiguous.
#include "core/tensor_arg.h"

#include "test_util.h"

using namespace trident;
using namespace trident::testing;

namespace {
// A kernel as a user writes it: out[i] = 2 * in[i] over row-major indices.
template <typename T>
void twice(TensorArg<const T> in, TensorArg<T> out) {
  for (int64_t i = 0; i < in.numel; ++i) out[i] = in[i] * T(2);
}
}  // namespace

TEST(TensorArg, PointerSizesAndStridesOfAContiguousTensor) {
  Tensor x = reshape(arange(6.0, kF32), {2, 3});
  TensorArg<const float> a = tensor_arg<const float>(x);
  EXPECT_EQ(a.data, x.data_ptr());
  EXPECT_EQ(a.ndim, 2);
  EXPECT_EQ(a.numel, 6);
  EXPECT_TRUE(a.contiguous);
  EXPECT_EQ(a.sizes[0], 2);
  EXPECT_EQ(a.sizes[1], 3);
  EXPECT_EQ(a.strides[0], 3);
  EXPECT_EQ(a.strides[1], 1);
  EXPECT_EQ(a[4], 4.0f);
}

TEST(TensorArg, ViewsReadInRowMajorOrderThroughTheStrides) {
  Tensor base = reshape(arange(24.0, kF64), {2, 3, 4});
  for (const Tensor& v : {transpose(base, 0, 2), slice(base, 2, 1, 3), expand(slice(base, 1, 0, 1), {2, 5, 4})}) {
    TensorArg<const double> a = tensor_arg<const double>(v);
    EXPECT_FALSE(a.contiguous);
    EXPECT_EQ(a.data, v.data_ptr());  // the view's first element, offset included
    const std::vector<double> want = v.to_vector<double>();
    ASSERT_EQ(a.numel, static_cast<int64_t>(want.size()));
    for (int64_t i = 0; i < a.numel; ++i) EXPECT_EQ(a[i], want[static_cast<size_t>(i)]) << "element " << i;
    Tensor out = empty(v.sizes(), kF64);
    twice<double>(a, tensor_arg<double>(out));
    EXPECT_TRUE(all_close(out, mul(v, 2.0)));
  }
}

TEST(TensorArg, ZeroDimAndEmptyTensors) {
  Tensor s = scalar_tensor(3.5, kF32);
  TensorArg<const float> a = tensor_arg<const float>(s);
  EXPECT_EQ(a.ndim, 0);
  EXPECT_EQ(a.numel, 1);
  EXPECT_EQ(a[0], 3.5f);
  EXPECT_EQ(tensor_arg<const float>(zeros({0, 3})).numel, 0);
}

TEST(TensorArg, WrongDtypeOrTooManyDimsIsAClearError) {
  expect_error([] { tensor_arg<float>(zeros({2}, kF64)); }, {"tensor_arg<f32>: the tensor has dtype f64"});
  expect_error([] { tensor_arg<float>(zeros(Shape(9, 1))); }, {"at most 8 dims", "[1, 1, 1, 1, 1, 1, 1, 1, 1]"});
  expect_error([] { tensor_arg<float>(Tensor()); }, {"undefined"});
}
