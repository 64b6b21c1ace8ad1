// Optimizers (nn/optim): each update against its equations written out below in plain doubles
// (and against PyTorch 1.13 where it has the optimizer), parameter groups, the state dict's
// exact round trip and its load errors, and gradient clipping.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using namespace trident::nn::optim;
using Vec = std::vector<double>;

namespace {

// The example every update test runs: four elements (one zero parameter, one zero gradient at
// step 2), three steps with these gradients.
const Vec kP0 = {1.0, -2.0, 0.5, 0.0};
const std::vector<Vec> kGrads = {{0.1, -0.2, 0.3, 0.4}, {-0.5, 0.25, 0.0, 1.0}, {0.3, 0.3, -0.6, -0.2}};

Tensor make_param(const Vec& v, DType dt = kF64) {
  Tensor p = from_vector<double>(v, {static_cast<int64_t>(v.size())}, dt);
  p.set_requires_grad();
  return p;
}

void set_grad(const Tensor& p, const Vec& g) {
  Tensor q = p;
  q.set_grad(from_vector<double>(g, {static_cast<int64_t>(g.size())}, p.dtype()));
}

// Runs the example's three steps on an optimizer built over one parameter.
template <typename Opt, typename Options>
Vec run_example(const Options& o, DType dt = kF64) {
  Tensor p = make_param(kP0, dt);
  Opt opt({p}, o);
  for (const Vec& g : kGrads) {
    set_grad(p, g);
    opt.step();
  }
  return p.to_vector<double>();
}

::testing::AssertionResult vec_close(const Vec& a, const Vec& b, double rtol, double atol) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::fabs(a[i] - b[i]) <= atol + rtol * std::fabs(b[i])))
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs expected " << b[i];
  return ::testing::AssertionSuccess();
}

// f64 results differ from the references below only by the order of roundings.
constexpr double kRtol64 = 1e-13, kAtol64 = 1e-15;
// f32 updates round every operation to 24 bits (about 6e-8 relative) over a dozen operations
// and three steps; the references are exact doubles.
constexpr double kRtol32 = 1e-5, kAtol32 = 1e-6;

// ---- the update equations, in plain doubles (one element at a time) ----

Vec ref_sgd(Vec p, const std::vector<Vec>& gs, double lr, double momentum, double dampening, double wd,
            bool nesterov) {
  Vec buf(p.size(), 0.0);
  for (size_t t = 0; t < gs.size(); ++t) {
    for (size_t i = 0; i < p.size(); ++i) {
      double d = gs[t][i] + wd * p[i];
      if (momentum != 0) {
        buf[i] = t == 0 ? d : momentum * buf[i] + (1 - dampening) * d;
        d = nesterov ? d + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * d;
    }
  }
  return p;
}

Vec ref_adam(Vec p, const std::vector<Vec>& gs, double lr, double b1, double b2, double eps, double wd,
             bool decoupled, bool amsgrad) {
  Vec m(p.size(), 0.0), v(p.size(), 0.0), vmax(p.size(), 0.0);
  for (size_t s = 0; s < gs.size(); ++s) {
    const double t = static_cast<double>(s + 1);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = gs[s][i];
      if (decoupled) {
        p[i] *= 1 - lr * wd;
      } else {
        g += wd * p[i];
      }
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      vmax[i] = std::max(vmax[i], v[i]);
      const double vhat = (amsgrad ? vmax[i] : v[i]) / (1 - std::pow(b2, t));
      const double mhat = m[i] / (1 - std::pow(b1, t));
      p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
  return p;
}

Vec ref_rmsprop(Vec p, const std::vector<Vec>& gs, double lr, double alpha, double eps, double wd, double momentum,
                bool centered) {
  Vec sq(p.size(), 0.0), ga(p.size(), 0.0), buf(p.size(), 0.0);
  for (const Vec& gt : gs) {
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = gt[i] + wd * p[i];
      sq[i] = alpha * sq[i] + (1 - alpha) * g * g;
      double var = sq[i];
      if (centered) {
        ga[i] = alpha * ga[i] + (1 - alpha) * g;
        var -= ga[i] * ga[i];
      }
      const double avg = std::sqrt(var) + eps;
      if (momentum > 0) {
        buf[i] = momentum * buf[i] + g / avg;
        p[i] -= lr * buf[i];
      } else {
        p[i] -= lr * g / avg;
      }
    }
  }
  return p;
}

// Returns the parameters; `ratios` gets each step's trust ratio.
Vec ref_lamb(Vec p, const std::vector<Vec>& gs, double lr, double b1, double b2, double eps, double wd, bool adapt,
             Vec* ratios = nullptr) {
  Vec m(p.size(), 0.0), v(p.size(), 0.0);
  for (size_t s = 0; s < gs.size(); ++s) {
    const double t = static_cast<double>(s + 1);
    Vec r(p.size());
    double pn = 0, rn = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * gs[s][i];
      v[i] = b2 * v[i] + (1 - b2) * gs[s][i] * gs[s][i];
      r[i] = (m[i] / (1 - std::pow(b1, t))) / (std::sqrt(v[i] / (1 - std::pow(b2, t))) + eps) + wd * p[i];
      pn += p[i] * p[i];
      rn += r[i] * r[i];
    }
    pn = std::sqrt(pn);
    rn = std::sqrt(rn);
    const double ratio = adapt && pn > 0 && rn > 0 ? pn / rn : 1.0;
    if (ratios) ratios->push_back(ratio);
    for (size_t i = 0; i < p.size(); ++i) p[i] -= lr * ratio * r[i];
  }
  return p;
}

}  // namespace

// ---------------------------------------------------------------------------
// Updates
// ---------------------------------------------------------------------------

TEST(OptimSGD, ThreeStepsMatchEquationsAndPyTorch) {
  // PyTorch 1.13 produced the `torch` vectors: torch.optim.SGD on torch.float64, same example.
  struct Case {
    SGDOptions o;
    Vec torch;
  };
  const std::vector<Case> cases = {
      {{.lr = 0.1}, {1.01, -2.0349999999999997, 0.53000000000000003, -0.12000000000000001}},
      {{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01},
       {1.02607792109, -2.0049665921799997, 0.470144690295, -0.26118223240000005}},
      {{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true},
       {1.0359973125509998, -2.040015375102, 0.50712118480049995, -0.36978735435999999}},
  };
  for (const Case& c : cases) {
    const Vec ref = ref_sgd(kP0, kGrads, c.o.lr, c.o.momentum, c.o.dampening, c.o.weight_decay, c.o.nesterov);
    EXPECT_TRUE(vec_close(ref, c.torch, 1e-14, 1e-16));  // the equations are PyTorch's
    EXPECT_TRUE(vec_close(run_example<SGD>(c.o), ref, kRtol64, kAtol64)) << "momentum " << c.o.momentum;
    EXPECT_TRUE(vec_close(run_example<SGD>(c.o, kF32), ref, kRtol32, kAtol32)) << "f32, momentum " << c.o.momentum;
  }
  // Hand arithmetic for the plain case: p - 0.1 * (0.1 - 0.5 + 0.3) = 1 + 0.01.
  EXPECT_NEAR(run_example<SGD>(SGDOptions{.lr = 0.1})[0], 1.01, 1e-15);
}

TEST(OptimAdam, ThreeStepsMatchEquationsAndPyTorch) {
  // PyTorch 1.13: torch.optim.Adam / AdamW(lr=0.1, betas=(0.8, 0.9), eps=1e-3, weight_decay=0.1)
  // on torch.float64, with and without amsgrad.
  const Vec torch_adam = {0.920291260535961, -1.8322804093417226, 0.35953424407433981, -0.24845977207581557};
  const Vec torch_adam_ams = {0.920291260535961, -1.8350038183145074, 0.36274566376682676, -0.2468896799922618};
  const Vec torch_adamw = {0.93991708837687948, -1.9238698525834246, 0.36557538111763416, -0.24696022065733975};
  const Vec torch_adamw_ams = {0.93991708837687948, -1.9238698525834246, 0.36882533933198264, -0.24511963540753343};
  for (bool ams : {false, true}) {
    const AdamOptions a{.lr = 0.1, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-3, .weight_decay = 0.1, .amsgrad = ams};
    const AdamWOptions w{.lr = 0.1, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-3, .weight_decay = 0.1, .amsgrad = ams};
    const Vec ref_a = ref_adam(kP0, kGrads, 0.1, 0.8, 0.9, 1e-3, 0.1, false, ams);
    const Vec ref_w = ref_adam(kP0, kGrads, 0.1, 0.8, 0.9, 1e-3, 0.1, true, ams);
    EXPECT_TRUE(vec_close(ref_a, ams ? torch_adam_ams : torch_adam, 1e-14, 1e-16));
    EXPECT_TRUE(vec_close(ref_w, ams ? torch_adamw_ams : torch_adamw, 1e-14, 1e-16));
    EXPECT_TRUE(vec_close(run_example<Adam>(a), ref_a, kRtol64, kAtol64)) << "amsgrad " << ams;
    EXPECT_TRUE(vec_close(run_example<AdamW>(w), ref_w, kRtol64, kAtol64)) << "amsgrad " << ams;
    EXPECT_TRUE(vec_close(run_example<Adam>(a, kF32), ref_a, kRtol32, kAtol32)) << "f32, amsgrad " << ams;
    EXPECT_TRUE(vec_close(run_example<AdamW>(w, kF32), ref_w, kRtol32, kAtol32)) << "f32, amsgrad " << ams;
  }
  // amsgrad matters where v shrinks (element 2: gradient 0.3, then 0) and not elsewhere here.
  EXPECT_NE(torch_adam[2], torch_adam_ams[2]);
  // Step 1 by hand (bias correction makes m_hat = g, v_hat = g^2): Adam moves each element by
  // lr * g / (|g| + eps) with g including the decay, AdamW first shrinks p by 1 - lr * wd.
  Tensor p = make_param({1.0});
  AdamW opt({p}, {.lr = 0.1, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-3, .weight_decay = 0.1});
  set_grad(p, {0.5});
  opt.step();
  EXPECT_NEAR(p.item<double>(), 1.0 * (1 - 0.01) - 0.1 * 0.5 / (0.5 + 1e-3), 1e-15);
  EXPECT_EQ(opt.state(0).step, 1);
  EXPECT_EQ(opt.state(0).slots.size(), 2u);  // no max_exp_avg_sq without amsgrad
}

TEST(OptimRMSProp, ThreeStepsMatchEquationsAndPyTorch) {
  // PyTorch 1.13: torch.optim.RMSprop(lr=0.01, alpha=0.9, eps=1e-3) and the same with
  // weight_decay=0.1, momentum=0.5, centered=True, on torch.float64.
  const Vec torch_plain = {0.98362567388556477, -2.0160861294454961, 0.49740663259866708, -0.054756522430227578};
  const Vec torch_full = {0.96410205734264065, -1.9576658157803521, 0.46274213040460321, -0.099433528272558538};
  EXPECT_TRUE(vec_close(ref_rmsprop(kP0, kGrads, 0.01, 0.9, 1e-3, 0, 0, false), torch_plain, 1e-14, 1e-16));
  EXPECT_TRUE(vec_close(ref_rmsprop(kP0, kGrads, 0.01, 0.9, 1e-3, 0.1, 0.5, true), torch_full, 1e-14, 1e-16));
  for (bool centered : {false, true}) {
    for (double momentum : {0.0, 0.5}) {
      const RMSPropOptions o{.lr = 0.01, .alpha = 0.9, .eps = 1e-3, .weight_decay = 0.1, .momentum = momentum,
                             .centered = centered};
      const Vec ref = ref_rmsprop(kP0, kGrads, 0.01, 0.9, 1e-3, 0.1, momentum, centered);
      EXPECT_TRUE(vec_close(run_example<RMSProp>(o), ref, kRtol64, kAtol64)) << centered << " " << momentum;
      EXPECT_TRUE(vec_close(run_example<RMSProp>(o, kF32), ref, kRtol32, kAtol32)) << centered << " " << momentum;
    }
  }
  EXPECT_TRUE(vec_close(run_example<RMSProp>(RMSPropOptions{.lr = 0.01, .alpha = 0.9, .eps = 1e-3}), torch_plain,
                        kRtol64, kAtol64));
}

TEST(OptimLAMB, ThreeStepsMatchEquationsAndTrustRatio) {
  const LAMBOptions o{.lr = 0.1, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-6, .weight_decay = 0.01};
  Vec ratios;
  const Vec ref = ref_lamb(kP0, kGrads, 0.1, 0.8, 0.9, 1e-6, 0.01, true, &ratios);
  Tensor p = make_param(kP0);
  LAMB opt({p}, o);
  for (size_t s = 0; s < kGrads.size(); ++s) {
    set_grad(p, kGrads[s]);
    opt.step();
    EXPECT_NEAR(opt.last_trust_ratio(0), ratios[s], 1e-13 * ratios[s]) << "step " << s + 1;
  }
  EXPECT_TRUE(vec_close(p.to_vector<double>(), ref, kRtol64, kAtol64));
  EXPECT_TRUE(vec_close(run_example<LAMB>(o, kF32), ref, kRtol32, kAtol32));
  // Step 1 by hand: m_hat = g, v_hat = g^2, so r = g / (|g| + eps) + wd * p, and the trust
  // ratio is ||p0|| / ||r|| = sqrt(1 + 4 + 0.25) / ||r||.
  const Vec r = {0.1 / (0.1 + 1e-6) + 0.01 * 1.0, -0.2 / (0.2 + 1e-6) + 0.01 * -2.0, 0.3 / (0.3 + 1e-6) + 0.01 * 0.5,
                 0.4 / (0.4 + 1e-6)};
  const double rnorm = std::sqrt(r[0] * r[0] + r[1] * r[1] + r[2] * r[2] + r[3] * r[3]);
  EXPECT_NEAR(ratios[0], std::sqrt(5.25) / rnorm, 1e-15);
  // Without layer adaptation the ratio is 1.
  LAMBOptions flat = o;
  flat.layer_adaptation = false;
  EXPECT_TRUE(vec_close(run_example<LAMB>(flat), ref_lamb(kP0, kGrads, 0.1, 0.8, 0.9, 1e-6, 0.01, false), kRtol64,
                        kAtol64));
}

TEST(OptimLAMB, ZeroNormConventions) {
  // ||p|| = 0 (a zero-initialised bias): trust ratio 1, so the step is lr * r.
  Tensor bias = make_param({0.0, 0.0});
  LAMB opt({bias}, {.lr = 0.1, .eps = 0.0, .weight_decay = 0.5});
  set_grad(bias, {2.0, -3.0});
  opt.step();
  EXPECT_EQ(opt.last_trust_ratio(0), 1.0);
  // r = g / |g| + 0.5 * 0 = sign(g) at step 1 (eps 0).
  EXPECT_NEAR(bias.to_vector<double>()[0], -0.1, 1e-15);
  EXPECT_NEAR(bias.to_vector<double>()[1], 0.1, 1e-15);
  // ||r|| = 0 (zero gradient, no decay): ratio 1 and the parameter does not move.
  Tensor w = make_param({3.0, 4.0});
  LAMB opt2({w}, {.lr = 0.1, .weight_decay = 0.0});
  set_grad(w, {0.0, 0.0});
  opt2.step();
  EXPECT_EQ(opt2.last_trust_ratio(0), 1.0);
  EXPECT_EQ(w.to_vector<double>(), (Vec{3.0, 4.0}));
  // Both non-zero: ||p|| = 5; with g = (1, 0) and no decay r = (1 / (1 + eps), 0), so the
  // ratio is 5 (1 + eps) and the first element moves by lr * ratio * r = lr * 5.
  Tensor u = make_param({3.0, 4.0});
  LAMB opt3({u}, {.lr = 0.1, .eps = 1e-6, .weight_decay = 0.0});
  set_grad(u, {1.0, 0.0});
  opt3.step();
  EXPECT_NEAR(opt3.last_trust_ratio(0), 5.0 * (1 + 1e-6), 1e-14);
  EXPECT_NEAR(u.to_vector<double>()[0], 3.0 - 0.5, 1e-15);
  EXPECT_EQ(u.to_vector<double>()[1], 4.0);
}

TEST(OptimAdam, LargeF32ParameterAcrossThreadsMatchesEquations) {
  // 100k elements: the loop is split across threads; every element follows the equations.
  const int64_t n = 100000;
  Generator gen(7);
  Tensor p = randn({n}, kF32, &gen);
  p.set_requires_grad();
  const Vec p0 = p.to_vector<double>();
  std::vector<Vec> gs;
  AdamW opt({p}, {.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
  for (int s = 0; s < 3; ++s) {
    Tensor g = randn({n}, kF32, &gen);
    gs.push_back(g.to_vector<double>());
    p.set_grad(g);
    opt.step();
  }
  const Vec ref = ref_adam(p0, gs, 0.01, 0.9, 0.999, 1e-8, 0.1, true, true);
  EXPECT_TRUE(vec_close(p.to_vector<double>(), ref, kRtol32, kAtol32));
}

TEST(OptimLAMB, LargeParameterNormsMatchEquations) {
  // Several norm blocks and threads; f64 so the trust ratio is checked tightly.
  const int64_t n = 70001;
  Generator gen(11);
  Tensor p = randn({n}, kF64, &gen);
  p.set_requires_grad();
  const Vec p0 = p.to_vector<double>();
  std::vector<Vec> gs;
  LAMB opt({p}, {.lr = 0.01});
  for (int s = 0; s < 2; ++s) {
    Tensor g = randn({n}, kF64, &gen);
    gs.push_back(g.to_vector<double>());
    p.set_grad(g);
    opt.step();
  }
  Vec ratios;
  const Vec ref = ref_lamb(p0, gs, 0.01, 0.9, 0.999, 1e-6, 0.01, true, &ratios);
  EXPECT_NEAR(opt.last_trust_ratio(0), ratios[1], 1e-12 * ratios[1]);
  EXPECT_TRUE(vec_close(p.to_vector<double>(), ref, 1e-12, 1e-14));
}

// ---------------------------------------------------------------------------
// Groups, skipping, zero_grad
// ---------------------------------------------------------------------------

TEST(OptimGroups, EachGroupUsesItsOwnHyperparameters) {
  Tensor w = make_param(kP0);
  Tensor b = make_param({0.5, -0.5});
  AdamWOptions decay{.lr = 0.1, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-3, .weight_decay = 0.1};
  AdamWOptions no_decay = decay;
  no_decay.weight_decay = 0;
  no_decay.lr = 0.05;
  AdamW opt({{{w}, decay}, {{b}, no_decay}});
  EXPECT_EQ(opt.num_groups(), 2u);
  EXPECT_EQ(opt.num_params(), 2);
  const std::vector<Vec> bg = {{1.0, 2.0}, {-1.0, 0.5}, {0.25, 0.25}};
  for (size_t s = 0; s < 3; ++s) {
    set_grad(w, kGrads[s]);
    set_grad(b, bg[s]);
    opt.step();
  }
  EXPECT_TRUE(vec_close(w.to_vector<double>(), ref_adam(kP0, kGrads, 0.1, 0.8, 0.9, 1e-3, 0.1, true, false),
                        kRtol64, kAtol64));
  EXPECT_TRUE(vec_close(b.to_vector<double>(), ref_adam({0.5, -0.5}, bg, 0.05, 0.8, 0.9, 1e-3, 0.0, true, false),
                        kRtol64, kAtol64));
  EXPECT_EQ(opt.lr(1), 0.05);
  EXPECT_EQ(opt.initial_lr(1), 0.05);
  EXPECT_EQ(opt.options(1).weight_decay, 0.0);

  // add_param_group appends a third group, numbered after the others.
  Tensor c = make_param({1.0});
  opt.add_param_group({c}, decay);
  EXPECT_EQ(opt.num_groups(), 3u);
  EXPECT_TRUE(opt.parameters()[2].is_same(c));
}

TEST(OptimGroups, ParametersWithoutGradientAreSkipped) {
  Tensor a = make_param({1.0, 2.0});
  Tensor b = make_param({3.0});
  SGD opt({a, b}, {.lr = 0.1, .momentum = 0.9});
  set_grad(a, {1.0, 1.0});
  opt.step();  // b has no gradient: untouched, no state
  EXPECT_EQ(b.to_vector<double>(), (Vec{3.0}));
  EXPECT_EQ(opt.state(1).step, 0);
  EXPECT_EQ(opt.state_dict().tensors.count("state.1.momentum_buffer"), 0u);
  EXPECT_EQ(opt.state(0).step, 1);
  // b's first update starts its own momentum buffer (buf = g) while a's continues.
  set_grad(b, {2.0});
  opt.step();
  EXPECT_NEAR(b.item<double>(), 3.0 - 0.1 * 2.0, 1e-15);
  EXPECT_NEAR(a.to_vector<double>()[0], 1.0 - 0.1 * 1.0 - 0.1 * (0.9 * 1.0 + 1.0), 1e-15);
  EXPECT_EQ(opt.state(0).step, 2);
  EXPECT_EQ(opt.state(1).step, 1);
}

TEST(OptimGroups, ZeroGrad) {
  Tensor a = make_param({1.0, 2.0});
  SGD opt({a}, {.lr = 0.1});
  set_grad(a, {1.0, 1.0});
  Tensor kept = a.grad();
  opt.zero_grad(/*set_to_none=*/false);
  EXPECT_TRUE(a.grad().is_same(kept));
  EXPECT_EQ(a.grad().to_vector<double>(), (Vec{0.0, 0.0}));
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  opt.step();  // nothing to do
  EXPECT_EQ(a.to_vector<double>(), (Vec{1.0, 2.0}));
}

TEST(OptimGroups, StepBumpsVersionAndRecordsNoGraph) {
  Tensor a = make_param({1.0, 2.0});
  SGD opt({a}, {.lr = 0.1});
  set_grad(a, {1.0, 1.0});
  const uint32_t v0 = a.version();
  opt.step();  // grad mode is on here: step() turns it off itself
  EXPECT_GT(a.version(), v0);
  EXPECT_TRUE(a.is_leaf());
  EXPECT_TRUE(a.requires_grad());
}

TEST(OptimGroups, NonContiguousGradient) {
  Tensor a = from_vector<double>({1.0, 2.0, 3.0, 4.0}, {2, 2});
  a.set_requires_grad();
  Tensor m = from_vector<double>({1.0, 2.0, 3.0, 4.0}, {2, 2});
  SGD opt({a}, {.lr = 1.0});
  a.set_grad(transpose(m, 0, 1));  // [[1, 3], [2, 4]], strided
  opt.step();
  EXPECT_EQ(a.to_vector<double>(), (Vec{0.0, -1.0, 1.0, 0.0}));
}

TEST(OptimErrors, ConstructionAndHyperparameters) {
  Tensor p = make_param({1.0});
  expect_error([&] { SGD({}, SGDOptions{}); }, {"empty parameter list"});
  expect_error([&] { Adam({make_param({1.0}, kF16)}); }, {"parameter 0", "f16", "f32 master weights"});
  expect_error([&] { Adam({make_param({1.0}, kBF16)}); }, {"bf16"});
  expect_error([&] { SGD({p, p}); }, {"parameter 1", "more than once"});
  expect_error([&] { SGD({{{p}, {}}, {{p}, {}}}); }, {"more than once"});
  expect_error([&] { SGD({Tensor()}); }, {"parameter 0 is undefined"});
  Tensor nonleaf = mul(p, 2.0);
  expect_error([&] { SGD({nonleaf}); }, {"not a leaf"});
  Tensor t = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor tt = transpose(t, 0, 1);
  expect_error([&] { SGD({tt}); }, {"not contiguous", "[3, 2]"});
  expect_error([&] { SGD({p}, {.lr = -1}); }, {"SGD", "lr", "-1"});
  expect_error([&] { SGD({p}, {.lr = 0.1, .nesterov = true}); }, {"Nesterov", "momentum"});
  expect_error([&] { SGD({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}); }, {"dampening 0.1"});
  expect_error([&] { Adam({p}, {.beta1 = 1.0}); }, {"Adam", "beta1", "[0, 1)"});
  expect_error([&] { AdamW({p}, {.beta2 = -0.5}); }, {"AdamW", "beta2"});
  expect_error([&] { Adam({p}, {.eps = -1e-8}); }, {"eps"});
  expect_error([&] { RMSProp({p}, {.alpha = -0.1}); }, {"RMSProp", "alpha"});
  expect_error([&] { LAMB({p}, {.weight_decay = -0.1}); }, {"LAMB", "weight_decay"});
  // Options changed between steps are checked at the next step.
  SGD opt({p}, {.lr = 0.1});
  opt.options(0).momentum = -1;
  set_grad(p, {1.0});
  expect_error([&] { opt.step(); }, {"momentum must be >= 0"});
  expect_error([&] { opt.set_lr(0, -0.5); }, {"learning rate", "-0.5"});
  expect_error([&] { opt.lr(3); }, {"group 3 out of range"});
  expect_error([&] { opt.state(5); }, {"parameter index 5"});
}

// ---------------------------------------------------------------------------
// State dict
// ---------------------------------------------------------------------------

namespace {

// Parameters of a small model: a large f32 matrix (split across threads), a zero bias (LAMB's
// zero-norm case), an f64 vector and a parameter that gets its first gradient only after the
// state is saved.
std::vector<Tensor> model_params(uint64_t seed) {
  Generator gen(seed);
  std::vector<Tensor> ps = {randn({300, 200}, kF32, &gen), zeros({7}, kF32), randn({5}, kF64, &gen),
                            randn({3}, kF32, &gen)};
  for (Tensor& p : ps) p.set_requires_grad();
  return ps;
}

std::vector<Tensor> clone_params(const std::vector<Tensor>& ps) {
  std::vector<Tensor> out;
  for (const Tensor& p : ps) {
    Tensor c = p.detach().clone();
    c.set_requires_grad();
    out.push_back(c);
  }
  return out;
}

// The same gradients for both runs: a function of the step only.
void set_grads(const std::vector<Tensor>& ps, int step) {
  Generator gen(1000 + static_cast<uint64_t>(step));
  for (size_t i = 0; i < ps.size(); ++i) {
    Tensor p = ps[i];
    if (i == 3 && step < 3) {
      p.set_grad(Tensor());
      continue;
    }
    p.set_grad(randn(p.sizes(), p.dtype(), &gen));
  }
}

// Splits the parameters into two groups (matrix and f64 vector / bias and late parameter) with
// the two option sets.
template <typename Opt, typename Options>
std::unique_ptr<Opt> make_opt(const std::vector<Tensor>& ps, const Options& a, const Options& b) {
  return std::make_unique<Opt>(std::vector<ParamGroup<Options>>{{{ps[0], ps[2]}, a}, {{ps[1], ps[3]}, b}});
}

template <typename Opt, typename Options>
void check_round_trip(Options a, Options b) {
  const std::vector<Tensor> pa = model_params(3);
  auto A = make_opt<Opt>(pa, a, b);
  for (int s = 0; s < 3; ++s) {
    set_grads(pa, s);
    A->step();
  }
  const OptimizerState saved = A->state_dict();
  // Through JSON, as a checkpoint stores it, with the tensors cloned as a file would hold them.
  std::map<std::string, Tensor> tensors;
  for (const auto& kv : saved.tensors) tensors[kv.first] = kv.second.clone();
  const OptimizerState loaded = OptimizerState::from_json(saved.to_json(), tensors);
  EXPECT_EQ(loaded.scalars, saved.scalars);

  // B starts from the same parameter values but different hyperparameters, which the load
  // replaces with A's.
  const std::vector<Tensor> pb = clone_params(pa);
  Options other = a;
  other.lr = a.lr * 7;
  auto B = make_opt<Opt>(pb, other, other);
  B->load_state_dict(loaded);
  EXPECT_EQ(B->lr(0), a.lr);
  EXPECT_EQ(B->lr(1), b.lr);
  for (int s = 3; s < 6; ++s) {
    set_grads(pa, s);
    set_grads(pb, s);
    A->step();
    B->step();
  }
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].to_vector<double>(), pb[i].to_vector<double>()) << Options::kName << " parameter " << i;
  const OptimizerState sa = A->state_dict(), sb = B->state_dict();
  EXPECT_EQ(sa.scalars, sb.scalars);
  ASSERT_EQ(sa.tensors.size(), sb.tensors.size());
  for (const auto& kv : sa.tensors) {
    const Tensor& ta = kv.second;
    const Tensor& tb = sb.tensors.at(kv.first);
    EXPECT_EQ(ta.to_vector<double>(), tb.to_vector<double>()) << kv.first;
  }
}

}  // namespace

TEST(OptimStateDict, RoundTripIsBitExact) {
  check_round_trip<SGD>(SGDOptions{.lr = 0.01, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-3},
                        SGDOptions{.lr = 0.02, .momentum = 0.8, .nesterov = true});
  check_round_trip<RMSProp>(RMSPropOptions{.lr = 1e-3, .weight_decay = 1e-2, .momentum = 0.9, .centered = true},
                            RMSPropOptions{.lr = 2e-3});
  check_round_trip<Adam>(AdamOptions{.lr = 1e-3, .weight_decay = 1e-2, .amsgrad = true}, AdamOptions{.lr = 3e-3});
  check_round_trip<AdamW>(AdamWOptions{.lr = 1e-3, .weight_decay = 0.1}, AdamWOptions{.lr = 3e-3, .weight_decay = 0});
  check_round_trip<LAMB>(LAMBOptions{.lr = 1e-3}, LAMBOptions{.lr = 2e-3, .weight_decay = 0, .layer_adaptation = false});
}

TEST(OptimStateDict, Format) {
  Tensor w = make_param({1.0, 2.0});
  Tensor b = make_param({0.0});
  Adam opt({{{w}, {.lr = 0.5, .amsgrad = true}}, {{b}, {.lr = 0.25}}});
  set_grad(w, {1.0, -1.0});
  opt.step();
  opt.set_lr(0, 0.125);
  const OptimizerState st = opt.state_dict();
  EXPECT_EQ(st.optimizer, "Adam");
  const std::map<std::string, double> expected = {
      {"num_groups", 2},           {"group.0.num_params", 1},   {"group.0.initial_lr", 0.5},
      {"group.0.lr", 0.125},       {"group.0.beta1", 0.9},      {"group.0.beta2", 0.999},
      {"group.0.eps", 1e-8},       {"group.0.weight_decay", 0}, {"group.0.amsgrad", 1},
      {"group.1.num_params", 1},   {"group.1.initial_lr", 0.25}, {"group.1.lr", 0.25},
      {"group.1.beta1", 0.9},      {"group.1.beta2", 0.999},    {"group.1.eps", 1e-8},
      {"group.1.weight_decay", 0}, {"group.1.amsgrad", 0},      {"state.0.step", 1}};
  EXPECT_EQ(st.scalars, expected);
  ASSERT_EQ(st.tensors.size(), 3u);
  // After one step with beta1 = 0.9: m = 0.1 g, v = 0.001 g^2.
  EXPECT_TRUE(all_close(st.tensors.at("state.0.exp_avg"), from_vector<double>({0.1, -0.1}), 1e-15));
  EXPECT_TRUE(all_close(st.tensors.at("state.0.exp_avg_sq"), from_vector<double>({0.001, 0.001}), 1e-15));
  EXPECT_TRUE(all_close(st.tensors.at("state.0.max_exp_avg_sq"), from_vector<double>({0.001, 0.001}), 1e-15));
  const std::string json = st.to_json();
  const std::string head = "{\"format\":1,\"optimizer\":\"Adam\",\"scalars\":{\"group.0.amsgrad\":1,";
  EXPECT_EQ(json.substr(0, head.size()), head);
  EXPECT_NE(json.find("\"group.0.eps\":1e-08"), std::string::npos) << json;
  EXPECT_NE(json.find("\"state.0.step\":1"), std::string::npos) << json;
}

TEST(OptimStateDict, JsonRoundTripIsExact) {
  OptimizerState st;
  st.optimizer = "LAMB";
  st.scalars = {{"a", 0.1}, {"b", 1.0 / 3.0}, {"c", 9007199254740992.0}, {"d", -0.0}, {"e", 5e-324},
                {"f", 1.7976931348623157e308}, {"g", 0}};
  const OptimizerState back = OptimizerState::from_json(st.to_json());
  EXPECT_EQ(back.optimizer, "LAMB");
  ASSERT_EQ(back.scalars.size(), st.scalars.size());
  for (const auto& [k, v] : st.scalars) EXPECT_EQ(std::memcmp(&v, &back.scalars.at(k), sizeof(double)), 0) << k;
  // Whitespace and escapes are read; errors name what is wrong and where.
  const OptimizerState ws = OptimizerState::from_json(
      " { \"optimizer\" : \"S\\u0047D\" , \"scalars\" : { \"x\" : -1.5e2 } , \"format\" : 1 } ");
  EXPECT_EQ(ws.optimizer, "SGD");
  EXPECT_EQ(ws.scalars.at("x"), -150.0);
  expect_error([] { OptimizerState::from_json("{\"format\":1,\"optimizer\":\"SGD\"}"); }, {"needs"});
  expect_error([] { OptimizerState::from_json("{\"format\":2,\"optimizer\":\"SGD\",\"scalars\":{}}"); },
               {"format 2"});
  expect_error([] { OptimizerState::from_json("{\"format\":1,\"optimizer\":\"SGD\",\"scalars\":{\"a\":x}}"); },
               {"expected a number", "offset 45"});
  expect_error([] { OptimizerState::from_json("{\"format\":1,\"optimizer\":\"SGD\",\"scalars\":{}} x"); },
               {"text after"});
  expect_error([] { OptimizerState::from_json("{\"format\":1,\"optimizer\":\"SGD\",\"scalars\":{\"a\":1,\"a\":2}}"); },
               {"\"a\" repeated"});
  expect_error([] { OptimizerState::from_json("{\"other\":1}"); }, {"unexpected key \"other\""});
  OptimizerState bad;
  bad.scalars["x"] = std::numeric_limits<double>::infinity();
  expect_error([&] { (void)bad.to_json(); }, {"\"x\"", "inf"});
}

TEST(OptimStateDict, LoadErrorsNameTheMismatch) {
  auto make = [](std::vector<Tensor> ps) {
    return std::make_unique<Adam>(std::move(ps), AdamOptions{.lr = 0.1, .amsgrad = true});
  };
  Tensor w = make_param({1.0, 2.0});
  Tensor b = make_param({3.0});
  auto opt = make({w, b});
  set_grad(w, {1.0, 1.0});
  set_grad(b, {1.0});
  opt->step();
  const OptimizerState good = opt->state_dict();

  Tensor w2 = make_param({1.0, 2.0});
  Tensor b2 = make_param({3.0});
  auto target = make({w2, b2});
  target->set_lr(0, 0.5);
  auto expect_load_error = [&](const OptimizerState& st, const std::vector<std::string>& parts) {
    expect_error([&] { target->load_state_dict(st); }, parts);
    // Nothing changed: the old hyperparameters and no state.
    EXPECT_EQ(target->lr(0), 0.5);
    EXPECT_EQ(target->state(0).step, 0);
  };

  SGD sgd({make_param({1.0})});
  expect_error([&] { sgd.load_state_dict(good); }, {"saved by Adam, this optimizer is SGD"});
  // Parameter count.
  Adam fewer({make_param({1.0, 2.0})}, {.amsgrad = true});
  expect_error([&] { fewer.load_state_dict(good); }, {"group 0 of the state has 2 parameters", "has 1"});
  // Group count.
  Adam two({{{make_param({1.0, 2.0})}, {}}, {{make_param({3.0})}, {}}});
  expect_error([&] { two.load_state_dict(good); }, {"1 parameter groups", "has 2"});
  // Shape.
  {
    OptimizerState st = good;
    st.tensors["state.0.exp_avg"] = zeros({3}, kF64);
    expect_load_error(st, {"\"state.0.exp_avg\"", "shape [3]", "parameter 0 has shape [2]"});
  }
  // Dtype.
  {
    OptimizerState st = good;
    st.tensors["state.1.exp_avg_sq"] = zeros({1}, kF32);
    expect_load_error(st, {"\"state.1.exp_avg_sq\"", "dtype f32", "parameter 1 has dtype f64"});
  }
  // Unknown buffer, index out of range, tensor without a step, malformed key.
  {
    OptimizerState st = good;
    st.tensors["state.0.momentum_buffer"] = zeros({2}, kF64);
    expect_load_error(st, {"no buffer named \"momentum_buffer\""});
  }
  {
    OptimizerState st = good;
    st.tensors["state.2.exp_avg"] = zeros({2}, kF64);
    expect_load_error(st, {"\"state.2.exp_avg\" names parameter 2", "2 parameters"});
  }
  {
    OptimizerState st = good;
    st.scalars.erase("state.1.step");
    expect_load_error(st, {"\"state.1.exp_avg\" is given but \"state.1.step\" is not"});
  }
  {
    OptimizerState st = good;
    st.tensors["exp_avg"] = zeros({2}, kF64);
    expect_load_error(st, {"unexpected tensor \"exp_avg\""});
  }
  // Scalars: unknown key, bad step, missing or invalid hyperparameter, boolean not 0/1.
  {
    OptimizerState st = good;
    st.scalars["group.0.momentum"] = 0.9;
    expect_load_error(st, {"unexpected scalar \"group.0.momentum\""});
  }
  {
    OptimizerState st = good;
    st.scalars["state.0.step"] = 1.5;
    expect_load_error(st, {"\"state.0.step\" must be a positive integer, got 1.5"});
  }
  {
    OptimizerState st = good;
    st.scalars.erase("group.0.beta2");
    expect_load_error(st, {"no \"group.0.beta2\""});
  }
  {
    OptimizerState st = good;
    st.scalars["group.0.beta1"] = 1.5;
    expect_load_error(st, {"beta1 must be in [0, 1), got 1.5"});
  }
  {
    OptimizerState st = good;
    st.scalars["group.0.amsgrad"] = 0.5;
    expect_load_error(st, {"\"group.0.amsgrad\" is a boolean"});
  }
  // A buffer the hyperparameters need is missing.
  {
    OptimizerState st = good;
    st.tensors.erase("state.1.max_exp_avg_sq");
    expect_load_error(st, {"no \"state.1.max_exp_avg_sq\"", "group 0"});
  }
  // The good state loads, and its tensors are copied, not shared.
  target->load_state_dict(good);
  EXPECT_EQ(target->lr(0), 0.1);
  EXPECT_EQ(target->state(0).step, 1);
  EXPECT_FALSE(target->state(0).slots[0].storage() == opt->state(0).slots[0].storage());
  EXPECT_EQ(target->state(0).slots[0].to_vector<double>(), opt->state(0).slots[0].to_vector<double>());
}

// ---------------------------------------------------------------------------
// Gradient clipping
// ---------------------------------------------------------------------------

TEST(OptimClip, GradNormValuesAndInPlaceScaling) {
  // Gradients (3, 4) and (12): 2-norm sqrt(9 + 16 + 144) = 13, 1-norm 19, inf-norm 12.
  auto setup = [](Tensor& a, Tensor& b) {
    a = make_param({0.0, 0.0});
    b = make_param({0.0});
    set_grad(a, {3.0, -4.0});
    set_grad(b, {12.0});
  };
  struct Case {
    double p, norm;
  };
  for (const Case c : {Case{2.0, 13.0}, Case{1.0, 19.0}, Case{nn::kInfNorm, 12.0}}) {
    Tensor a, b;
    setup(a, b);
    const Tensor ga = a.grad();  // the same tensor is scaled in place
    const double total = nn::clip_grad_norm_({a, b}, 6.5, c.p);
    EXPECT_DOUBLE_EQ(total, c.norm) << "p = " << c.p;
    const double coef = 6.5 / (c.norm + 1e-6);
    EXPECT_TRUE(ga.is_same(a.grad()));
    EXPECT_TRUE(all_close(ga, from_vector<double>({3.0 * coef, -4.0 * coef}), 1e-15));
    EXPECT_TRUE(all_close(b.grad(), from_vector<double>({12.0 * coef}, {1}), 1e-15));
  }
  // p = 3: (27 + 64 + 1728)^(1/3).
  {
    Tensor a, b;
    setup(a, b);
    EXPECT_NEAR(nn::clip_grad_norm_({a, b}, 100.0, 3.0), std::cbrt(1819.0), 1e-12);
    EXPECT_EQ(a.grad().to_vector<double>(), (Vec{3.0, -4.0}));  // under the limit: untouched
  }
  // f32 gradients, one parameter without a gradient.
  {
    Tensor a = make_param({0.0, 0.0}, kF32);
    Tensor none = make_param({1.0}, kF32);
    set_grad(a, {3.0, 4.0});
    EXPECT_NEAR(nn::clip_grad_norm_({a, none}, 1.0), 5.0, 1e-6);
    EXPECT_TRUE(all_close(a.grad(), from_vector<float>({0.6f, 0.8f}), 1e-6));
    EXPECT_FALSE(none.grad().defined());
  }
  // A total computed elsewhere (over tensor-parallel shards or pipeline stages): scale by
  // max_norm / (total + 1e-6) when below 1, leave the gradients alone otherwise.
  {
    Tensor a = make_param({0.0, 0.0});
    Tensor none = make_param({1.0});
    set_grad(a, {3.0, 4.0});
    nn::clip_grads_with_norm_({a, none}, 2.0, 10.0);  // 2 / (10 + 1e-6)
    EXPECT_NEAR(a.grad().to_vector<double>()[0], 3.0 * 2.0 / (10.0 + 1e-6), 1e-15);
    EXPECT_NEAR(a.grad().to_vector<double>()[1], 4.0 * 2.0 / (10.0 + 1e-6), 1e-15);
    EXPECT_FALSE(none.grad().defined());
    set_grad(a, {3.0, 4.0});
    nn::clip_grads_with_norm_({a}, 20.0, 10.0);
    EXPECT_EQ(a.grad().to_vector<double>(), (Vec{3.0, 4.0}));
    expect_error([&] { nn::clip_grads_with_norm_({a}, -1.0, 10.0); }, {"max_norm", "-1"});
  }
  // No gradients at all.
  EXPECT_EQ(nn::clip_grad_norm_({make_param({1.0})}, 1.0), 0.0);
  // Non-finite totals, as PyTorch: an infinite one scales by 0 (the inf element becomes NaN), a
  // NaN one by NaN; or an error that leaves the gradients alone.
  {
    Tensor a = make_param({0.0, 0.0});
    set_grad(a, {std::numeric_limits<double>::infinity(), 1.0});
    expect_error([&] { nn::clip_grad_norm_({a}, 1.0, 2.0, true); }, {"total norm", "inf"});
    EXPECT_EQ(a.grad().to_vector<double>()[1], 1.0);
    EXPECT_TRUE(std::isinf(nn::clip_grad_norm_({a}, 1.0)));
    EXPECT_TRUE(std::isnan(a.grad().to_vector<double>()[0]));
    EXPECT_EQ(a.grad().to_vector<double>()[1], 0.0);
    set_grad(a, {std::numeric_limits<double>::quiet_NaN(), 1.0});
    EXPECT_TRUE(std::isnan(nn::clip_grad_norm_({a}, 1.0, nn::kInfNorm)));
    EXPECT_TRUE(std::isnan(a.grad().to_vector<double>()[1]));
  }
  Tensor a = make_param({1.0});
  expect_error([&] { nn::clip_grad_norm_({a}, 1.0, 0.0); }, {"norm_type must be > 0", "got 0"});
  expect_error([&] { nn::clip_grad_norm_({a}, -1.0); }, {"max_norm must be >= 0"});
}

TEST(OptimClip, GradValue) {
  Tensor a = make_param({0.0, 0.0, 0.0});
  set_grad(a, {-3.0, 0.5, 2.0});
  const Tensor g = a.grad();
  nn::clip_grad_value_({a, make_param({1.0})}, 1.0);
  EXPECT_TRUE(g.is_same(a.grad()));
  EXPECT_EQ(g.to_vector<double>(), (Vec{-1.0, 0.5, 1.0}));
  expect_error([&] { nn::clip_grad_value_({a}, -1.0); }, {"clip_value must be >= 0"});
}

// ---------------------------------------------------------------------------
// End to end
// ---------------------------------------------------------------------------

namespace {
// loss(w) = sum(c * (w - t)^2): condition number 10.
Tensor quadratic_loss(const Tensor& w) {
  const Tensor c = from_vector<float>({0.5f, 1.0f, 2.0f, 5.0f, 0.5f, 1.5f, 3.0f, 4.0f});
  const Tensor t = from_vector<float>({1.0f, -1.0f, 2.0f, 0.5f, -2.0f, 0.0f, 1.0f, 3.0f});
  const Tensor d = sub(w, t);
  return sum(mul(c, mul(d, d)));
}

template <typename Opt, typename Options>
std::vector<double> train_quadratic(const Options& o, int steps) {
  Tensor w = zeros({8}, kF32);
  w.set_requires_grad();
  Opt opt({w}, o);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss = quadratic_loss(w);
    losses.push_back(loss.item<double>());
    loss.backward();
    opt.step();
  }
  losses.push_back(quadratic_loss(w).item<double>());
  return losses;
}
}  // namespace

TEST(OptimEndToEnd, SGDAndAdamMinimizeAQuadratic) {
  // Gradient descent with lr < 1 / L (L = 2 * 5) decreases a convex quadratic at every step.
  const std::vector<double> sgd = train_quadratic<SGD>(SGDOptions{.lr = 0.05}, 200);
  for (size_t s = 1; s < sgd.size(); ++s) EXPECT_LT(sgd[s], sgd[s - 1]) << "step " << s;
  EXPECT_LT(sgd.back(), 1e-6 * sgd.front());
  const std::vector<double> mom = train_quadratic<SGD>(SGDOptions{.lr = 0.02, .momentum = 0.9, .nesterov = true}, 200);
  EXPECT_LT(mom.back(), 1e-6 * mom.front());
  const std::vector<double> adam = train_quadratic<Adam>(AdamOptions{.lr = 0.05}, 400);
  EXPECT_LT(adam.back(), 1e-3 * adam.front());
  const std::vector<double> lamb = train_quadratic<LAMB>(LAMBOptions{.lr = 0.02, .weight_decay = 0}, 400);
  EXPECT_LT(lamb.back(), 1e-2 * lamb.front());
}
