#include <cmath>
#include <limits>

#include "ops/cpu/isa.h"
#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using autograd::TensorList;

namespace {

void expect_values(const Tensor& got, const std::vector<double>& want, double rtol, const char* what) {
  EXPECT_TRUE(all_close(got, from_vector<double>(want), rtol, 1e-300)) << what;
}

// An f64 leaf built from values (for gradchecks on inputs kept away from kinks or domains).
Tensor leaf(const std::vector<double>& v, const Shape& s = {}) { return from_vector<double>(v, s).set_requires_grad(); }

// Uniform in [lo, hi), f64, requiring grad.
Tensor uniform_leaf(const Shape& s, uint64_t seed, double lo, double hi) {
  Generator g(seed);
  return add(mul(rand(s, kF64, &g), hi - lo), lo).detach().set_requires_grad();
}

}  // namespace

// ---- values ----

TEST(Unary, KnownValuesAgainstPyTorch) {
  // PyTorch 1.13, float64, printed with repr().
  const Tensor x = from_vector<double>({-3, -1.5, -0.5, 0, 0.25, 1, 2.5});
  expect_values(abs(x), {3.0, 1.5, 0.5, 0.0, 0.25, 1.0, 2.5}, 0, "abs");
  expect_values(exp(x),
                {0.049787068367863944, 0.22313016014842982, 0.6065306597126334, 1.0, 1.2840254166877414,
                 2.718281828459045, 12.182493960703473},
                1e-15, "exp");
  expect_values(sigmoid(x),
                {0.04742587317756678, 0.18242552380635635, 0.3775406687981454, 0.5, 0.5621765008857981,
                 0.7310585786300049, 0.9241418199787566},
                1e-15, "sigmoid");
  expect_values(tanh(x),
                {-0.9950547536867305, -0.9051482536448664, -0.46211715726000974, 0.0, 0.24491866240370913,
                 0.7615941559557649, 0.9866142981514303},
                1e-15, "tanh");
  // PyTorch's f64 gelu forms 1 + erf(x / sqrt2), which loses ~3 digits at x = -3: rtol 1e-12.
  expect_values(gelu(x),
                {-0.00404969409489031, -0.10021080190328704, -0.15426876936299344, 0.0, 0.14967658142073093,
                 0.841344746068543, 2.4844758366855597},
                1e-12, "gelu");
  expect_values(gelu(x, "tanh"),
                {-0.0036373920817729943, -0.10042842301976707, -0.15428599017485606, 0.0, 0.149675350701685,
                 0.8411919906082768, 2.484915733910001},
                1e-12, "gelu tanh");
  expect_values(clamp(x, -1.0, 1.0), {-1.0, -1.0, -0.5, 0.0, 0.25, 1.0, 1.0}, 0, "clamp");
  expect_values(clamp_max(x, 0.5), {-3.0, -1.5, -0.5, 0.0, 0.25, 0.5, 0.5}, 0, "clamp max");
  expect_values(pow(x, 2.0), {9.0, 2.25, 0.25, 0.0, 0.0625, 1.0, 6.25}, 0, "pow 2");
  expect_values(pow(x, 3.0), {-27.0, -3.375, -0.125, 0.0, 0.015625, 1.0, 15.625}, 0, "pow 3");

  const Tensor p = from_vector<double>({0.125, 0.5, 1, 2, 7.5});
  expect_values(log(p), {-2.0794415416798357, -0.6931471805599453, 0.0, 0.6931471805599453, 2.0149030205422647},
                1e-15, "log");
  expect_values(sqrt(p), {0.3535533905932738, 0.7071067811865476, 1.0, 1.4142135623730951, 2.7386127875258306},
                1e-15, "sqrt");
  expect_values(rsqrt(p), {2.82842712474619, 1.414213562373095, 1.0, 0.7071067811865475, 0.3651483716701107}, 1e-15,
                "rsqrt");
  expect_values(pow(p, -1.5), {22.627416997969522, 2.8284271247461903, 1.0, 0.3535533905932738, 0.04868644955601477},
                1e-15, "pow -1.5");
  expect_values(pow(p, 2.7), {0.0036446601231906526, 0.1538930516681145, 1.0, 6.498019170849885, 230.49707106142748},
                1e-15, "pow 2.7");
  expect_values(pow(p, 0.5), {0.3535533905932738, 0.7071067811865476, 1.0, 1.4142135623730951, 2.7386127875258306},
                0, "pow 0.5 is sqrt");
}

TEST(Unary, SpecialValues) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dt : {kF32, kF64}) {
    const Tensor x = from_vector<double>({inf, -inf, nan, -0.0}).to(dt);
    const auto v = [](const Tensor& t) { return t.to_vector<double>(); };
    EXPECT_EQ(v(exp(x))[0], inf);
    EXPECT_EQ(v(exp(x))[1], 0.0);
    EXPECT_TRUE(std::isnan(v(exp(x))[2]));
    EXPECT_EQ(v(sigmoid(x))[0], 1.0);
    EXPECT_EQ(v(sigmoid(x))[1], 0.0);
    EXPECT_TRUE(std::isnan(v(sigmoid(x))[2]));
    EXPECT_EQ(v(tanh(x))[0], 1.0);
    EXPECT_EQ(v(tanh(x))[1], -1.0);
    EXPECT_TRUE(std::signbit(v(tanh(x))[3])) << "tanh(-0) = -0";
    for (auto approx : {GeluApproximation::None, GeluApproximation::Tanh}) {
      const std::vector<double> g = v(gelu(x, approx));
      EXPECT_EQ(g[0], inf);
      EXPECT_EQ(g[1], 0.0) << "gelu(-inf) is the limit 0 (PyTorch gives NaN)";
      EXPECT_TRUE(std::isnan(g[2]));
      // And the gradients at +-inf are the limits 1 and 0.
      const Tensor gx = x.detach().clone().set_requires_grad();
      sum(gelu(gx, approx)).backward(ones({}, dt));
      EXPECT_EQ(v(gx.grad())[0], 1.0);
      EXPECT_EQ(v(gx.grad())[1], 0.0);
    }
    EXPECT_TRUE(std::isnan(v(clamp(x, -1.0, 1.0))[2])) << "NaN passes through clamp";
    const std::vector<double> l = v(log(from_vector<double>({0.0, -1.0, inf, nan, 1e-45}).to(dt)));
    EXPECT_EQ(l[0], -inf);
    EXPECT_TRUE(std::isnan(l[1]));
    EXPECT_EQ(l[2], inf);
    EXPECT_TRUE(std::isnan(l[3]));
    EXPECT_NEAR(l[4], std::log(dt == kF32 ? 1.4012984643e-45 : 1e-45), 1e-5) << "subnormal input";
    EXPECT_EQ(v(pow(x, 0.0))[2], 1.0) << "pow(NaN, 0) = 1";
    EXPECT_TRUE(std::signbit(v(pow(x, 0.5))[3])) << "pow(-0, 0.5) = sqrt(-0) = -0, as PyTorch";
  }
  // min > max: max everywhere (PyTorch's rule).
  EXPECT_EQ(clamp(from_vector<float>({0, 5, 10}), 6.0, 4.0).to_vector<float>(), (std::vector<float>{4, 4, 4}));
}

TEST(Unary, IntegerAbsAndClamp) {
  const int32_t lowest = std::numeric_limits<int32_t>::lowest();
  EXPECT_EQ(abs(from_vector<int32_t>({-3, 0, 7, lowest})).to_vector<int32_t>(),
            (std::vector<int32_t>{3, 0, 7, lowest}));  // |INT_MIN| wraps to INT_MIN, as in PyTorch
  EXPECT_EQ(clamp(from_vector<int64_t>({-5, -1, 0, 3, 9}), -1.0, 2.0).to_vector<int64_t>(),
            (std::vector<int64_t>{-1, -1, 0, 2, 2}));
  EXPECT_EQ(clamp_min(from_vector<uint8_t>({0, 5, 200}), 10.0).to_vector<int64_t>(),
            (std::vector<int64_t>{10, 10, 200}));
  EXPECT_EQ(clamp_max(from_vector<int32_t>({-5, 50}), 1e30).to_vector<int32_t>(), (std::vector<int32_t>{-5, 50}));
}

TEST(Unary, HalfInputsComputeInF32) {
  const std::vector<float> xs = {-4.0f, -1.25f, -0.3f, 0.0f, 0.7f, 2.0f, 6.5f};
  for (DType dt : {kF16, kBF16}) {
    const Tensor x = from_vector<float>(xs).to(dt);
    const std::vector<double> xv = x.to_vector<double>();  // the inputs as rounded to dt
    // One rounding to dt at the end: within half an ulp of dt (2^-11 relative for f16, 2^-8 for
    // bf16) of the f64 value, plus the f32 computation's few ulps.
    const double rtol = dt == kF16 ? 0x1p-11 * 1.01 : 0x1p-8 * 1.01;
    const auto check = [&](const Tensor& got, double (*ref)(double), const char* what) {
      EXPECT_EQ(got.dtype(), dt) << what;
      std::vector<double> want;
      for (double v : xv) want.push_back(ref(v));
      EXPECT_TRUE(all_close(got, from_vector<double>(want), rtol, 1e-7)) << what << " " << dt;
    };
    check(exp(x), [](double v) { return std::exp(v); }, "exp");
    check(sigmoid(x), [](double v) { return 1.0 / (1.0 + std::exp(-v)); }, "sigmoid");
    check(tanh(x), [](double v) { return std::tanh(v); }, "tanh");
    check(gelu(x), [](double v) { return 0.5 * v * std::erfc(-v / std::sqrt(2.0)); }, "gelu");
    check(abs(x), [](double v) { return std::fabs(v); }, "abs");
    check(pow(x, 2.0), [](double v) { return v * v; }, "pow");
    check(clamp(x, -1.0, 1.0), [](double v) { return std::min(1.0, std::max(-1.0, v)); }, "clamp");
  }
}

// NOTE [Fast f32 math]: the vectorized f32 functions against the f64 computation, over a
// sweep of f32 values (every 1031st bit pattern of each sign, ~3M values) plus the
// neighbourhoods of the switch points. Errors are in units in the last place of the correctly
// rounded result (subnormal ulp 2^-149). The bounds are a little above the worst errors measured
// when the code was written: exp 0.95 / 0.96, log 1.9 / 1.8, sigmoid 2.2 / 2.3, tanh 1.3 / 1.25,
// gelu 4.9 / 4.2, tanh-gelu 2.9 / 3.0 (baseline SSE2 / AVX2+FMA clone); the test runs whichever
// clone the machine picks.
namespace {

double ulp_of(double y) {
  y = std::fabs(y);
  if (y < 0x1p-126) return 0x1p-149;
  int e = 0;
  std::frexp(y, &e);
  return std::ldexp(1.0, e - 24);
}

double sigmoid_ref(double v) {
  const double e = std::exp(-std::fabs(v));
  return (v >= 0 ? 1.0 : e) / (1.0 + e);
}
double gelu_ref(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double gelu_tanh_v(double x) { return 2 * 0.7978845608028654 * x * (1 + 0.044715 * x * x); }
double gelu_tanh_ref(double x) { return x * sigmoid_ref(gelu_tanh_v(x)); }

// The f32 sweep: finite values in [lo, hi].
std::vector<float> sweep(float lo, float hi) {
  std::vector<float> v;
  for (uint32_t sign : {0u, 0x80000000u}) {
    for (uint32_t b = 0; b < 0x7f800000u; b += 1031) {
      float f;
      const uint32_t bits = b | sign;
      std::memcpy(&f, &bits, 4);
      if (f >= lo && f <= hi) v.push_back(f);
    }
  }
  for (float c : {0.625f, -0.625f, 20.0f, -20.0f, 88.72f, -87.33f, -103.9f, 1.0f, 0.70710677f, 1.4142135f}) {
    float f = c;
    for (int i = 0; i < 2000; ++i) f = std::nextafter(f, 1e30f);
    for (int i = 0; i < 4000; ++i, f = std::nextafter(f, -1e30f))
      if (f >= lo && f <= hi) v.push_back(f);
  }
  return v;
}

// The worst error in ulps of `got` (f32 tensor) against ref(x); also reports where.
::testing::AssertionResult within_ulps(const std::vector<float>& xs, const Tensor& got, double (*ref)(double),
                                       double bound) {
  const std::vector<float> y = got.to_vector<float>();
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double r = ref(xs[i]);
    const float rf = static_cast<float>(r);
    if (std::isinf(rf) && y[i] == rf) continue;  // overflow, correctly
    const double e = std::fabs(static_cast<double>(y[i]) - r) / ulp_of(rf);
    if (!(e <= worst)) {
      worst = e;
      at = i;
    }
  }
  if (worst <= bound) return ::testing::AssertionSuccess() << "worst " << worst << " ulp";
  return ::testing::AssertionFailure() << "worst error " << worst << " ulp > " << bound << " at x = " << xs[at]
                                       << " (got " << y[at] << ", f64 " << ref(xs[at]) << ")";
}

}  // namespace

TEST(UnaryFastF32, WithinAFewUlpsOfF64) {
  const std::vector<float> xs = sweep(-200.0f, 1e30f);
  const Tensor x = from_vector<float>(xs);
  EXPECT_TRUE(within_ulps(xs, exp(x), [](double v) { return std::exp(v); }, 1.5)) << "exp";
  const std::vector<float> pos = sweep(0.0f, 3.4e38f);
  EXPECT_TRUE(within_ulps(pos, log(from_vector<float>(pos)), [](double v) { return std::log(v); }, 2.5)) << "log";
  EXPECT_TRUE(within_ulps(xs, sigmoid(x), sigmoid_ref, 3.0)) << "sigmoid";
  EXPECT_TRUE(within_ulps(xs, tanh(x), [](double v) { return std::tanh(v); }, 2.0)) << "tanh";
  EXPECT_TRUE(within_ulps(xs, gelu(x), gelu_ref, 6.0)) << "gelu";
  EXPECT_TRUE(within_ulps(xs, gelu(x, "tanh"), gelu_tanh_ref, 4.0)) << "gelu tanh";
}

// GELU's tail, where PyTorch's f32 gelu is wrong by 4% at x = -5 (it gives -1.4901161e-06,
// PyTorch 1.13): ours matches f64.
TEST(UnaryFastF32, GeluTailIsAccurate) {
  const Tensor x = from_vector<float>({-5.0f, -10.0f, -13.0f});
  const std::vector<float> g = gelu(x).to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) {
    const double xv = x.to_vector<double>()[i];
    EXPECT_NEAR(g[i], gelu_ref(xv), 4 * ulp_of(gelu_ref(xv))) << xv;
  }
  EXPECT_NEAR(g[0], -1.4332578593401202e-06, 1e-12);  // PyTorch 1.13's f64 value
}

// The backward functors: their errors are measured against the magnitude of the terms they add
// (the derivatives cross zero, where no relative accuracy is possible). Measured: 4.3 (gelu)
// and 5.3 (tanh-gelu) ulps of |term1| + |term2| with the AVX2+FMA clone.
TEST(UnaryFastF32, GradientsMatchF64) {
  const std::vector<float> xs = sweep(-30.0f, 1e6f);
  Tensor x = from_vector<float>(xs).set_requires_grad();
  for (auto approx : {GeluApproximation::None, GeluApproximation::Tanh}) {
    x.zero_grad();
    sum(gelu(x, approx)).backward();
    const std::vector<float> g = x.grad().to_vector<float>();
    double worst = 0;
    float worst_x = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const double v = xs[i];
      double a = 0, b = 0;  // the two terms of the derivative
      if (approx == GeluApproximation::None) {
        a = 0.5 * std::erfc(-v / std::sqrt(2.0));
        b = v * std::exp(-0.5 * v * v) * 0.3989422804014327;
      } else {
        const double w = gelu_tanh_v(v);
        a = sigmoid_ref(w);
        b = v * sigmoid_ref(w) * sigmoid_ref(-w) * 2 * 0.7978845608028654 * (1 + 3 * 0.044715 * v * v);
      }
      const double e = std::fabs(g[i] - (a + b)) / ulp_of(std::fabs(a) + std::fabs(b));
      if (e > worst) worst = e, worst_x = xs[i];
    }
    EXPECT_LE(worst, 8.0) << (approx == GeluApproximation::None ? "gelu" : "gelu tanh") << " at x = " << worst_x;
  }
}

TEST(Unary, NonContiguousInputsGiveTheSameBits) {
  // Strided f32 runs go through the same vectorized code as contiguous ones (NOTE [CPU clones]).
  Generator gen(5);
  const Tensor base = mul(randn({37, 53}, kF32, &gen), 4.0);
  const Tensor tr = transpose(base, 0, 1);
  ASSERT_FALSE(tr.is_contiguous());
  for (auto* f : {+[](const Tensor& t) { return exp(t); }, +[](const Tensor& t) { return gelu(t); },
                  +[](const Tensor& t) { return gelu(t, "tanh"); }, +[](const Tensor& t) { return sigmoid(t); },
                  +[](const Tensor& t) { return tanh(t); }}) {
    EXPECT_EQ(f(tr).to_vector<float>(), f(tr.contiguous()).to_vector<float>());
  }
}

// ---- gradients ----

TEST(UnaryGradcheck, ReluAwayFromTheKinkAndTanh) {
  // relu's derivative is undefined at 0: the inputs stay at least 0.1 away from it.
  Tensor x = from_vector<double>({-1.5, -0.1, 0.1, 0.7, 2.0, -3.0}, {2, 3}).set_requires_grad();
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return relu(in[0]); }, {x})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return tanh(in[0]); }, {rand_leaf({3, 4}, 81)})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return tanh(in[0]); }, {rand_leaf_transposed({3, 4}, 82)})));
}

TEST(Unary, ReluGradientAtZeroIsZero) {
  Tensor x = from_vector<double>({0.0}).set_requires_grad();
  sum(relu(x)).backward();
  EXPECT_EQ(x.grad().item<double>(), 0.0);
}

struct UnaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&);
  double lo, hi;  // the input range (away from kinks and domain edges)
};

void PrintTo(const UnaryCase& c, std::ostream* os) { *os << c.name; }

class UnaryGradcheckOp : public ::testing::TestWithParam<UnaryCase> {};

TEST_P(UnaryGradcheckOp, ShapesLayoutsAndEmpty) {
  const UnaryCase c = GetParam();
  const auto fn = [f = c.fn](const TensorList& in) { return f(in[0]); };
  uint64_t seed = 100;
  for (const Shape& s : std::vector<Shape>{{2, 3}, {1}, {}, {4, 1, 2}, {0, 3}}) {
    EXPECT_TRUE(grad_ok(gradcheck(fn, {uniform_leaf(s, ++seed, c.lo, c.hi)}))) << shape_str(s);
  }
  // Non-contiguous: a transposed view of values in range.
  Tensor t = transpose(uniform_leaf({4, 3}, ++seed, c.lo, c.hi).detach(), 0, 1);
  t.set_requires_grad();
  ASSERT_FALSE(t.is_contiguous());
  EXPECT_TRUE(grad_ok(gradcheck(fn, {t}))) << "transposed";
}

// abs and clamp have kinks (0, the bounds): their ranges and bounds keep inputs away from them
// (|x| >= 0.2, bounds at +-0.15 handled in the dedicated test below). log, sqrt, rsqrt and
// non-integer pow need x > 0.
INSTANTIATE_TEST_SUITE_P(
    Ops, UnaryGradcheckOp,
    ::testing::Values(UnaryCase{"abs_pos", [](const Tensor& x) { return abs(x); }, 0.2, 2.0},
                      UnaryCase{"abs_neg", [](const Tensor& x) { return abs(x); }, -2.0, -0.2},
                      UnaryCase{"exp", [](const Tensor& x) { return exp(x); }, -3.0, 3.0},
                      UnaryCase{"log", [](const Tensor& x) { return log(x); }, 0.2, 4.0},
                      UnaryCase{"sqrt", [](const Tensor& x) { return sqrt(x); }, 0.2, 4.0},
                      UnaryCase{"rsqrt", [](const Tensor& x) { return rsqrt(x); }, 0.2, 4.0},
                      UnaryCase{"sigmoid", [](const Tensor& x) { return sigmoid(x); }, -6.0, 6.0},
                      UnaryCase{"tanh", [](const Tensor& x) { return tanh(x); }, -3.0, 3.0},
                      UnaryCase{"gelu", [](const Tensor& x) { return gelu(x); }, -6.0, 6.0},
                      UnaryCase{"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, -6.0, 6.0},
                      UnaryCase{"pow_2", [](const Tensor& x) { return pow(x, 2.0); }, -3.0, 3.0},
                      UnaryCase{"pow_3", [](const Tensor& x) { return pow(x, 3.0); }, -3.0, 3.0},
                      UnaryCase{"pow_m1", [](const Tensor& x) { return pow(x, -1.0); }, 0.3, 3.0},
                      UnaryCase{"pow_m2", [](const Tensor& x) { return pow(x, -2.0); }, 0.3, 3.0},
                      UnaryCase{"pow_half", [](const Tensor& x) { return pow(x, 0.5); }, 0.2, 4.0},
                      UnaryCase{"pow_mhalf", [](const Tensor& x) { return pow(x, -0.5); }, 0.2, 4.0},
                      UnaryCase{"pow_1_7", [](const Tensor& x) { return pow(x, 1.7); }, 0.2, 4.0},
                      UnaryCase{"pow_0", [](const Tensor& x) { return pow(x, 0.0); }, -3.0, 3.0},
                      UnaryCase{"pow_1", [](const Tensor& x) { return pow(x, 1.0); }, -3.0, 3.0},
                      UnaryCase{"clamp_inside", [](const Tensor& x) { return clamp(x, -5.0, 5.0); }, -3.0, 3.0},
                      UnaryCase{"clamp_below", [](const Tensor& x) { return clamp(x, 1.0, 5.0); }, -3.0, 0.5},
                      UnaryCase{"clamp_min_only", [](const Tensor& x) { return clamp_min(x, -4.0); }, -3.0, 3.0},
                      UnaryCase{"clamp_max_only", [](const Tensor& x) { return clamp_max(x, -4.0); }, -3.0, 3.0}),
    [](const ::testing::TestParamInfo<UnaryCase>& i) { return std::string(i.param.name); });

TEST(UnaryGradcheck, ClampAcrossBothBoundsAwayFromThem) {
  // Each input is at least 0.05 from both bounds (the gradient jumps there).
  Tensor x = leaf({-1.0, -0.2, -0.1, 0.0, 0.1, 0.2, 1.0}, {7});
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return clamp(in[0], -0.15, 0.15); }, {x})));
}

TEST(Unary, GradientsAtKinksFollowPyTorch) {
  // PyTorch 1.13 produced every expected gradient here.
  const auto grad_of = [](Tensor (*f)(const Tensor&), const std::vector<double>& v) {
    Tensor x = leaf(v);
    sum(f(x)).backward();
    return x.grad().to_vector<double>();
  };
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> k = {0.0, -0.0, 1.0, -1.0};
  EXPECT_EQ(grad_of([](const Tensor& x) { return abs(x); }, k), (std::vector<double>{0, 0, 1, -1}));
  EXPECT_EQ(grad_of([](const Tensor& x) { return pow(x, 2.0); }, k), (std::vector<double>{0, 0, 2, -2}));
  EXPECT_EQ(grad_of([](const Tensor& x) { return pow(x, 3.0); }, k), (std::vector<double>{0, 0, 3, 3}));
  EXPECT_EQ(grad_of([](const Tensor& x) { return pow(x, 0.0); }, k), (std::vector<double>{0, 0, 0, 0}));
  EXPECT_EQ(grad_of([](const Tensor& x) { return pow(x, 1.0); }, k), (std::vector<double>{1, 1, 1, 1}));
  EXPECT_EQ(grad_of([](const Tensor& x) { return pow(x, -1.0); }, k), (std::vector<double>{-inf, -inf, -1, -1}));
  const std::vector<double> half = grad_of([](const Tensor& x) { return pow(x, 0.5); }, k);
  EXPECT_EQ(half[0], inf);
  EXPECT_EQ(half[1], -inf);
  EXPECT_EQ(half[2], 0.5);
  EXPECT_TRUE(std::isnan(half[3]));
  EXPECT_EQ(grad_of([](const Tensor& x) { return sqrt(x); }, {0.0, 4.0}), (std::vector<double>{inf, 0.25}));
  EXPECT_EQ(grad_of([](const Tensor& x) { return log(x); }, {0.0, 4.0}), (std::vector<double>{inf, 0.25}));
  // clamp passes the gradient at the bounds themselves.
  const std::vector<double> c = {-2, -1, 0, 1, 2};
  EXPECT_EQ(grad_of([](const Tensor& x) { return clamp(x, -1.0, 1.0); }, c), (std::vector<double>{0, 1, 1, 1, 0}));
  EXPECT_EQ(grad_of([](const Tensor& x) { return clamp_min(x, 0.0); }, c), (std::vector<double>{0, 0, 1, 1, 1}));
  EXPECT_EQ(grad_of([](const Tensor& x) { return clamp(x, 2.0, 1.0); }, c), (std::vector<double>{0, 0, 0, 0, 0}));
}

TEST(Unary, GradientValuesAgainstPyTorch) {
  // PyTorch 1.13, float64.
  const std::vector<double> x = {-3, -1.5, -0.5, 0, 0.25, 1, 2.5};
  const auto grad_of = [&](const std::function<Tensor(const Tensor&)>& f) {
    Tensor t = leaf(x);
    sum(f(t)).backward();
    return t.grad();
  };
  expect_values(grad_of([](const Tensor& t) { return gelu(t); }),
                {-0.01194564720418392, -0.1274691922299796, 0.13250487534383712, 0.5, 0.695373354883636,
                 1.0833154705876864, 1.037611085908145},
                1e-12, "gelu'");
  expect_values(grad_of([](const Tensor& t) { return gelu(t, GeluApproximation::Tanh); }),
                {-0.011584166630969648, -0.12771079315143308, 0.13263009646535764, 0.5, 0.6953540951510604,
                 1.0829640838457826, 1.037951576212666},
                1e-12, "gelu tanh'");
  expect_values(grad_of([](const Tensor& t) { return sigmoid(t); }),
                {0.04517665973091214, 0.14914645207033286, 0.2350037122015945, 0.25, 0.24613408273759835,
                 0.19661193324148185, 0.07010371654510807},
                1e-14, "sigmoid'");
  expect_values(grad_of([](const Tensor& t) { return tanh(t); }),
                {0.009866037165440166, 0.1807066389236486, 0.7864477329659274, 1.0, 0.940014848806378,
                 0.41997434161402614, 0.02659222668316057},
                1e-13, "tanh'");
}

TEST(Unary, F32GradientsAreF32) {
  Tensor x = from_vector<float>({-1.0f, 0.5f, 2.0f}).set_requires_grad();
  sum(mul(gelu(x), sigmoid(x))).backward();
  EXPECT_EQ(x.grad().dtype(), kF32);
  EXPECT_EQ(x.grad().sizes(), (Shape{3}));
}

// NOTE [Relu into a narrower dtype]: relu(x, dtype) is relu(x).to(dtype) bit for bit, and its
// gradient that of the two ops, in every layout and for the dtype pairs autocast meets.
TEST(Unary, ReluIntoANarrowerDtypeIsReluThenTheCast) {
  Generator gen(11);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Tensor base = mul(randn({37, 53}, kF32, &gen), 4.0);
  // Zeros, signed zeros, infinities, NaN, a bf16 tie and subnormals among the values.
  const std::vector<float> special{0.0f, -0.0f, inf, -inf, nan, 1.00390625f, 1e-39f, -1e-39f, 3e38f};
  for (size_t i = 0; i < special.size(); ++i) base.data<float>()[i * 97] = special[i];
  const Tensor gy_base = randn({53, 37}, kF32, &gen);
  // Both versions of the f32 -> bf16 kernels (NOTE [AVX-512 kernels]) where the CPU has both.
  for (const bool avx512 : {true, false}) {
    const bool was = cpu::set_cpu_avx512_kernels_enabled_for_testing(avx512);
    for (const DType dt : {kBF16, kF16}) {
      for (const bool transposed : {false, true}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << (transposed ? " transposed" : " contiguous")
                                          << (avx512 ? "" : ", AVX-512 off"));
        const Tensor x0 = transposed ? transpose(base, 0, 1) : transpose(base, 0, 1).contiguous();
        ASSERT_EQ(x0.is_contiguous(), !transposed);
        const Tensor gy = gy_base.to(dt);
        Tensor fused_x = x0.detach().set_requires_grad(), two_x = x0.detach().set_requires_grad();
        const Tensor fused = relu(fused_x, dt), two = relu(two_x).to(dt);
        EXPECT_EQ(fused.dtype(), dt);
        EXPECT_EQ(fused.sizes(), x0.sizes());
        EXPECT_EQ(fused.to(kF32).to_vector<float>(), two.to(kF32).to_vector<float>());
        fused.backward(gy);
        two.backward(gy);
        EXPECT_EQ(fused_x.grad().dtype(), kF32);
        // The two ops' gradient where the output is not a rounded-away positive x (f16 rounds
        // 1e-39 to 0, see below); bf16 keeps every value here, so there it is the same throughout.
        const std::vector<float> want = mul(two_x.grad(), gt(fused.to(kF32), 0.0).to(kF32)).to_vector<float>();
        EXPECT_EQ(fused_x.grad().to_vector<float>(), want);
        if (dt == kBF16) {
          EXPECT_EQ(fused_x.grad().to_vector<float>(), two_x.grad().to_vector<float>());
        }
        // The create_graph backward gives the same gradient, recorded (a function of gy).
        Tensor cg_x = x0.detach().set_requires_grad(), cg_gy = gy.detach().set_requires_grad();
        const Tensor cg = autograd::grad({relu(cg_x, dt)}, {cg_x}, {cg_gy}, false, false, /*create_graph=*/true)[0];
        EXPECT_TRUE(cg.requires_grad());
        EXPECT_EQ(cg.to_vector<float>(), want);
      }
    }
    cpu::set_cpu_avx512_kernels_enabled_for_testing(was);
  }
  // f64 -> f32 and a widening bf16 -> f32; the input's own dtype is relu itself.
  const Tensor x64 = mul(randn({9, 11}, kF64, &gen), 3.0);
  EXPECT_EQ(relu(x64, kF32).to_vector<float>(), relu(x64).to(kF32).to_vector<float>());
  const Tensor xb = x64.to(kBF16);
  EXPECT_EQ(relu(xb, kF32).to_vector<float>(), relu(xb).to(kF32).to_vector<float>());
  EXPECT_EQ(relu(x64, kF64).to_vector<double>(), relu(x64).to_vector<double>());
  Tensor l64 = x64.detach().set_requires_grad(), r64 = x64.detach().set_requires_grad();
  const Tensor g32 = randn({9, 11}, kF32, &gen);
  relu(l64, kF32).backward(g32);
  relu(r64).to(kF32).backward(g32);
  EXPECT_EQ(l64.grad().dtype(), kF64);
  EXPECT_EQ(l64.grad().to_vector<double>(), r64.grad().to_vector<double>());
  // The documented difference: a positive x that rounds to a bf16 zero gets the fused function's
  // own gradient, 0 (the f32 relu's gradient would pass g).
  Tensor tiny = from_vector<float>({1e-45f, 2.0f}).set_requires_grad();
  const Tensor yt = relu(tiny, kBF16);
  EXPECT_EQ(yt.to(kF32).to_vector<float>(), (std::vector<float>{0.0f, 2.0f}));
  yt.backward(ones({2}, kBF16));
  EXPECT_EQ(tiny.grad().to_vector<float>(), (std::vector<float>{0.0f, 1.0f}));
}

// ---- errors ----

TEST(Unary, ErrorsNameTheOpAndTheProblem) {
  const auto message_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.message();
    }
    return "(no error)";
  };
  EXPECT_NE(message_of([] { exp(from_vector<int64_t>({1})); }).find("exp: expected a floating-point tensor, got i64"),
            std::string::npos);
  EXPECT_NE(message_of([] { sigmoid(from_vector<int32_t>({1})); }).find("sigmoid"), std::string::npos);
  EXPECT_NE(message_of([] { gelu(zeros({2}), "fast"); })
                .find("gelu: approximate must be \"none\" or \"tanh\", got \"fast\""),
            std::string::npos);
  EXPECT_NE(message_of([] { clamp(zeros({2}), std::nullopt, std::nullopt); }).find("at least one of min and max"),
            std::string::npos);
  EXPECT_NE(message_of([] { clamp(from_vector<int64_t>({1}), 0.5, 2.0); }).find("min = 0.5 is not an integral value"),
            std::string::npos);
  EXPECT_NE(message_of([] { abs(from_vector<bool>({true})); }).find("abs: not defined for bool"), std::string::npos);
  EXPECT_NE(message_of([] { pow(from_vector<int64_t>({2}), 2.0); }).find("pow: expected a floating-point tensor"),
            std::string::npos);
  EXPECT_NE(message_of([] { relu(zeros({2, 3}), kI64); }).find("relu: the output dtype must be a floating dtype, got i64 (input f32 of shape [2, 3])"),
            std::string::npos);
  EXPECT_NE(message_of([] { relu(from_vector<int64_t>({1}), kBF16); }).find("relu: expected a floating-point tensor, got i64"),
            std::string::npos);
  EXPECT_NE(message_of([] { log(Tensor()); }).find("log: input is an undefined tensor"), std::string::npos);
}
