#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using autograd::TensorList;

TEST(Copy, ContiguousCopiesOnlyWhenNeeded) {
  Tensor a = reshape(arange(6, kF32), {2, 3});
  EXPECT_TRUE(contiguous(a).is_same(a));
  Tensor t = transpose(a, 0, 1);
  Tensor c = contiguous(t);
  EXPECT_FALSE(c.is_same(t));
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(Copy, CloneOwnsItsMemory) {
  Tensor a = from_vector<float>({1, 2, 3});
  Tensor b = clone(a);
  EXPECT_NE(b.storage(), a.storage());
  {
    NoGradGuard g;
    add_(b, 1.0);
  }
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1, 2, 3}));
}

TEST(Copy, CastsRoundAndKeepTheGradientDtype) {
  Tensor x = from_vector<double>({1.0 / 3.0, 1e-9, 70000.0}).set_requires_grad();
  Tensor h = cast(x, kF16);
  EXPECT_EQ(h.dtype(), kF16);
  EXPECT_EQ(h.to_vector<float>()[2], INFINITY);  // beyond f16's range
  EXPECT_EQ(cast(x, kBF16).to_vector<float>()[0], static_cast<float>(BFloat16(static_cast<float>(1.0 / 3.0))));
  // The gradient of a cast is the upstream gradient cast back: exact for representable values.
  sum(mul(cast(x, kF32), from_vector<float>({2, 4, 8}))).backward();
  EXPECT_EQ(x.grad().dtype(), kF64);
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 4, 8}));
  EXPECT_THROW(cast(x, kI64), Error);  // no gradient through an integer cast
  EXPECT_EQ(cast(x.detach(), kI64).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 70000}));
}

TEST(CopyGradcheck, CloneContiguousAndSameDtypeCast) {
  Tensor x = rand_leaf_transposed({3, 4}, 5);
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return mul(clone(in[0]), in[0]); }, {x})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return mul(contiguous(in[0]), 3.0); }, {x})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return mul(cast(in[0], kF64), 3.0); }, {x})));
}
