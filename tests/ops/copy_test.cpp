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

// NOTE [Casts keep the layout]: a transposed or permuted tensor casts to a tensor with its strides
// (the conversion in storage order), anything with gaps or overlaps to a contiguous one; the
// values are the elementwise casts either way, and so is the gradient.
TEST(Copy, CastsKeepADenseLayout) {
  Generator g(7);
  const Tensor base = randn({4, 3, 5}, kF32, &g);
  const auto expect_cast = [](const Tensor& src, const Tensor& out) {
    const std::vector<float> s = src.to_vector<float>();
    std::vector<float> want;
    for (const float v : s) want.push_back(static_cast<float>(BFloat16(v)));
    EXPECT_EQ(out.sizes(), src.sizes());
    EXPECT_EQ(out.to_vector<float>(), want);
  };
  const Tensor t = transpose(base, 0, 2);  // [5, 3, 4], strides [1, 5, 15]
  const Tensor tb = t.to(kBF16);
  EXPECT_EQ(tb.strides(), t.strides());
  EXPECT_EQ(tb.storage_offset(), 0);
  expect_cast(t, tb);
  const Tensor p = permute(base, {1, 2, 0});
  const Tensor pb = p.to(kBF16);
  EXPECT_EQ(pb.strides(), p.strides());
  expect_cast(p, pb);
  // A dense permuted view at an offset (one slab of a stack): the same strides, its own storage.
  const Tensor stack = randn({2, 6, 4}, kF32, &g);
  const Tensor slab = transpose(select(stack, 0, 1), 0, 1);
  const Tensor sb = slab.to(kBF16);
  EXPECT_EQ(sb.strides(), slab.strides());
  expect_cast(slab, sb);
  // Gaps (every other column) and overlaps (an expanded row) become contiguous.
  const Tensor gaps = narrow(transpose(base, 1, 2), 1, 0, 2);
  const Tensor gb = gaps.to(kBF16);
  EXPECT_TRUE(gb.is_contiguous());
  expect_cast(gaps, gb);
  const Tensor row = from_vector<float>({1.5f, -2.25f, 3.0f});
  const Tensor eb = expand(unsqueeze(row, 0), {4, 3}).to(kBF16);
  EXPECT_TRUE(eb.is_contiguous());
  expect_cast(expand(unsqueeze(row, 0), {4, 3}), eb);
  // Size-1 dims with any stride do not stop it.
  const Tensor one = transpose(unsqueeze(randn({4, 5}, kF32, &g), 1), 0, 2);  // [5, 1, 4]
  const Tensor ob = one.to(kF64);
  EXPECT_FALSE(ob.is_contiguous());
  EXPECT_EQ(ob.to_vector<double>(), one.to(kF64).contiguous().to_vector<double>());
  EXPECT_EQ(ob.stride(0), 1);
  EXPECT_EQ(ob.stride(2), 5);
  // The gradient of a transposed leaf through the cast reaches it cast back, in its layout.
  Tensor leaf = transpose(randn({3, 4}, kF64, &g), 0, 1).detach().set_requires_grad();
  const Tensor weights = randn({4, 3}, kF32, &g);
  sum(mul(leaf.to(kF32), weights)).backward();
  EXPECT_EQ(leaf.grad().dtype(), kF64);
  EXPECT_EQ(leaf.grad().to_vector<double>(), weights.to(kF64).to_vector<double>());
}
