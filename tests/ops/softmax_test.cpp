#include <limits>

#include "ops/math/softmax.h"
#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using autograd::TensorList;

namespace {

// Direct reference: softmax or log-softmax of row-major `v` (shape `s`) along `dim`, in f64, by
// walking every line along dim with plain loops (no Trident kernel involved).
std::vector<double> ref_softmax(const std::vector<double>& v, const Shape& s, int64_t dim, bool log) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    if (d < dim) outer *= s[static_cast<size_t>(d)];
    if (d > dim) inner *= s[static_cast<size_t>(d)];
  }
  const int64_t len = s[static_cast<size_t>(dim)];
  std::vector<double> out(v.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t l) { return static_cast<size_t>((o * len + l) * inner + i); };
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t l = 0; l < len; ++l) m = std::max(m, v[at(l)]);
      double z = 0;
      for (int64_t l = 0; l < len; ++l) z += std::exp(v[at(l)] - m);
      for (int64_t l = 0; l < len; ++l) out[at(l)] = log ? v[at(l)] - m - std::log(z) : std::exp(v[at(l)] - m) / z;
    }
  return out;
}

const std::vector<double> kX = {0.5, -1.25, 2.0, 0.0, 3.0, 3.0, -2.5, 1.5, -0.75, 0.25, 1.0, -4.0};
const std::vector<double> kG = {1.0, -0.5, 0.25, 2.0, 0.0, 1.5, -1.0, 0.5, -2.0, 0.75, 0.5, 1.0};

}  // namespace

TEST(Softmax, MatchesPyTorchOnBothDims) {
  // PyTorch 1.13 produced these (torch.softmax / torch.log_softmax of kX as a [3, 4] f64 tensor).
  const std::vector<double> sm1 = {0.15969355003210822, 0.027750577932680404, 0.7156968377823844, 0.09685903425282705,
                                   0.4489908395620444,  0.4489908395620444,   0.001834922939254165, 0.10018339793665693,
                                   0.1051341338295936,  0.2857842055397657,   0.605005167875324,  0.004076492755316738};
  const std::vector<double> sm0 = {0.07424456843449029, 0.013229770440367104, 0.7251692419269782,   0.1818180261413961,
                                   0.9044840065682136,  0.9274785119739579,   0.008055902598206599, 0.8148518605483356,
                                   0.021271424997296118, 0.05929171758567485, 0.2667748554748152,   0.0033301133102682425};
  const std::vector<double> lsm1 = {-1.8344986126036624, -3.5844986126036624, -0.33449861260366254, -2.3344986126036624,
                                    -0.8007527933142745, -0.8007527933142745, -6.300752793314275,   -2.3007527933142744,
                                    -2.2525182790450935, -1.2525182790450935, -0.5025182790450935,  -5.502518279045093};
  const std::vector<double> lsm0 = {-2.6003906563725323, -4.325285652451986,  -0.3213502142290125, -1.7047489484611131,
                                    -0.10039065637253247, -0.07528565245198594, -4.821350214229012, -0.20474894846111308,
                                    -3.8503906563725323, -2.825285652451986,  -1.3213502142290126, -5.704748948461113};
  const Tensor x = from_vector<double>(kX, {3, 4});
  EXPECT_TRUE(all_close(softmax(x, 1), from_vector<double>(sm1, {3, 4}), 1e-14));
  EXPECT_TRUE(all_close(softmax(x, -1), from_vector<double>(sm1, {3, 4}), 1e-14));
  EXPECT_TRUE(all_close(softmax(x, 0), from_vector<double>(sm0, {3, 4}), 1e-14));
  EXPECT_TRUE(all_close(log_softmax(x, 1), from_vector<double>(lsm1, {3, 4}), 1e-14));
  EXPECT_TRUE(all_close(log_softmax(x, 0), from_vector<double>(lsm0, {3, 4}), 1e-14));
  EXPECT_TRUE(all_close(log_softmax(x, -2), from_vector<double>(lsm0, {3, 4}), 1e-14));
  // f32 through the vectorized exp (NOTE [Softmax exp]): within a few f32 ulps.
  const Tensor xf = x.to(kF32);
  EXPECT_TRUE(all_close(softmax(xf, 1), from_vector<double>(sm1, {3, 4}), 1e-6, 1e-9));
  EXPECT_TRUE(all_close(softmax(xf, 0), from_vector<double>(sm0, {3, 4}), 1e-6, 1e-9));
  EXPECT_TRUE(all_close(log_softmax(xf, 1), from_vector<double>(lsm1, {3, 4}), 1e-6, 1e-7));
  EXPECT_TRUE(all_close(log_softmax(xf, 0), from_vector<double>(lsm0, {3, 4}), 1e-6, 1e-7));
}

TEST(Softmax, BackwardMatchesPyTorch) {
  // PyTorch 1.13: x.grad after f(x, dim).backward(kG) for x = kX as [3, 4] f64.
  const std::vector<double> sm0 = {0.07189088803028834,  -0.025521175369419415, -0.041061863952238896, 0.222837609952714,
                                   -0.028673697309616407, 0.06578450110263419,  -0.010526034352257446, -0.2235889098371682,
                                   -0.04321719072067193, -0.040263325733214436, 0.051587898304496366,  0.0007512998844542649};
  const std::vector<double> sm1 = {0.07689874600492023, -0.028262868559351458, -0.19213635884383432,  0.14350048139826554,
                                   -0.32405601139979584, 0.3494302479432707,   -0.0031592657911054364, -0.022214970752369386,
                                   -0.2429280773290836, 0.1255595870082138,    0.11455835581343815,    0.0028101345074316897};
  const std::vector<double> lsm0 = {1.0742445684344903, -0.5231520982706425,  0.43129231048174455, 1.3636369085051137,
                                    0.9044840065682136, -0.12308739595442636, -0.9979860243504484, -2.3519815119191745,
                                    -1.978728575002704, 0.646239494225069,    0.5666937138687038,  0.9883446034140612};
  const std::vector<double> lsm1 = {0.5608427374117023, -0.5763140893148712, -1.718166303901557,  1.7336376558047255,
                                    -0.4489908395620444, 1.0510091604379557, -1.0018349229392542, 0.3998166020633431,
                                    -2.0262835334573985, 0.6785539486150586, 0.348748708031169,   0.9989808768111708};
  const Tensor g = from_vector<double>(kG, {3, 4});
  struct Case {
    bool log;
    int64_t dim;
    const std::vector<double>* want;
  };
  for (const Case& c : {Case{false, 0, &sm0}, Case{false, 1, &sm1}, Case{true, 0, &lsm0}, Case{true, 1, &lsm1}}) {
    for (DType dt : {kF64, kF32}) {
      Tensor x = from_vector<double>(kX, {3, 4}).to(dt).set_requires_grad();
      (c.log ? log_softmax(x, c.dim) : softmax(x, c.dim)).backward(g.to(dt));
      const double rtol = dt == kF64 ? 1e-13 : 2e-6, atol = dt == kF64 ? 1e-15 : 1e-7;
      EXPECT_TRUE(all_close(x.grad(), from_vector<double>(*c.want, {3, 4}).to(dt), rtol, atol))
          << (c.log ? "log_softmax" : "softmax") << " dim " << c.dim << " " << dt;
    }
  }
}

TEST(Softmax, EveryDimOfA4DTensorMatchesLoops) {
  // Covers the row kernel (last dim) and the column-block kernel (other dims), f32 and f64,
  // contiguous and not; 70 columns cross a 64-column block boundary.
  const Shape s = {3, 5, 2, 70};
  Generator gen(5);
  const Tensor x64 = mul(randn(s, kF64, &gen), 3.0);
  const std::vector<double> v = x64.to_vector<double>();
  const Tensor x32 = x64.to(kF32);
  const std::vector<double> v32 = x32.to_vector<double>();  // the f32-rounded inputs, for f32's reference
  for (int64_t dim = 0; dim < 4; ++dim) {
    for (bool log : {false, true}) {
      const Tensor want = from_vector<double>(ref_softmax(v, s, dim, log), s);
      auto f = [&](const Tensor& t) { return log ? log_softmax(t, dim) : softmax(t, dim); };
      EXPECT_TRUE(all_close(f(x64), want, 1e-12, 1e-15)) << "dim " << dim << " log " << log;
      EXPECT_TRUE(all_close(f(x32), from_vector<double>(ref_softmax(v32, s, dim, log), s), 1e-6, log ? 1e-6 : 1e-12))
          << "f32 dim " << dim << " log " << log;
      // The same values through a permuted (non-contiguous) view.
      const Tensor xp = permute(contiguous(permute(x64, {3, 1, 0, 2})), {2, 1, 3, 0});
      ASSERT_FALSE(xp.is_contiguous());
      EXPECT_TRUE(all_close(f(xp), want, 1e-12, 1e-15)) << "non-contiguous dim " << dim << " log " << log;
    }
  }
}

TEST(Softmax, WideRowsLikeGpt2Logits) {
  // [4, 50304] f32 rows (GPT-2's padded vocabulary): rows sum to 1 and match an f64 reference.
  const Shape s = {4, 50304};
  Generator gen(6);
  const Tensor x = mul(randn(s, kF32, &gen), 4.0);
  const std::vector<double> v = x.to_vector<double>();
  const Tensor want = from_vector<double>(ref_softmax(v, s, 1, false), s);
  const Tensor y = softmax(x, 1);
  EXPECT_TRUE(all_close(y, want, 2e-6, 1e-12));
  const std::vector<double> rs = sum(y.to(kF64), {1}).to_vector<double>();
  for (double r : rs) EXPECT_NEAR(r, 1.0, 1e-5);
  EXPECT_TRUE(all_close(log_softmax(x, 1), from_vector<double>(ref_softmax(v, s, 1, true), s), 1e-6, 2e-6));
}

TEST(Softmax, LargeLogitsAreStable) {
  // PyTorch 1.13 (f32): softmax([[1000, 0], [-1000, 1000], [1e4, 1e4 - 1]], 1) and log_softmax.
  const std::vector<double> sm = {1.0, 0.0, 0.0, 1.0, 0.7310585975646973, 0.2689414322376251};
  const std::vector<double> lsm = {0.0, -1000.0, -2000.0, 0.0, -0.31326165795326233, -1.31326162815094};
  for (DType dt : {kF32, kF64}) {
    const Tensor x = from_vector<double>({1000, 0, -1000, 1000, 1e4, 1e4 - 1}, {3, 2}).to(dt);
    EXPECT_TRUE(all_close(softmax(x, 1), from_vector<double>(sm, {3, 2}), 1e-6, 1e-12)) << dt;
    EXPECT_TRUE(all_close(log_softmax(x, 1), from_vector<double>(lsm, {3, 2}), 1e-6, 1e-6)) << dt;
    for (double y : softmax(x, 0).to_vector<double>()) EXPECT_TRUE(std::isfinite(y));
  }
  // -inf entries (masked attention scores) get probability 0; a row of all -inf is NaN, as in PyTorch.
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor m = from_vector<double>({0.0, -inf, std::log(3.0), -inf, -inf, -inf}, {2, 3}).to(kF32);
  const std::vector<float> y = softmax(m, 1).to_vector<float>();
  EXPECT_NEAR(y[0], 0.25f, 1e-7);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_NEAR(y[2], 0.75f, 1e-7);
  for (int i = 3; i < 6; ++i) EXPECT_TRUE(std::isnan(y[static_cast<size_t>(i)]));
  EXPECT_EQ(log_softmax(m, 1).to_vector<float>()[1], -std::numeric_limits<float>::infinity());
}

TEST(Softmax, ExpKernelAccuracyAndSpecialValues) {
  // The f32 exp behind softmax (NOTE [Softmax exp]) against f64 exp, through softmax of
  // two-element rows [x, 0]: y0 = e^x / (e^x + 1).
  std::vector<double> xs;
  for (double v = -80; v <= 80; v += 0.37) xs.push_back(v);
  std::vector<double> rows;
  for (double v : xs) {
    rows.push_back(v);
    rows.push_back(0.0);
  }
  const Shape s = {static_cast<int64_t>(xs.size()), 2};
  const Tensor x = from_vector<double>(rows, s).to(kF32);
  const Tensor y = softmax(x, 1);
  // The reference starts from the f32-rounded inputs: rounding -78.5 to f32 alone moves e^x by 3e-6.
  EXPECT_TRUE(all_close(y, from_vector<double>(ref_softmax(x.to_vector<double>(), s, 1, false), s), 1e-6, 1e-40));
  // NaN in, NaN out (the row's other entries too, as in PyTorch).
  const std::vector<float> n = softmax(from_vector<float>({1.0f, std::nanf(""), 2.0f}), 0).to_vector<float>();
  for (float v : n) EXPECT_TRUE(std::isnan(v));
}

TEST(Softmax, SharedExpFunctionDirectly) {
  // math::softmax_exp as the CUDA kernels and the baseline CPU clone compile it (this test's
  // own translation unit), against f64 exp over f32's whole range.
  double worst = 0;
  for (float x = -87.0f; x < 88.7f; x += 0.0171f) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(static_cast<double>(math::softmax_exp(x)) - want) / want);
  }
  EXPECT_LT(worst, 2.5e-7);  // about 2 ulps of f32
  EXPECT_EQ(math::softmax_exp(0.0f), 1.0f);
  EXPECT_EQ(math::softmax_exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(math::softmax_exp(-200.0f), 0.0f);
  EXPECT_EQ(math::softmax_exp(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(math::softmax_exp(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(math::softmax_exp(std::nanf(""))));
  EXPECT_TRUE(std::isnan(math::softmax_exp(-std::nanf(""))));
  // Near the ends of the range: the largest finite result and a subnormal one.
  EXPECT_NEAR(math::softmax_exp(88.7f) / std::exp(static_cast<double>(88.7f)), 1.0, 2.5e-7);
  // e^-100 = 3.7e-44 is subnormal in f32 (steps of 1.4e-45): within one step.
  EXPECT_NEAR(static_cast<double>(math::softmax_exp(-100.0f)), std::exp(-100.0), 1.41e-45);
  EXPECT_GT(math::softmax_exp(-100.0f), 0.0f);
}

TEST(Softmax, ShapesDtypesAndEdgeCases) {
  // 0-dim: one element, as in PyTorch (softmax 1, log_softmax 0).
  EXPECT_EQ(softmax(scalar_tensor(3.0), 0).item<double>(), 1.0);
  EXPECT_EQ(log_softmax(scalar_tensor(3.0), -1).item<double>(), 0.0);
  EXPECT_EQ(softmax(scalar_tensor(3.0), 0).dim(), 0);
  // Size-1 softmax dim: all ones; empty tensors stay empty.
  EXPECT_EQ(softmax(ones({3, 1}), 1).to_vector<float>(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(softmax(zeros({0, 5}), 1).sizes(), (Shape{0, 5}));
  EXPECT_EQ(log_softmax(zeros({4, 0}), 1).sizes(), (Shape{4, 0}));
  EXPECT_EQ(softmax(zeros({4, 0, 3}), 0).sizes(), (Shape{4, 0, 3}));
  // f16 and bf16 are computed in f32 and keep their dtype.
  const Tensor x = from_vector<double>(kX, {3, 4});
  for (DType dt : {kF16, kBF16}) {
    const Tensor y = softmax(x.to(dt), 1);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_TRUE(all_close(y, softmax(x.to(dt).to(kF32), 1).to(dt), 0, 0)) << dt;  // the f32 result, rounded once
    EXPECT_TRUE(all_close(log_softmax(x.to(dt), 0).to(kF64), log_softmax(x.to(dt).to(kF64), 0), dt == kF16 ? 2e-3 : 1e-2))
        << dt;
  }
}

TEST(SoftmaxGradcheck, EveryDimAndLayout) {
  for (bool log : {false, true}) {
    auto f = [log](int64_t dim) {
      return [log, dim](const TensorList& in) { return log ? log_softmax(in[0], dim) : softmax(in[0], dim); };
    };
    const Tensor x = rand_leaf({3, 4, 5}, 71);
    for (int64_t dim : {0, 1, 2, -1}) EXPECT_TRUE(grad_ok(gradcheck(f(dim), {x}))) << "log " << log << " dim " << dim;
    const Tensor xt = rand_leaf_transposed({4, 3, 2}, 72);
    for (int64_t dim : {0, 1, 2}) EXPECT_TRUE(grad_ok(gradcheck(f(dim), {xt}))) << "transposed, log " << log << " dim " << dim;
    EXPECT_TRUE(grad_ok(gradcheck(f(1), {rand_leaf({3, 1, 2}, 73)}))) << "size-1 dim, log " << log;
    EXPECT_TRUE(grad_ok(gradcheck(f(0), {rand_leaf({1}, 74)}))) << "one element, log " << log;
    EXPECT_TRUE(grad_ok(gradcheck(f(0), {rand_leaf({}, 75)}))) << "0-dim, log " << log;
    // Column blocks wider than one block (70 > 64 columns).
    EXPECT_TRUE(grad_ok(gradcheck(f(0), {rand_leaf({2, 70}, 76)}))) << "wide columns, log " << log;
  }
  // Empty: backward runs and gives an empty gradient.
  Tensor e = zeros({0, 3}, kF64).set_requires_grad();
  sum(softmax(e, 1)).backward();
  EXPECT_EQ(e.grad().sizes(), (Shape{0, 3}));
  // An upstream gradient that is a broadcast (stride-0) view, as sum's backward makes it.
  Tensor a = rand_leaf({2, 3}, 77);
  sum(mul(log_softmax(a, 1), 2.0)).backward();
  const std::vector<double> sm = softmax(a.detach(), 1).to_vector<double>(), ga = a.grad().to_vector<double>();
  for (size_t i = 0; i < ga.size(); ++i) EXPECT_NEAR(ga[i], 2.0 - 2.0 * 3 * sm[i], 1e-12);
}

TEST(Softmax, Errors) {
  const Tensor x = zeros({2, 3});
  try {
    softmax(x, 2);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("softmax: dim 2 is out of range for a tensor of shape [2, 3]"), std::string::npos)
        << e.message();
  }
  try {
    log_softmax(x, -3);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("log_softmax: dim -3"), std::string::npos) << e.message();
  }
  try {
    softmax(from_vector<int64_t>({1, 2}), 0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("softmax: expected a floating-point tensor, got i64"), std::string::npos) << e.message();
  }
  EXPECT_THROW(softmax(scalar_tensor(1.0), 1), Error);
}
