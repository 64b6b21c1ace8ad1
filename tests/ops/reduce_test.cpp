#include "test_util.h"

#include <limits>

#include "ops/cpu/reduce_loop.h"

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

// ---------------------------------------------------------------------------------------------
// max, min, argmax, argmin
// ---------------------------------------------------------------------------------------------

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

std::vector<int64_t> i64s(const Tensor& t) { return t.to_vector<int64_t>(); }
std::vector<double> f64s(const Tensor& t) { return t.to_vector<double>(); }

// Restores the thread count when a test that changes it ends.
struct ThreadsGuard {
  int saved = get_num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};
}  // namespace

TEST(ReduceMax, KnownValuesAndFirstIndexOnTies) {
  // Hand-computed: ties (5, 5 in row 0; 7, 7 in row 1) give the first index, as torch.max(dim).
  Tensor x = from_vector<float>({1, 5, 5, 7, -2, 7}, {2, 3});
  EXPECT_EQ(max(x).item<float>(), 7.f);
  EXPECT_EQ(max(x).dim(), 0);
  EXPECT_EQ(min(x).item<float>(), -2.f);
  auto [v1, i1] = max(x, 1);
  EXPECT_EQ(v1.to_vector<float>(), (std::vector<float>{5, 7}));
  EXPECT_EQ(i64s(i1), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(i1.dtype(), kI64);
  auto [v0, i0] = max(x, 0);
  EXPECT_EQ(v0.to_vector<float>(), (std::vector<float>{7, 5, 7}));
  EXPECT_EQ(i64s(i0), (std::vector<int64_t>{1, 0, 1}));
  auto [mv, mi] = min(x, -1, /*keepdim=*/true);
  EXPECT_EQ(mv.sizes(), (Shape{2, 1}));
  EXPECT_EQ(mv.to_vector<float>(), (std::vector<float>{1, -2}));
  EXPECT_EQ(i64s(mi), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(argmax(x).item<int64_t>(), 3);  // flat index of the first 7
  EXPECT_EQ(argmin(x).item<int64_t>(), 4);
  EXPECT_EQ(argmax(x, {}, /*keepdim=*/true).sizes(), (Shape{1, 1}));
  EXPECT_EQ(i64s(argmax(x, 1)), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(i64s(argmin(x, 0, true)), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(argmin(x, 0, true).sizes(), (Shape{1, 3}));
  EXPECT_EQ(amax(x, {0, 1}).item<float>(), 7.f);
  EXPECT_EQ(amin(x, {1}, true).to_vector<float>(), (std::vector<float>{1, -2}));
  // Integers, a non-contiguous view, -inf everywhere, a 0-dim tensor.
  Tensor xi = from_vector<int32_t>({3, -7, 9, 9}, {2, 2});
  EXPECT_EQ(max(xi).item<int64_t>(), 9);
  EXPECT_EQ(max(xi).dtype(), kI32);
  EXPECT_EQ(i64s(argmin(transpose(xi, 0, 1), 1)), (std::vector<int64_t>{0, 0}));  // rows [3, 9], [-7, 9]
  EXPECT_EQ(i64s(argmax(transpose(xi, 0, 1), 1)), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(max(full({3}, -kInf)).item<double>(), -kInf);
  EXPECT_EQ(argmax(full({3}, -kInf)).item<int64_t>(), 0);
  auto [sv, si] = max(scalar_tensor(2.5), 0);
  EXPECT_EQ(sv.item<float>(), 2.5f);
  EXPECT_EQ(si.item<int64_t>(), 0);
  // bf16 keeps its dtype.
  Tensor xb = from_vector<float>({1, 4, 2}, {3}, kBF16);
  EXPECT_EQ(max(xb).dtype(), kBF16);
  EXPECT_EQ(max(xb).item<float>(), 4.f);
}

TEST(ReduceMax, NaNPropagatesLikePyTorch) {
  // PyTorch 1.13: torch.max(tensor([[1., nan, 3., nan]]), 1) -> (values=[nan], indices=[1]).
  Tensor x = from_vector<double>({1, kNaN, 3, kNaN}, {1, 4});
  auto [v, i] = max(x, 1);
  EXPECT_TRUE(std::isnan(v.item<double>()));
  EXPECT_EQ(i.item<int64_t>(), 1);
  auto [mv, mi] = min(x, 1);
  EXPECT_TRUE(std::isnan(mv.item<double>()));
  EXPECT_EQ(mi.item<int64_t>(), 1);
  EXPECT_TRUE(std::isnan(max(x).item<double>()));
  EXPECT_TRUE(std::isnan(amin(x, {1}).item<double>()));
  EXPECT_EQ(argmax(x).item<int64_t>(), 1);
  // A NaN in the middle of a long contiguous run (lanes) and after it.
  Tensor y = zeros({1000}, kF64);
  y.data<double>()[700] = kNaN;
  y.data<double>()[900] = kNaN;
  y.data<double>()[10] = 5;
  EXPECT_EQ(argmax(y).item<int64_t>(), 700);
  EXPECT_EQ(argmin(y).item<int64_t>(), 700);
  EXPECT_TRUE(std::isnan(max(y).item<double>()));
}

TEST(ReduceMax, BackwardGoesToFirstIndexOrIsSharedAmongTies) {
  // PyTorch 1.13 gradients (of .sum() of the result):
  //   x.max() on [1, 3, 3, 2] -> [0, .5, .5, 0]; x.max(0)[0] -> [0, 1, 0, 0];
  //   amax(x, 1) on [[1, 3, 3], [2, 2, 0]] -> [[0, .5, .5], [.5, .5, 0]];
  //   x.max() on [1, nan, 3, nan] -> [0, .5, 0, .5].
  Tensor x = from_vector<double>({1, 3, 3, 2}).set_requires_grad();
  EXPECT_EQ(f64s(autograd::grad({max(x)}, {x})[0]), (std::vector<double>{0, .5, .5, 0}));
  EXPECT_EQ(f64s(autograd::grad({max(x, 0).values}, {x})[0]), (std::vector<double>{0, 1, 0, 0}));
  Tensor y = from_vector<double>({1, 3, 3, 2, 2, 0}, {2, 3}).set_requires_grad();
  EXPECT_EQ(f64s(autograd::grad({sum(amax(y, {1}))}, {y})[0]), (std::vector<double>{0, .5, .5, .5, .5, 0}));
  EXPECT_EQ(f64s(autograd::grad({sum(min(y, 1).values)}, {y})[0]), (std::vector<double>{1, 0, 0, 0, 0, 1}));
  Tensor z = from_vector<double>({1, kNaN, 3, kNaN}).set_requires_grad();
  EXPECT_EQ(f64s(autograd::grad({max(z)}, {z})[0]), (std::vector<double>{0, .5, 0, .5}));
}

TEST(ReduceMax, Errors) {
  Tensor x = zeros({2, 3});
  try {
    max(x, 2);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("dim 2 out of range"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("-2 to 1"), std::string::npos) << e.message();
  }
  EXPECT_THROW(argmax(x, -3), Error);
  EXPECT_THROW(amax(x, {1, -1}), Error);  // repeated dim
  try {
    max(zeros({2, 0}), 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("dim 1 of size 0"), std::string::npos) << e.message();
  }
  EXPECT_THROW(max(zeros({0})), Error);
  EXPECT_THROW(argmin(zeros({0, 2})), Error);
  EXPECT_THROW(max(from_vector<bool>({true})), Error);
  // Reducing a non-empty dim of a tensor with an empty other dim is fine (PyTorch agrees).
  auto [v, i] = max(zeros({0, 2}), 1);
  EXPECT_EQ(v.sizes(), (Shape{0}));
  EXPECT_EQ(i.sizes(), (Shape{0}));
}

TEST(ReduceGradcheck, MaxMinAmax) {
  // randn values are distinct (no ties), so the max is differentiable at every input.
  Tensor x = rand_leaf({3, 4, 5}, 81);
  for (int64_t d : {0, 1, 2, -1}) {
    for (bool keep : {false, true}) {
      EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& in) { return max(in[0], d, keep).values; }, {x}))) << d;
      EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& in) { return min(in[0], d, keep).values; }, {x}))) << d;
    }
  }
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return max(in[0]); }, {x})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return min(in[0]); }, {x})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return amax(in[0], {0, 2}, true); }, {x})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return amin(in[0], {1}); }, {x})));
  Tensor xt = rand_leaf_transposed({4, 6}, 82);  // non-contiguous
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return max(in[0], 0).values; }, {xt})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return amin(in[0], {1}); }, {xt})));
  Tensor one = rand_leaf({3, 1}, 83);  // a size-1 reduced dim
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return max(in[0], 1).values; }, {one})));
  Tensor s = rand_leaf({}, 84);
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return max(in[0], 0).values; }, {s})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return max(in[0]); }, {s})));
  Tensor e = rand_leaf({0, 3}, 85);  // empty output
  Tensor out = max(e, 1).values;
  EXPECT_EQ(out.sizes(), (Shape{0}));
  EXPECT_EQ(autograd::grad({sum(out)}, {e})[0].sizes(), (Shape{0, 3}));
}

TEST(ReduceMax, LargeInputsAllStrategiesAndSplitsKeepTheFirstIndex) {
  ThreadsGuard guard;
  // Four threads even on a small machine, so full reductions split their range across threads.
  set_num_threads(4);
  const int64_t n = (1 << 22) + 3;
  Tensor x = zeros({n}, kF32);
  float* p = x.data<float>();
  p[1000] = 5;
  p[n - 2] = 5;  // a tie in the last split: the first index must still win
  p[77] = -3;
  p[n - 1] = -3;
  EXPECT_EQ(argmax(x).item<int64_t>(), 1000);
  EXPECT_EQ(argmin(x).item<int64_t>(), 77);
  EXPECT_EQ(max(x).item<float>(), 5.f);
  auto [v, i] = max(reshape(x, {1, n}), 1);
  EXPECT_EQ(i.item<int64_t>(), 1000);

  // Column arg-reductions (outer strategy) of a tall matrix: few blocks, so the rows are split too.
  Generator g(86);
  Tensor m = randn({20000, 37}, kF32, &g);
  const std::vector<float> mv = m.to_vector<float>();
  auto [cv, ci] = max(m, 0);
  auto [rv, ri] = min(m, 1);
  const std::vector<float> cvv = cv.to_vector<float>(), rvv = rv.to_vector<float>();
  const std::vector<int64_t> civ = i64s(ci), riv = i64s(ri);
  for (int64_t j = 0; j < 37; ++j) {
    int64_t best = 0;
    for (int64_t r = 1; r < 20000; ++r)
      if (mv[static_cast<size_t>(r * 37 + j)] > mv[static_cast<size_t>(best * 37 + j)]) best = r;
    ASSERT_EQ(civ[static_cast<size_t>(j)], best) << "column " << j;
    ASSERT_EQ(cvv[static_cast<size_t>(j)], mv[static_cast<size_t>(best * 37 + j)]);
  }
  for (int64_t r = 0; r < 20000; r += 997) {
    int64_t best = 0;
    for (int64_t j = 1; j < 37; ++j)
      if (mv[static_cast<size_t>(r * 37 + j)] < mv[static_cast<size_t>(r * 37 + best)]) best = j;
    ASSERT_EQ(riv[static_cast<size_t>(r)], best) << "row " << r;
  }
  // The same through a transposed (non-contiguous) view: the inner strategy with strided runs.
  EXPECT_EQ(i64s(argmax(transpose(m, 0, 1), 1)), civ);
  EXPECT_EQ(amax(m, {0}).to_vector<float>(), cvv);
}

// ---------------------------------------------------------------------------------------------
// var, std, logsumexp, norm
// ---------------------------------------------------------------------------------------------

TEST(ReduceStats, VarStdKnownValues) {
  // PyTorch 1.13 (f64): x = [[0.5, -1.5, 2.0], [3.0, 0.25, -0.75]]
  //   var(x, 1) = [3.0833333333, 3.7708333333]; var(x, 0, unbiased=False) = [1.5625, 0.765625, 1.890625]
  //   std_dev(x) = 1.6782927834; var(x, (0, 1), correction=2) = 3.5208333333
  Tensor x = from_vector<double>({0.5, -1.5, 2.0, 3.0, 0.25, -0.75}, {2, 3});
  EXPECT_TRUE(all_close(var(x, {1}), from_vector<double>({3.0833333333, 3.7708333333}), 1e-9));
  EXPECT_TRUE(all_close(var(x, {0}, 0), from_vector<double>({1.5625, 0.765625, 1.890625}), 1e-12));
  EXPECT_NEAR(std_dev(x).item<double>(), 1.6782927834, 1e-9);
  EXPECT_NEAR(var(x, {0, 1}, 2.0).item<double>(), 3.5208333333, 1e-9);
  EXPECT_EQ(var(x, {1}, 1.0, true).sizes(), (Shape{2, 1}));
  EXPECT_TRUE(all_close(std_dev(transpose(x, 0, 1), {0}), from_vector<double>({std::sqrt(3.0833333333333333),
                                                                            std::sqrt(3.7708333333333333)}), 1e-12));
  // PyTorch 1.13: var([1, 2], correction=2) = inf; var([1.]) = nan (0 / 0).
  EXPECT_EQ(var(from_vector<float>({1, 2}), {}, 2.0).item<float>(), static_cast<float>(kInf));
  EXPECT_TRUE(std::isnan(var(from_vector<float>({1})).item<float>()));
  EXPECT_TRUE(std::isnan(var(zeros({0})).item<float>()));
  EXPECT_THROW(var(from_vector<int64_t>({1, 2})), Error);
}

// var(x, {1}, true) must not compile (the bool would be the correction); ints and doubles do.
template <typename C>
constexpr bool var_takes_correction = requires(const Tensor& t, C c) { var(t, std::vector<int64_t>{1}, c); };
static_assert(!var_takes_correction<bool>);
static_assert(var_takes_correction<int> && var_takes_correction<double>);

TEST(ReduceStats, VarIsAccurateOnLargeF32InputsWithALargeMean) {
  // Mean 1e4, spread 1e-2: a one-pass E[x^2] - E[x]^2 would lose about four digits even in f64.
  Generator g(87);
  Tensor x = add(mul(randn({1 << 20}, kF32, &g), 0.01), 1e4);
  const std::vector<float> v = x.to_vector<float>();
  double mean = 0;
  for (float e : v) mean += e;
  mean /= static_cast<double>(v.size());
  double ss = 0;
  for (float e : v) ss += (e - mean) * (e - mean);
  const double ref = ss / static_cast<double>(v.size() - 1);
  EXPECT_NEAR(var(x).item<double>(), ref, ref * 1e-5);
  EXPECT_NEAR(std_dev(x, {0}, 0.0).item<double>(), std::sqrt(ss / static_cast<double>(v.size())), 1e-6);

  // Row and column variances (inner and outer strategies) against nested loops.
  Tensor m = randn({300, 257}, kF32, &g);
  const std::vector<float> mv = m.to_vector<float>();
  const std::vector<float> cols = var(m, {0}).to_vector<float>(), rows = var(m, {1}, 0.0).to_vector<float>();
  for (int j = 0; j < 257; j += 16) {
    double mu = 0, s2 = 0;
    for (int i = 0; i < 300; ++i) mu += mv[static_cast<size_t>(i * 257 + j)];
    mu /= 300;
    for (int i = 0; i < 300; ++i) s2 += std::pow(mv[static_cast<size_t>(i * 257 + j)] - mu, 2);
    EXPECT_NEAR(cols[static_cast<size_t>(j)], s2 / 299, 1e-5) << "column " << j;
  }
  for (int i = 0; i < 300; i += 17) {
    double mu = 0, s2 = 0;
    for (int j = 0; j < 257; ++j) mu += mv[static_cast<size_t>(i * 257 + j)];
    mu /= 257;
    for (int j = 0; j < 257; ++j) s2 += std::pow(mv[static_cast<size_t>(i * 257 + j)] - mu, 2);
    EXPECT_NEAR(rows[static_cast<size_t>(i)], s2 / 257, 1e-5) << "row " << i;
  }
}

TEST(ReduceStats, LogsumexpKnownValuesAndStability) {
  // PyTorch 1.13: logsumexp([1, 2, 3]) = 3.4076058865; on x = [[0.5, -1.5, 2.0], [3.0, 0.25, -0.75]]
  // (f64): dim 1 -> [2.2258020492, 3.0838314662], dim 0 -> [3.0788897343, 0.4102241504, 2.0619675890].
  EXPECT_NEAR(logsumexp(from_vector<float>({1, 2, 3}), {0}).item<double>(), 3.4076058865, 1e-6);
  Tensor x = from_vector<double>({0.5, -1.5, 2.0, 3.0, 0.25, -0.75}, {2, 3});
  EXPECT_TRUE(all_close(logsumexp(x, {1}), from_vector<double>({2.2258020492, 3.0838314662}), 1e-9));
  EXPECT_TRUE(all_close(logsumexp(x, {0}), from_vector<double>({3.0788897343, 0.4102241504, 2.0619675890}), 1e-9));
  EXPECT_TRUE(all_close(logsumexp(transpose(x, 0, 1), {0}, true), reshape(logsumexp(x, {1}), {1, 2}), 1e-12));
  // exp(1000) overflows; subtracting the max first does not: 1000 + log 2.
  EXPECT_NEAR(logsumexp(from_vector<float>({1000, 1000}), {0}).item<double>(), 1000 + std::log(2.0), 1e-3);
  EXPECT_NEAR(logsumexp(from_vector<float>({-1000, -1000}), {}).item<double>(), -1000 + std::log(2.0), 1e-3);
  // All -inf -> -inf; a +inf -> +inf; NaN -> NaN; an empty dim -> -inf (PyTorch 1.13 agrees).
  EXPECT_EQ(logsumexp(full({3}, -kInf), {0}).item<double>(), -kInf);
  EXPECT_EQ(logsumexp(from_vector<double>({1, kInf}), {0}).item<double>(), kInf);
  EXPECT_TRUE(std::isnan(logsumexp(from_vector<double>({1, kNaN}), {0}).item<double>()));
  EXPECT_EQ(f64s(logsumexp(zeros({2, 0}), {1})), (std::vector<double>{-kInf, -kInf}));
  // A long row in f32 (lanes and split ranges) against a direct f64 computation.
  Generator g(88);
  Tensor big = randn({1 << 20}, kF32, &g);
  const std::vector<float> bv = big.to_vector<float>();
  double mx = -kInf, s = 0;
  for (float e : bv) mx = std::max(mx, static_cast<double>(e));
  for (float e : bv) s += std::exp(e - mx);
  EXPECT_NEAR(logsumexp(big, {0}).item<double>(), mx + std::log(s), 1e-5);
}

TEST(ReduceStats, NormKnownValues) {
  // PyTorch 1.13 torch.linalg.vector_norm on x = [[0.5, -1.5, 2.0], [3.0, 0.25, -0.75]] (f64):
  //   p      all dims        dim 0
  //   2      4.0155946011    [3.0413812651, 1.5206906326, 2.1360009363]
  //   1      8               [3.5, 1.75, 2.75]
  //   inf    3               [3, 1.5, 2]
  //   -inf   0.25            [0.5, 0.25, 0.75]
  //   0      6               [2, 2, 2]
  //   3      3.3893989299    [3.0046225035, 1.5023112517, 2.0345557611]
  //   0.5    41.5269587222   [5.9494897428, 2.9747448714, 5.1994897428]
  Tensor x = from_vector<double>({0.5, -1.5, 2.0, 3.0, 0.25, -0.75}, {2, 3});
  struct Row {
    double p, all;
    std::vector<double> dim0;
  };
  const std::vector<Row> rows = {
      {2, 4.0155946011, {3.0413812651, 1.5206906326, 2.1360009363}},
      {1, 8, {3.5, 1.75, 2.75}},
      {kInf, 3, {3, 1.5, 2}},
      {-kInf, 0.25, {0.5, 0.25, 0.75}},
      {0, 6, {2, 2, 2}},
      {3, 3.3893989299, {3.0046225035, 1.5023112517, 2.0345557611}},
      {0.5, 41.5269587222, {5.9494897428, 2.9747448714, 5.1994897428}},
  };
  for (const Row& r : rows) {
    EXPECT_NEAR(norm(x, r.p).item<double>(), r.all, 1e-9) << "p " << r.p;
    EXPECT_TRUE(all_close(norm(x, r.p, {0}), from_vector<double>(r.dim0), 1e-9)) << "p " << r.p;
    EXPECT_TRUE(all_close(norm(transpose(x, 0, 1), r.p, {1}, true), reshape(from_vector<double>(r.dim0), {3, 1}), 1e-9))
        << "p " << r.p;
  }
  EXPECT_EQ(norm(from_vector<float>({3, -4})).item<float>(), 5.f);
  EXPECT_EQ(norm(zeros({0})).item<float>(), 0.f);
  // The L2 norm of a large f32 tensor (gradient clipping) accumulates in f64.
  Tensor big = full({1 << 22}, 0.5, kF32);
  EXPECT_EQ(norm(big).item<double>(), 0.5 * std::sqrt(static_cast<double>(1 << 22)));
  EXPECT_EQ(norm(from_vector<float>({1, 2, 2}, {3}, kBF16)).dtype(), kBF16);
  try {
    norm(x, -1.0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("p must be >= 0"), std::string::npos) << e.message();
  }
  EXPECT_THROW(norm(zeros({0}), kInf), Error);  // no identity
  EXPECT_THROW(norm(x, 2.0, {2}), Error);
  EXPECT_THROW(norm(from_vector<int64_t>({3, 4})), Error);
}

TEST(ReduceStats, BackwardAtKinksMatchesPyTorch) {
  // PyTorch 1.13 gradients of .sum() of the result:
  //   vector_norm(x, inf) on [-3, 3, 1] -> [-0.5, 0.5, 0]; vector_norm(x, -inf) on [-1, 3, 1] -> [-0.5, 0, 0.5]
  //   vector_norm(x, 2) on [0, 0, 0] -> [0, 0, 0]; std_dev(x, 1) on [[2, 2, 2], [1, 2, 4]] ->
  //   [[0, 0, 0], [-0.4364, -0.1091, 0.5455]].
  auto grad_of = [](const std::function<Tensor(const Tensor&)>& f, std::vector<double> v, Shape s = {}) {
    Tensor x = from_vector<double>(v, s).set_requires_grad();
    return f64s(autograd::grad({sum(f(x))}, {x})[0]);
  };
  EXPECT_EQ(grad_of([](const Tensor& x) { return norm(x, kInf); }, {-3, 3, 1}), (std::vector<double>{-0.5, 0.5, 0}));
  EXPECT_EQ(grad_of([](const Tensor& x) { return norm(x, -kInf); }, {-1, 3, 1}), (std::vector<double>{-0.5, 0, 0.5}));
  EXPECT_EQ(grad_of([](const Tensor& x) { return norm(x); }, {0, 0, 0}), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(grad_of([](const Tensor& x) { return norm(x, 3.0); }, {0, 0}), (std::vector<double>{0, 0}));
  EXPECT_EQ(grad_of([](const Tensor& x) { return norm(x, 0.0); }, {1, 2}), (std::vector<double>{0, 0}));
  const std::vector<double> gs = grad_of([](const Tensor& x) { return std_dev(x, {1}); }, {2, 2, 2, 1, 2, 4}, {2, 3});
  const std::vector<double> want = {0, 0, 0, -0.4364, -0.1091, 0.5455};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(gs[i], want[i], 1e-4) << i;
}

TEST(ReduceGradcheck, VarStdLogsumexpNorm) {
  Tensor x = rand_leaf({3, 4, 5}, 91);
  const std::vector<std::vector<int64_t>> dim_sets = {{}, {0}, {2}, {0, 2}, {-1, -2}};
  for (const auto& dims : dim_sets) {
    for (bool keep : {false, true}) {
      for (double c : {0.0, 1.0}) {
        EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& in) { return var(in[0], dims, c, keep); }, {x})));
        EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& in) { return std_dev(in[0], dims, c, keep); }, {x})));
      }
      EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& in) { return logsumexp(in[0], dims, keep); }, {x})));
      // randn inputs are away from 0 and from ties, where norms have kinks.
      for (double p : {2.0, 1.0, 3.0, 1.5, 0.5, kInf, -kInf})
        EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& in) { return norm(in[0], p, dims, keep); }, {x})))
            << "p " << p;
    }
  }
  Tensor xt = rand_leaf_transposed({4, 6}, 92);
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return var(in[0], {0}); }, {xt})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return std_dev(in[0], {1}, 0.0, true); }, {xt})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return logsumexp(in[0], {1}); }, {xt})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return norm(in[0], 2.0, {0}); }, {xt})));
  Tensor one = rand_leaf({3, 1}, 93);  // size-1 reduced dim
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return logsumexp(in[0], {1}); }, {one})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return var(in[0], {1}, 0.0); }, {one})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return norm(in[0], 2.0, {1}); }, {one})));
  Tensor s = rand_leaf({}, 94);
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return logsumexp(in[0], {}); }, {s})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return norm(in[0]); }, {s})));
  // Empty reductions: gradients of the right (empty) shape.
  Tensor e = rand_leaf({2, 0}, 95);
  EXPECT_EQ(autograd::grad({sum(logsumexp(e, {0}))}, {e})[0].sizes(), (Shape{2, 0}));
  EXPECT_EQ(autograd::grad({norm(e)}, {e})[0].sizes(), (Shape{2, 0}));
}

TEST(ReduceStats, HalfTypesComputeInF32) {
  Generator g(96);
  Tensor x32 = randn({4, 300}, kF32, &g);
  for (DType dt : {kF16, kBF16}) {
    Tensor x = x32.to(dt);
    Tensor xr = x.to(kF32);  // the rounded values, so only the arithmetic is compared
    EXPECT_EQ(var(x, {1}).dtype(), dt);
    EXPECT_TRUE(all_close(var(x, {1}).to(kF32), var(xr, {1}), 1e-2)) << dt;
    EXPECT_TRUE(all_close(logsumexp(x, {0}).to(kF32), logsumexp(xr, {0}), 1e-2)) << dt;
    EXPECT_TRUE(all_close(norm(x, 2.0, {1}).to(kF32), norm(xr, 2.0, {1}), 1e-2)) << dt;
    EXPECT_EQ(i64s(argmax(x, 1)), i64s(argmax(xr, 1))) << dt;
    EXPECT_EQ(max(x, 0).values.to(kF32).to_vector<float>(), max(xr, 0).values.to_vector<float>()) << dt;
  }
}

TEST(ReduceLoop, OriginalInterfaceStillWorks) {
  // reduce_loop(x, dims, out, init, combine, finalize), the interface kernels outside this family
  // may use, now runs on reduce_with.
  Tensor x = reshape(arange(12, kF32), {3, 4});
  for (const Tensor& in : {x, transpose(contiguous(transpose(x, 0, 1)), 0, 1)}) {
    std::vector<double> out(3);
    cpu::reduce_loop<float, double, double>(
        in, {1}, out.data(), 0.0, [](double a, float v) { return a + v * v; }, [](double a) { return a + 0.5; });
    EXPECT_EQ(out, (std::vector<double>{14.5, 126.5, 366.5}));  // 0+1+4+9, 16+25+36+49, 64+81+100+121
  }
}
