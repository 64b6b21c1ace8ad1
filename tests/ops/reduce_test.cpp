#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using autograd::TensorList;

namespace {
// Direct reference: sums x[i, j, k] over the chosen dims by nested loops on a [2, 3, 4] tensor.
std::vector<double> naive_sum_3d(const std::vector<double>& v, bool r0, bool r1, bool r2) {
  const int n0 = 2, n1 = 3, n2 = 4;
  const int m0 = r0 ? 1 : n0, m1 = r1 ? 1 : n1, m2 = r2 ? 1 : n2;
  std::vector<double> out(static_cast<size_t>(m0 * m1 * m2), 0.0);
  for (int i = 0; i < n0; ++i)
    for (int j = 0; j < n1; ++j)
      for (int k = 0; k < n2; ++k) {
        const int o = ((r0 ? 0 : i) * m1 + (r1 ? 0 : j)) * m2 + (r2 ? 0 : k);
        out[static_cast<size_t>(o)] += v[static_cast<size_t>((i * n1 + j) * n2 + k)];
      }
  return out;
}
}  // namespace

TEST(Reduce, KnownValues) {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(sum(a).item<float>(), 21.f);
  EXPECT_EQ(sum(a).dim(), 0);
  EXPECT_EQ(sum(a, {0}).to_vector<float>(), (std::vector<float>{5, 7, 9}));
  EXPECT_EQ(sum(a, {1}).to_vector<float>(), (std::vector<float>{6, 15}));
  EXPECT_EQ(sum(a, {-1}, true).sizes(), (Shape{2, 1}));
  EXPECT_EQ(sum(a, {0, 1}, true).sizes(), (Shape{1, 1}));
  EXPECT_EQ(mean(a).item<float>(), 3.5f);
  EXPECT_EQ(mean(a, {0}).to_vector<float>(), (std::vector<float>{2.5, 3.5, 4.5}));
  EXPECT_EQ(sum(from_vector<int32_t>({1, 2, 3})).dtype(), kI64);
  EXPECT_EQ(sum(from_vector<bool>({true, true, false})).item<int64_t>(), 2);
  EXPECT_EQ(sum(zeros({0, 3}), {0}).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_TRUE(std::isnan(mean(zeros({0})).item<float>()));
  EXPECT_EQ(sum(scalar_tensor(4)).item<float>(), 4.f);
  EXPECT_THROW(sum(a, {0, 0}), Error);
  EXPECT_THROW(mean(from_vector<int64_t>({1})), Error);
}

TEST(Reduce, EveryDimSubsetMatchesNestedLoops) {
  Generator g(3);
  Tensor x = randn({2, 3, 4}, kF64, &g);
  const std::vector<double> v = x.to_vector<double>();
  for (int mask = 1; mask < 8; ++mask) {
    std::vector<int64_t> dims;
    for (int d = 0; d < 3; ++d)
      if (mask & (1 << d)) dims.push_back(d);
    const std::vector<double> ref = naive_sum_3d(v, mask & 1, mask & 2, mask & 4);
    const Tensor got = sum(x, dims, true);
    const std::vector<double> gv = got.to_vector<double>();
    ASSERT_EQ(gv.size(), ref.size()) << "mask " << mask;
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(gv[i], ref[i], 1e-12) << "mask " << mask << " elem " << i;
    // The same reduction through a non-contiguous view of the same values.
    Tensor xt = permute(contiguous(permute(x, {2, 0, 1})), {1, 2, 0});
    ASSERT_FALSE(xt.is_contiguous());
    EXPECT_TRUE(all_close(sum(xt, dims, true), got, 1e-12)) << "mask " << mask;
  }
}

TEST(Reduce, OuterAndInnerStrategiesAgreeOnLargeInputs) {
  // Column sums of a wide matrix take the outer (vectorized) path, row sums the inner one.
  Generator g(4);
  Tensor x = randn({300, 257}, kF32, &g);
  const std::vector<float> v = x.to_vector<float>();
  std::vector<double> cols(257, 0.0), rows(300, 0.0);
  for (int i = 0; i < 300; ++i)
    for (int j = 0; j < 257; ++j) {
      cols[static_cast<size_t>(j)] += v[static_cast<size_t>(i * 257 + j)];
      rows[static_cast<size_t>(i)] += v[static_cast<size_t>(i * 257 + j)];
    }
  const std::vector<float> c = sum(x, {0}).to_vector<float>(), r = sum(x, {1}).to_vector<float>();
  for (size_t j = 0; j < cols.size(); ++j) EXPECT_NEAR(c[j], cols[j], 1e-4);
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_NEAR(r[i], rows[i], 1e-4);
}

TEST(Reduce, F32SumsDoNotDrift) {
  // 2^25 ones: a naive f32 accumulator stops growing at 2^24 (1 + 2^24 rounds back to 2^24).
  Tensor x = ones({1 << 25}, kF32);
  EXPECT_EQ(sum(x).item<double>(), static_cast<double>(1 << 25));
  Tensor y = full({1 << 20}, 0.1, kF32);
  EXPECT_NEAR(sum(y).item<double>(), 0.1f * (1 << 20), 1e-2);
}

TEST(ReduceGradcheck, SumAndMeanOverDims) {
  Tensor x = rand_leaf({2, 3, 4}, 61);
  for (bool keep : {false, true}) {
    for (std::vector<int64_t> dims : {std::vector<int64_t>{}, {0}, {1}, {2}, {0, 2}, {-1, -2}}) {
      EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& in) { return sum(in[0], dims, keep); }, {x})))
          << "sum dims " << dims.size() << " keepdim " << keep;
      EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& in) { return mean(in[0], dims, keep); }, {x})))
          << "mean dims " << dims.size() << " keepdim " << keep;
    }
  }
  Tensor xt = rand_leaf_transposed({3, 4}, 62);
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return sum(in[0], {0}); }, {xt})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return mean(in[0]); }, {xt})));
  Tensor one = rand_leaf({1, 1}, 63);
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return sum(in[0], {1}); }, {one})));
  Tensor s = rand_leaf({}, 64);
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return mean(in[0]); }, {s})));
}

TEST(Reduce, SumToUndoesBroadcasting) {
  Tensor x = reshape(arange(24, kF64), {2, 3, 4});
  EXPECT_EQ(sum_to(x, {4}).to_vector<double>(), sum(x, {0, 1}).to_vector<double>());
  EXPECT_EQ(sum_to(x, {3, 1}).sizes(), (Shape{3, 1}));
  EXPECT_EQ(sum_to(x, {3, 1}).to_vector<double>(), sum(x, {0, 2}).to_vector<double>());
  EXPECT_EQ(sum_to(x, {}).item<double>(), 276.0);
  EXPECT_THROW(sum_to(x, {5}), Error);
}
