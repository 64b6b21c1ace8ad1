#include <gtest/gtest.h>

#include <algorithm>

#include "trident.h"

using namespace trident;

TEST(Tensor, FactoriesShapesAndValues) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.sizes(), (Shape{2, 3}));
  EXPECT_EQ(z.strides(), (Shape{3, 1}));
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.dtype(), kF32);
  EXPECT_TRUE(z.device().is_cpu());
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(6, 0.f));
  EXPECT_EQ(ones({2}, kF64).to_vector<double>(), (std::vector<double>{1, 1}));
  EXPECT_EQ(full({3}, 2.5).to_vector<float>(), (std::vector<float>{2.5f, 2.5f, 2.5f}));
  EXPECT_EQ(arange(5, kI64).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(1, 2, 0.25, kF64).to_vector<double>(), (std::vector<double>{1, 1.25, 1.5, 1.75}));
  EXPECT_EQ(arange(3, 0, -1, kI32).to_vector<int32_t>(), (std::vector<int32_t>{3, 2, 1}));
  EXPECT_EQ(scalar_tensor(7).dim(), 0);
  EXPECT_EQ(scalar_tensor(7).item<int>(), 7);
  Tensor v = from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(v.dtype(), kI64);
  EXPECT_EQ(v.to_vector<double>(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(from_vector<double>({1, 2}, {2}, kF16).dtype(), kF16);
  EXPECT_EQ(empty({0, 4}).numel(), 0);
  EXPECT_EQ(zeros({}).numel(), 1);
}

TEST(Tensor, FactoryErrorsNameTheProblem) {
  try {
    zeros({2, -1});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[2, -1]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(from_vector<float>({1, 2, 3}, {2, 2}), Error);
  EXPECT_THROW(arange(0, 1, 0), Error);
  EXPECT_THROW(arange(1, 0, 1), Error);
  EXPECT_THROW(rand({2}, kI64), Error);
  EXPECT_THROW(zeros({2}, Device::cuda(0)), Error);  // no CUDA tensors without the backend
  EXPECT_THROW(Tensor().sizes(), Error);
  EXPECT_THROW(zeros({2}).item<float>(), Error);
  EXPECT_THROW(zeros({2}).data<double>(), Error);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor a = arange(12, kF32);
  Tensor b = reshape(a, {3, 4});
  EXPECT_EQ(b.storage(), a.storage());
  Tensor c = transpose(b, 0, 1);
  EXPECT_EQ(c.sizes(), (Shape{4, 3}));
  EXPECT_EQ(c.strides(), (Shape{1, 4}));
  EXPECT_FALSE(c.is_contiguous());
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  // A write through one view is seen through the others, and bumps the shared version.
  const uint32_t v0 = a.version();
  fill_(c.as_strided({1}, {1}, 5), 100.0);
  EXPECT_EQ(a.to_vector<float>()[5], 100.f);
  EXPECT_EQ(b.to_vector<float>()[5], 100.f);
  EXPECT_GT(a.version(), v0);
  EXPECT_EQ(c.version(), a.version());
  // contiguous() copies only when needed.
  Tensor cc = c.contiguous();
  EXPECT_TRUE(cc.is_contiguous());
  EXPECT_NE(cc.storage(), c.storage());
  EXPECT_TRUE(b.contiguous().is_same(b));
  EXPECT_EQ(cc.to_vector<float>(), c.to_vector<float>());
}

TEST(Tensor, AsStridedAndOffsets) {
  Tensor a = arange(10, kF64);
  Tensor every_other = a.as_strided({5}, {2}, 0);
  EXPECT_EQ(every_other.to_vector<double>(), (std::vector<double>{0, 2, 4, 6, 8}));
  Tensor tail = a.as_strided({3}, {1}, 7);
  EXPECT_EQ(tail.storage_offset(), 7);
  EXPECT_EQ(tail.to_vector<double>(), (std::vector<double>{7, 8, 9}));
  EXPECT_EQ(tail.as_strided({}, {}, 8).item<double>(), 8);
}

TEST(Tensor, AsStridedOutOfBoundsIsAnError) {
  Tensor a = arange(10, kF64);
  EXPECT_THROW(a.as_strided({5}, {3}, 0), Error);   // reads element 12
  EXPECT_THROW(a.as_strided({2}, {1}, 9), Error);
  EXPECT_THROW(a.as_strided({2, 2}, {1}, 0), Error);
}

TEST(Tensor, ItemOnOneElement) {
  EXPECT_EQ(from_vector<float>({3.5f}, {1, 1}).item<double>(), 3.5);
}

TEST(Tensor, ExpandIsAZeroStrideView) {
  Tensor a = from_vector<float>({1, 2, 3}, {3, 1});
  Tensor e = expand(a, {2, 3, 4});
  EXPECT_EQ(e.strides(), (Shape{0, 1, 0}));
  EXPECT_EQ(e.storage(), a.storage());
  const std::vector<float> v = e.to_vector<float>();
  ASSERT_EQ(v.size(), 24u);
  EXPECT_EQ(v[0], 1);
  EXPECT_EQ(v[4], 2);
  EXPECT_EQ(v[23], 3);
  EXPECT_EQ(expand(a, {3, 2}).to_vector<float>(), (std::vector<float>{1, 1, 2, 2, 3, 3}));
  EXPECT_THROW(expand(a, {2, 2}), Error);  // 3 -> 2: only size-1 dims expand
  EXPECT_THROW(expand(a, {3}), Error);
  EXPECT_EQ(expand(a, {-1, 5}).sizes(), (Shape{3, 5}));
}

// One stored element broadcast to a shape (a pipeline's placeholder, NOTE [Stage-only model]).
TEST(Tensor, BroadcastScalarHoldsOneElement) {
  const Tensor t = broadcast_scalar({3, 4}, 2.5, kF64);
  EXPECT_EQ(t.sizes(), (Shape{3, 4}));
  EXPECT_EQ(t.strides(), (Shape{0, 0}));
  EXPECT_EQ(t.storage()->nbytes(), sizeof(double));
  EXPECT_EQ(t.to_vector<double>(), std::vector<double>(12, 2.5));
  EXPECT_TRUE(is_broadcast_scalar(t));
  EXPECT_TRUE(is_broadcast_scalar(expand(ones({1}), {5})));
  EXPECT_FALSE(is_broadcast_scalar(full({3, 4}, 2.5)));        // every element stored
  EXPECT_FALSE(is_broadcast_scalar(expand(ones({4, 1}), {4, 3})));  // a stride is not 0
  EXPECT_FALSE(is_broadcast_scalar(broadcast_scalar({1}, 1.0)));   // one element: nothing to save
}

TEST(Tensor, CopyConvertsBetweenStridedTensors) {
  Tensor src = transpose(reshape(arange(6, kF64), {2, 3}), 0, 1);  // [[0,3],[1,4],[2,5]]
  Tensor dst = empty({3, 2}, kF16);
  copy_(dst, src);
  EXPECT_EQ(dst.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  Tensor row = from_vector<float>({7, 8}, {2});
  Tensor m = zeros({3, 2}, kI32);
  copy_(m, row);  // broadcasts
  EXPECT_EQ(m.to_vector<int>(), (std::vector<int>{7, 8, 7, 8, 7, 8}));
  EXPECT_THROW(copy_(m, zeros({3})), Error);
}

// A permuted copy that keeps the last dim converts its contiguous runs at once (attention's
// [B, T, H, D] <-> [B, H, T, D] casts): f32 -> bf16 and bf16 -> f32 element by element as the
// scalar conversions give them, runs of 45 (vector lengths and a tail), NaN and ties included.
TEST(Tensor, PermutedRunsConvertLikeTheScalarConversion) {
  Generator g(77);
  std::vector<float> v = randn({3, 5, 4, 45}, kF32, &g).to_vector<float>();
  v[7] = std::nanf("");
  v[50] = detail::f32_from_bits(0x3f808000u);  // a tie between two bf16 values: to even
  v[51] = detail::f32_from_bits(0x3f818000u);
  const Tensor x = from_vector<float>(v, {3, 5, 4, 45});
  const Tensor src = permute(x, {0, 2, 1, 3});
  ASSERT_FALSE(src.is_contiguous());
  const std::vector<float> got = src.to(kBF16).to(kF32).to_vector<float>();
  const std::vector<float> src_values = src.contiguous().to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) {
    const float want = detail::bf16_bits_to_f32(detail::f32_to_bf16_bits(src_values[i]));
    ASSERT_TRUE(std::isnan(want) ? std::isnan(got[i]) : got[i] == want) << i;
  }
  const Tensor h = x.to(kBF16);
  const std::vector<float> hv = h.to(kF32).to_vector<float>();  // contiguous: exact widening
  const std::vector<float> back = permute(h, {0, 2, 1, 3}).to(kF32).to_vector<float>();
  size_t i = 0;
  for (int64_t a = 0; a < 3; ++a)
    for (int64_t c = 0; c < 4; ++c)
      for (int64_t b = 0; b < 5; ++b)
        for (int64_t d = 0; d < 45; ++d, ++i) {
          const float want = hv[static_cast<size_t>(((a * 5 + b) * 4 + c) * 45 + d)];
          ASSERT_TRUE(std::isnan(want) ? std::isnan(back[i]) : back[i] == want) << i;
        }
}

// NOTE [Transposing copies]: a copy whose source runs along another dim than the destination
// is walked in tiles (4-byte elements of one dtype in 8 x 8 register transposes). Every
// permutation of a 4-d tensor whose sizes are not multiples of 8 (one below 8, one above the
// 128 of a tile), into contiguous and into strided destinations, f32, i32 and f64 alike and
// converted, element by element against the index arithmetic.
TEST(Tensor, TransposingCopiesMoveEveryElement) {
  const Shape size{3, 7, 130, 45};
  const Tensor x64 = reshape(arange(static_cast<double>(shape_numel(size)), kF64), size);
  const std::vector<double> xv = x64.to_vector<double>();
  std::vector<int64_t> perm{0, 1, 2, 3};
  int permutations = 0;
  do {
    for (const auto& [from, dt] : {std::pair{kF64, kF64}, std::pair{kF64, kF32}, std::pair{kF32, kF32}, std::pair{kI32, kI32},
                                   std::pair{kF32, kF64}}) {
      const Tensor src = permute(x64.to(from), perm);  // src[i] = x[perm-applied i]
      for (const bool strided_dst : {false, true}) {
        Tensor dst;
        if (strided_dst) {  // every other column of a wider buffer: dst's stride 1 is on its last dim still
          Shape wide = src.sizes();
          wide.back() *= 2;
          dst = narrow(empty(wide, dt), -1, 0, src.size(-1));
        } else {
          dst = empty(src.sizes(), dt);
        }
        copy_(dst, src);
        const Shape ds = dst.sizes();
        const std::vector<double> got = dst.contiguous().to(kF64).to_vector<double>();
        bool ok = true;
        int64_t k = 0;
        for (int64_t i0 = 0; i0 < ds[0] && ok; ++i0)
          for (int64_t i1 = 0; i1 < ds[1] && ok; ++i1)
            for (int64_t i2 = 0; i2 < ds[2] && ok; ++i2)
              for (int64_t i3 = 0; i3 < ds[3] && ok; ++i3, ++k) {
                const int64_t i[4] = {i0, i1, i2, i3};
                int64_t j[4];
                for (int d = 0; d < 4; ++d) j[perm[static_cast<size_t>(d)]] = i[d];
                const double want = xv[static_cast<size_t>(((j[0] * size[1] + j[1]) * size[2] + j[2]) * size[3] + j[3])];
                ok = got[static_cast<size_t>(k)] == want;
              }
        EXPECT_TRUE(ok) << "permutation " << perm[0] << perm[1] << perm[2] << perm[3] << ", " << from << " to " << dt
                        << (strided_dst ? ", strided destination" : "");
      }
    }
    ++permutations;
  } while (std::next_permutation(perm.begin(), perm.end()));
  EXPECT_EQ(permutations, 24);
}

TEST(Tensor, PrintsLikePyTorch) {
  EXPECT_EQ(from_vector<float>({1.5f, -2.f}, {2}).str(), "tensor([ 1.5000, -2.0000])");
  EXPECT_EQ(from_vector<double>({1, 2, 3, 4}, {2, 2}).str(), "tensor([[1., 2.],\n        [3., 4.]], dtype=f64)");
  EXPECT_EQ(arange(3, kI64).str(), "tensor([0, 1, 2])");
  EXPECT_EQ(scalar_tensor(2).str(), "tensor(2.)");
  EXPECT_EQ(zeros({0}).str(), "tensor([], size=[0])");
  Tensor p = ones({2}).set_requires_grad();
  EXPECT_EQ(p.str(), "tensor([1., 1.], requires_grad=true)");
  EXPECT_EQ(mul(p, 2.0).str(), "tensor([2., 2.], grad_fn=<MulBackward>)");
  const std::string big = arange(2000, kF32).str();
  EXPECT_NE(big.find("..."), std::string::npos);
  EXPECT_NE(big.find("1999."), std::string::npos);
  EXPECT_LT(big.size(), 200u);
  EXPECT_EQ(from_vector<bool>({true, false}).str(), "tensor([ True, False], dtype=bool)");
}

TEST(Device, ParsesAndPrints) {
  EXPECT_EQ(Device::parse("cpu"), kCPU);
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::cuda(1).str(), "cuda:1");
  EXPECT_THROW(Device::parse("gpu"), Error);
  EXPECT_THROW(Device::parse("cuda:x"), Error);
}
