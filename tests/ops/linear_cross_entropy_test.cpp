// linear_cross_entropy (NOTE [Linear cross-entropy]): the loss and the gradients of hidden,
// weight and bias against the composition it replaces, cross_entropy(linear(hidden, weight[:V],
// bias[:V])), run by the existing ops in f64 on the same values: f64 to rounding, f32 within the
// f32 tolerances, bf16 on each bf16 GEMM kernel the CPU has; over shapes that cross the kernel's
// tiles (512 classes, 1024 rows), padded tables, ignored rows, every reduction, no bias, no
// features. Then finite differences (first and second order), thread-count independence,
// autocast, the f16 and no-kernel routes, and the errors.
#include <cmath>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "ops/autocast.h"
#include "ops/cpu/bgemm_amx.h"
#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using autograd::TensorList;

namespace {

struct LceCase {
  std::string name;
  int64_t n = 0, C = 0, Vp = 0, V = 0;
  bool bias = true;
  double ignored = 0;  // fraction of targets set to ignore_index
  Shape lead;          // hidden's leading dims (default {n})
};

const std::vector<LceCase> kCases = {
    {"small", 7, 5, 13, 13, true, 0.0, {}},
    {"padded_table_two_class_tiles", 37, 16, 1152, 1100, false, 0.3, {}},
    {"two_row_blocks", 2100, 8, 600, 600, true, 0.1, {}},
    {"three_dims", 24, 12, 70, 61, true, 0.2, {4, 6}},
    {"no_features", 4, 0, 6, 6, true, 0.0, {}},
    {"everything_ignored", 3, 4, 5, 5, true, 1.0, {}},
};

struct Inputs {
  Tensor hidden, weight, bias, target, grad;  // grad: the upstream gradient of a Reduction::None loss
};

Inputs draw(const LceCase& c, uint64_t seed) {
  Generator g(seed);
  Inputs in;
  Shape hs = c.lead.empty() ? Shape{c.n} : c.lead;
  const Shape ts = hs;
  hs.push_back(c.C);
  in.hidden = randn(hs, kF64, &g);
  in.weight = mul(randn({c.Vp, c.C}, kF64, &g), 0.5);
  if (c.bias) in.bias = randn({c.Vp}, kF64, &g);
  const std::vector<double> u = rand({c.n}, kF64, &g).to_vector<double>();
  std::vector<int64_t> t = randint(0, c.V, {c.n}, DType::I64, &g).to_vector<int64_t>();
  for (int64_t i = 0; i < c.n; ++i)
    if (u[static_cast<size_t>(i)] < c.ignored) t[static_cast<size_t>(i)] = -100;
  in.target = reshape(from_vector(t, {c.n}), ts);
  in.grad = randn(ts, kF64, &g);
  return in;
}

struct Results {
  Tensor loss, dh, dw, db;
};

// The loss and the gradients of hidden, weight and bias (as leaves of `dt`), by the fused op or
// by the composition.
Results run(const Inputs& in, DType dt, Reduction r, bool fused, int64_t V,
            LinearCrossEntropyImpl impl = LinearCrossEntropyImpl::Tiled) {
  const Tensor h = in.hidden.to(dt).detach().set_requires_grad(true), w = in.weight.to(dt).detach().set_requires_grad(true);
  const Tensor b = in.bias.defined() ? in.bias.to(dt).detach().set_requires_grad(true) : Tensor();
  Tensor loss;
  if (fused) {
    LinearCrossEntropyOptions o;
    o.reduction = r;
    o.vocab_size = V;
    o.impl = impl;
    loss = linear_cross_entropy(h, w, b, in.target, o);
  } else {
    CrossEntropyOptions o;
    o.reduction = r;
    const Tensor logits = linear(reshape(h, {in.target.numel(), h.size(-1)}), narrow(w, 0, 0, V), b.defined() ? narrow(b, 0, 0, V) : Tensor());
    loss = cross_entropy(logits, reshape(in.target, {-1}), o);
    if (r == Reduction::None) loss = reshape(loss, in.target.sizes());
  }
  const Tensor go = r == Reduction::None ? in.grad.to(loss.dtype()) : ones({}, loss.dtype());
  TensorList leaves{h, w};
  if (b.defined()) leaves.push_back(b);
  const TensorList g = autograd::grad({loss}, leaves, {go});
  return {loss.detach(), g[0], g[1], b.defined() ? g[2] : Tensor()};
}

// Bit for bit (as doubles: every f32 and bf16 value is one exactly).
bool bit_equal(const Tensor& a, const Tensor& b) { return a.sizes() == b.sizes() && a.to_vector<double>() == b.to_vector<double>(); }

const std::vector<Reduction> kReductions = {Reduction::None, Reduction::Sum, Reduction::Mean};

std::string trace(const LceCase& c, Reduction r) { return c.name + ", reduction " + reduction_name(r); }

void expect_close(const Results& got, const Results& ref, double loss_tol, double grad_tol) {
  EXPECT_LE(relative_error(got.loss, ref.loss), loss_tol) << "loss";
  EXPECT_LE(relative_error(got.dh, ref.dh), grad_tol) << "d hidden";
  EXPECT_LE(relative_error(got.dw, ref.dw), grad_tol) << "d weight";
  if (ref.db.defined()) {
    EXPECT_LE(relative_error(got.db, ref.db), grad_tol) << "d bias";
  }
}

// bf16 against f64 on the same bf16 values: the logits are f32 sums of exact products (never
// rounded), so the loss carries only its own final rounding to bf16 (2^-9); each gradient
// element is an f32 sum of terms of the logits' gradient, itself rounded to bf16 once, and is
// rounded once more: two roundings, within 2^-7 with room (attention's bf16 gradients measure
// 2e-3 to 4e-3 by the same test).
constexpr double kBf16LossTolerance = 1.0 / 256;
constexpr double kBf16GradTolerance = 1.0 / 128;

}  // namespace

TEST(LinearCrossEntropy, MatchesTheCompositionInF64AndF32) {
  with_and_without_avx512([](bool) {
  uint64_t seed = 500;
  for (const LceCase& c : kCases) {
    const Inputs in = draw(c, seed++);
    for (Reduction r : kReductions) {
      SCOPED_TRACE(trace(c, r));
      const Results ref = run(in, kF64, r, false, c.V);
      expect_close(run(in, kF64, r, true, c.V), ref, 1e-13, 1e-12);
      // f32 against the f64 composition on the same (f32-representable) values.
      Inputs in32 = in;
      in32.hidden = in.hidden.to(kF32).to(kF64);
      in32.weight = in.weight.to(kF32).to(kF64);
      if (in.bias.defined()) in32.bias = in.bias.to(kF32).to(kF64);
      expect_close(run(in32, kF32, r, true, c.V), run(in32, kF64, r, false, c.V), f64_reference_tolerance(kF32, false),
                   f64_reference_tolerance(kF32, true));
    }
  }
  });
}

TEST(LinearCrossEntropy, EverythingIgnoredGivesNaNMeanAndZeroGradients) {
  const LceCase& c = kCases.back();
  const Results r = run(draw(c, 7), kF64, Reduction::Mean, true, c.V);
  EXPECT_TRUE(std::isnan(r.loss.item<double>()));
  EXPECT_EQ(sum(abs(r.dh)).item<double>(), 0.0);
  EXPECT_EQ(sum(abs(r.dw)).item<double>(), 0.0);
  EXPECT_EQ(sum(abs(r.db)).item<double>(), 0.0);
}

TEST(LinearCrossEntropy, PaddedRowsGetNoGradient) {
  const LceCase& c = kCases[1];  // 1100 classes of a 1152-row table
  const Results r = run(draw(c, 8), kF64, Reduction::Sum, true, c.V);
  EXPECT_EQ(sum(abs(narrow(r.dw, 0, c.V, c.Vp - c.V))).item<double>(), 0.0);
  EXPECT_GT(sum(abs(narrow(r.dw, 0, 0, c.V))).item<double>(), 0.0);
}

TEST(LinearCrossEntropy, PassesGradcheck) {
  for (Reduction r : kReductions) {
    SCOPED_TRACE(reduction_name(r));
    const LceCase c{"gc", 6, 3, 9, 7, true, 0.2, {}};
    const Inputs in = draw(c, 900);
    LinearCrossEntropyOptions o;
    o.reduction = r;
    o.vocab_size = c.V;
    o.impl = LinearCrossEntropyImpl::Tiled;
    auto f = [&](const TensorList& x) { return linear_cross_entropy(x[0], x[1], x[2], in.target, o); };
    const TensorList inputs{in.hidden.detach().set_requires_grad(true), in.weight.detach().set_requires_grad(true),
                            in.bias.detach().set_requires_grad(true)};
    EXPECT_TRUE(grad_ok(gradcheck(f, inputs)));
    EXPECT_TRUE(grad_ok(gradgradcheck(f, inputs)));
  }
}

TEST(LinearCrossEntropy, Bf16OnTheBf16GemmKernels) {
  if (bf16_kernels().empty()) GTEST_SKIP() << kNoBf16Kernel;
  for (const cpu::Bf16Gemm kernel : bf16_kernels()) {
    SCOPED_TRACE(kernel == cpu::Bf16Gemm::Amx ? "AMX" : "AVX512-BF16");
    const cpu::Bf16Gemm before = cpu::set_bf16_gemm_kernel_for_testing(kernel);
    uint64_t seed = 600;
    std::vector<LceCase> cases = kCases;
    // Features too many for a tile of the table to pack once (whole tiles, one product each),
    // with the hidden states still packed once for d W.
    cases.push_back({"wide_features", 40, 1100, 600, 600, true, 0.1, {}});
    for (const LceCase& c : cases) {
      Inputs in = draw(c, seed++);
      in.hidden = in.hidden.to(kBF16).to(kF64);
      in.weight = in.weight.to(kBF16).to(kF64);
      if (in.bias.defined()) in.bias = in.bias.to(kBF16).to(kF64);
      for (Reduction r : kReductions) {
        SCOPED_TRACE(trace(c, r));
        const Results got = run(in, kBF16, r, true, c.V);
        EXPECT_EQ(got.dh.dtype(), kBF16);
        expect_close(got, run(in, kF64, r, false, c.V), kBf16LossTolerance, kBf16GradTolerance);
      }
    }
    cpu::set_bf16_gemm_kernel_for_testing(before);
  }
}

TEST(LinearCrossEntropy, DoesNotDependOnTheThreads) {
  const int threads_before = get_num_threads();
  std::vector<DType> dtypes{kF32};
  if (!bf16_kernels().empty()) dtypes.push_back(kBF16);
  for (const DType dt : dtypes) {
    for (const LceCase& c : {kCases[1], kCases[2]}) {
      SCOPED_TRACE(c.name + " " + std::string(dtype_name(dt)));
      const Inputs in = draw(c, 700);
      set_num_threads(1);
      const Results one = run(in, dt, Reduction::Mean, true, c.V);
      set_num_threads(3);
      const Results three = run(in, dt, Reduction::Mean, true, c.V);
      EXPECT_TRUE(bit_equal(one.loss, three.loss));
      EXPECT_TRUE(bit_equal(one.dh, three.dh));
      EXPECT_TRUE(bit_equal(one.dw, three.dw));
      if (one.db.defined()) {
        EXPECT_TRUE(bit_equal(one.db, three.db));
      }
    }
  }
  set_num_threads(threads_before);
}

// Under autocast the product runs on bf16 values and the loss comes out f32. The f32 table and
// bias stay f32 (rounded tile by tile as the kernels read them): hidden's gradient is the bf16
// op's cast, bit for bit, and the table's and bias's are the f32 sums that the bf16 op rounds:
// rounded to bf16 they are its gradients bit for bit, and they are not rounded themselves. With
// bias, without, and over two row blocks (d W summed across them in f32). A create_graph
// backward (the composition's recorded formula, NOTE [Higher-order gradients]) agrees within the
// bf16 tolerance.
TEST(LinearCrossEntropy, AutocastLowersTheProductAndReturnsAnF32Loss) {
  // The kernel in use (TRIDENT_CPU_BF16_GEMM=off takes the f32 route, F16AndNoKernelComputeInF32).
  if (cpu::bf16_gemm_kernel() == cpu::Bf16Gemm::None)
    GTEST_SKIP() << "no bf16 GEMM kernel in use (this CPU, this build or TRIDENT_CPU_BF16_GEMM=off)";
  for (const LceCase* c : {&kCases[0], &kCases[1], &kCases[2]}) {
    SCOPED_TRACE(c->name);
    const Inputs in = draw(*c, 800);
    const Tensor h = in.hidden.to(kF32).detach().set_requires_grad(true), w = in.weight.to(kF32).detach().set_requires_grad(true);
    const Tensor b = c->bias ? in.bias.to(kF32).detach().set_requires_grad(true) : Tensor();
    TensorList leaves{h, w};
    if (b.defined()) leaves.push_back(b);
    LinearCrossEntropyOptions o;
    o.vocab_size = c->V;
    Tensor loss, loss2;
    {
      autocast::Guard guard(kBF16);
      loss = linear_cross_entropy(h, w, b, in.target, o);
      loss2 = linear_cross_entropy(h, w, b, in.target, o);
    }
    EXPECT_EQ(loss.dtype(), kF32);
    const TensorList g = autograd::grad({loss}, leaves);
    for (const Tensor& x : g) EXPECT_EQ(x.dtype(), kF32);
    // The op on the bf16 values, its loss rounded to bf16 at the end.
    const Tensor hb = in.hidden.to(kBF16).detach().set_requires_grad(true), wb = in.weight.to(kBF16).detach().set_requires_grad(true);
    const Tensor bb = c->bias ? in.bias.to(kBF16).detach().set_requires_grad(true) : Tensor();
    TensorList leaves_b{hb, wb};
    if (bb.defined()) leaves_b.push_back(bb);
    const Tensor lb = linear_cross_entropy(hb, wb, bb, in.target, o);
    const TensorList gb = autograd::grad({lb}, leaves_b);
    EXPECT_NEAR(loss.item<double>(), lb.item<double>(), std::fabs(lb.item<double>()) / 256);
    EXPECT_TRUE(bit_equal(g[0], gb[0].to(kF32)));
    for (size_t i = 1; i < g.size(); ++i) {
      EXPECT_TRUE(bit_equal(g[i].to(kBF16), gb[i])) << "gradient " << i;
      EXPECT_FALSE(bit_equal(g[i], g[i].to(kBF16).to(kF32))) << "gradient " << i << " was rounded to bf16";
    }
    const TensorList g2 = autograd::grad({loss2}, leaves, {}, false, false, /*create_graph=*/true);
    for (size_t i = 0; i < g.size(); ++i) {
      EXPECT_EQ(g2[i].dtype(), kF32);
      EXPECT_LE(relative_error(g2[i], g[i]), kBf16GradTolerance) << "gradient " << i;
    }
  }
}

TEST(LinearCrossEntropy, F16AndNoKernelComputeInF32) {
  const LceCase& c = kCases[0];
  Inputs in = draw(c, 810);
  const cpu::Bf16Gemm before = cpu::set_bf16_gemm_kernel_for_testing(cpu::Bf16Gemm::None);
  for (const DType dt : {kF16, kBF16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Inputs ih = in;
    ih.hidden = in.hidden.to(dt).to(kF64);
    ih.weight = in.weight.to(dt).to(kF64);
    ih.bias = in.bias.to(dt).to(kF64);
    const Results got = run(ih, dt, Reduction::Mean, true, c.V);
    EXPECT_EQ(got.loss.dtype(), dt);
    EXPECT_EQ(got.dw.dtype(), dt);
    expect_close(got, run(ih, kF64, Reduction::Mean, false, c.V), f64_reference_tolerance(dt, false),
                 f64_reference_tolerance(dt, true));
  }
  cpu::set_bf16_gemm_kernel_for_testing(before);
}

TEST(LinearCrossEntropy, AutoTilesBf16AndInferenceAndComposesF32Training) {
  const LceCase& c = kCases[1];
  const Inputs in = draw(c, 820);
  auto same = [](const Results& a, const Results& b) {
    return bit_equal(a.loss, b.loss) && bit_equal(a.dh, b.dh) && bit_equal(a.dw, b.dw);
  };
  using Impl = LinearCrossEntropyImpl;
  const Results auto32 = run(in, kF32, Reduction::Mean, true, c.V, Impl::Auto);
  EXPECT_TRUE(same(auto32, run(in, kF32, Reduction::Mean, true, c.V, Impl::Composed)));
  EXPECT_FALSE(same(auto32, run(in, kF32, Reduction::Mean, true, c.V, Impl::Tiled)));  // the sums' order differs
  if (cpu::bf16_gemm_kernel() != cpu::Bf16Gemm::None) {  // (TRIDENT_CPU_BF16_GEMM=off: composed)
    EXPECT_TRUE(same(run(in, kBF16, Reduction::Mean, true, c.V, Impl::Auto), run(in, kBF16, Reduction::Mean, true, c.V)));
  }
  // Without a gradient (evaluation), tiled: its loss, not the composition's.
  LinearCrossEntropyOptions o;
  o.vocab_size = c.V;
  const Tensor h = in.hidden.to(kF32), w = in.weight.to(kF32);
  const Tensor tiled = linear_cross_entropy(h, w, Tensor(), in.target, [&] {
    LinearCrossEntropyOptions t = o;
    t.impl = Impl::Tiled;
    return t;
  }());
  EXPECT_TRUE(bit_equal(linear_cross_entropy(h, w, Tensor(), in.target, o), tiled));
}

TEST(LinearCrossEntropy, BadInputGivesClearErrors) {
  const Tensor h = zeros({3, 4}), w = zeros({5, 4}), b = zeros({5});
  const Tensor t = from_vector(std::vector<int64_t>{0, 9, 1}, {3});
  const Tensor ok = from_vector(std::vector<int64_t>{0, 4, 1}, {3});
  expect_error([&] { linear_cross_entropy(h, w, b, t); }, {"target 9 at position [1]", "out of range for 5 classes"});
  LinearCrossEntropyOptions four;
  four.vocab_size = 4;
  expect_error([&] { linear_cross_entropy(h, w, b, ok, four); }, {"target 4 at position [1]", "4 classes"});
  LinearCrossEntropyOptions seven;
  seven.vocab_size = 7;
  expect_error([&] { linear_cross_entropy(h, w, b, ok, seven); }, {"vocab_size 7 must be in [1, 5]"});
  expect_error([&] { linear_cross_entropy(zeros({3, 6}), w, b, ok); }, {"hidden of shape [3, 6]", "4 features"});
  expect_error([&] { linear_cross_entropy(h, w, zeros({4}), ok); }, {"bias of shape [4]", "weight of shape [5, 4]"});
  expect_error([&] { linear_cross_entropy(h, w, b, zeros({1, 3}, DType::I64)); }, {"expected target of shape [3]"});
  expect_error([&] { linear_cross_entropy(h, w.to(kF64), b, ok); }, {"linear_cross_entropy"});
  expect_error([&] { linear_cross_entropy(h, w, b, ok.to(kF32)); }, {"target must be an i64 tensor"});
}
