// The losses on a GPU (ops/cuda/loss.h) against the CPU in f64 on the same (rounded) random
// inputs, forward and gradients, in f32, f16 and bf16: cross_entropy over GPT-2's 50257 classes
// with ignored positions, label smoothing and class weights, the [N, C, d...] layout, nll_loss,
// binary_cross_entropy_with_logits and mse_loss; targets out of range give the CPU's error.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/cuda/allocator.h"
#include "cuda/cuda_test_util.h"
#include "test_util.h"

using namespace trident;
using trident::testing::error_message;
using trident::testing::relative_error;

namespace {

const Device kGPU = Device::cuda(0);


// The cross-backend suite's tolerances: f32 arithmetic (sums over 50257 classes in f32), then one
// to three roundings to f16 (2^-11) or bf16 (2^-8); gradients round a few more times.
double tolerance(DType dt, bool backward) {
  switch (dt) {
    case DType::F32: return backward ? 2e-5 : 1e-5;
    case DType::F16: return backward ? 4e-3 : 2e-3;
    case DType::BF16: return backward ? 3e-2 : 1.6e-2;
    default: return 0;
  }
}

const char* reduction_str(Reduction r) { return reduction_name(r); }

// Targets in [0, classes) with about 15% of them set to ignore_index.
Tensor targets(const Shape& s, int64_t classes, int64_t ignore, Generator& g) {
  const Tensor t = randint(0, classes, s, kI64, &g);
  return where(lt(rand(s, kF64, &g), 0.15), full(s, static_cast<double>(ignore), kI64), t);
}

class CudaLoss : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    TRIDENT_REQUIRE_CUDA();
    cuda::set_poison_allocations(true);  // an element a kernel forgets to write is NaN
  }
  void TearDown() override { cuda::set_poison_allocations(false); }
};

// out and the gradient of sum(out * w) (w random, the same on both sides) against the CPU in f64.
void compare(const Tensor& got, const Tensor& ref, const std::vector<Tensor>& dev_in, const std::vector<Tensor>& ref_in,
             DType dt, Generator& g) {
  ASSERT_EQ(got.device(), kGPU);
  ASSERT_EQ(got.sizes(), ref.sizes());
  EXPECT_EQ(got.dtype(), dt);
  EXPECT_LE(relative_error(got, ref), tolerance(dt, false)) << "forward";
  const Tensor w = add(rand(ref.sizes(), kF64, &g), 0.5).to(dt);
  sum(mul(ref, w.to(kF64))).backward();
  sum(mul(got, w.to(kGPU))).backward();
  for (size_t i = 0; i < ref_in.size(); ++i) {
    ASSERT_TRUE(dev_in[i].grad().defined()) << "input " << i;
    EXPECT_EQ(dev_in[i].grad().device(), kGPU);
    EXPECT_EQ(dev_in[i].grad().dtype(), dt);
    EXPECT_LE(relative_error(dev_in[i].grad(), ref_in[i].grad()), tolerance(dt, true)) << "gradient of input " << i;
  }
}

struct CeCase {
  Shape logits;
  double smoothing;
  bool weighted;
  Reduction reduction;
  int64_t ignore = -100;
  double scale = 3.0;  // logits ~ N(0, scale^2)
};

TEST_P(CudaLoss, CrossEntropyMatchesTheCpu) {
  const DType dt = GetParam();
  const std::vector<CeCase> cases = {
      {{64, 50257}, 0.0, false, Reduction::Mean},          // GPT-2: a block per row
      {{24, 50257}, 0.1, true, Reduction::Mean},           // smoothing with weights over the vocabulary
      {{16, 50257}, 0.1, false, Reduction::Sum, 7},        // ignore_index that is also a class
      {{17, 2000}, 0.2, true, Reduction::None},            // a block per row, a few rows
      {{8, 3000}, 0.0, false, Reduction::Mean, -100, 40},  // large logits: e^x would overflow unshifted
      {{300, 10}, 0.05, true, Reduction::None, 3},         // a warp per row
      {{5, 11, 7}, 0.1, true, Reduction::Mean},            // inner > 1: a thread per position
      {{3, 1500, 4}, 0.2, false, Reduction::Sum},          // inner > 1 with a block per position
      {{2, 6, 3, 5}, 0.0, true, Reduction::None},          // two trailing dims
      {{50257}, 0.1, false, Reduction::Mean},              // one sample, no batch dim
  };
  uint64_t seed = 100;
  for (const CeCase& c : cases) {
    SCOPED_TRACE("logits " + shape_str(c.logits) + " smoothing " + std::to_string(c.smoothing) +
                 (c.weighted ? " weighted " : " ") + reduction_str(c.reduction) + " ignore " +
                 std::to_string(c.ignore));
    Generator g(seed++);
    const int64_t classes = c.logits.size() == 1 ? c.logits[0] : c.logits[1];
    Shape ts;
    if (c.logits.size() > 1) {
      ts.push_back(c.logits[0]);
      for (size_t d = 2; d < c.logits.size(); ++d) ts.push_back(c.logits[d]);
    }
    const Tensor x = mul(randn(c.logits, kF64, &g), c.scale).to(dt);
    const Tensor t = targets(ts, classes, c.ignore, g);
    const Tensor w = c.weighted ? add(rand({classes}, kF64, &g), 0.5).to(dt) : Tensor();
    CrossEntropyOptions ro{c.reduction, c.ignore, c.smoothing, w.defined() ? w.to(kF64) : Tensor()};
    CrossEntropyOptions go{c.reduction, c.ignore, c.smoothing, w.defined() ? w.to(kGPU) : Tensor()};
    Tensor xr = x.to(kF64).detach().set_requires_grad(), xd = x.to(kGPU).detach().set_requires_grad();
    const Tensor ref = cross_entropy(xr, t, ro);
    const Tensor got = cross_entropy(xd, t.to(kGPU), go);
    compare(got, ref, {xd}, {xr}, dt, g);
  }
}

TEST_P(CudaLoss, CrossEntropyWithMaskedLogitsMatchesTheCpu) {
  // -inf logits (masked classes, e.g. a vocabulary padded to a multiple of 64): they add e^-inf = 0
  // to the sum on the CPU; the online max/sum must not turn a -inf seen before any finite logit
  // into NaN. The first 300 classes are masked, so each thread of a block (or warp, or a thread
  // per position) starts on -inf; targets are never masked classes.
  const DType dt = GetParam();
  struct Case {
    Shape logits;
    int64_t classes;
  };
  const std::vector<Case> cases = {{{6, 50304}, 50304}, {{9, 700}, 700}, {{3, 400, 5}, 400}};
  uint64_t seed = 300;
  for (const Case& c : cases) {
    SCOPED_TRACE("logits " + shape_str(c.logits));
    Generator g(seed++);
    Shape ts{c.logits[0]};
    if (c.logits.size() == 3) ts.push_back(c.logits[2]);
    Shape ms{c.classes};
    if (c.logits.size() == 3) ms.push_back(1);
    const Tensor masked = lt(reshape(arange(0, static_cast<double>(c.classes), 1.0, kF64), ms), 300.0);
    const Tensor x = masked_fill(mul(randn(c.logits, kF64, &g), 3.0), masked, -INFINITY).to(dt);
    const Tensor t = where(lt(rand(ts, kF64, &g), 0.15), full(ts, -100.0, kI64), randint(300, c.classes, ts, kI64, &g));
    Tensor xr = x.to(kF64).detach().set_requires_grad(), xd = x.to(kGPU).detach().set_requires_grad();
    CrossEntropyOptions none;
    none.reduction = Reduction::None;
    const Tensor ref = cross_entropy(xr, t, none);
    const Tensor got = cross_entropy(xd, t.to(kGPU), none);
    compare(got, ref, {xd}, {xr}, dt, g);
  }
}

TEST_P(CudaLoss, CrossEntropyWithEveryTargetIgnoredIsNanWithZeroGradient) {
  const DType dt = GetParam();
  Generator g(200);
  Tensor xd = randn({4, 1200}, kF64, &g).to(dt).to(kGPU).detach().set_requires_grad();
  const Tensor t = full({4}, -100.0, TensorOptions(kI64).device(kGPU));
  const Tensor loss = cross_entropy(xd, t);
  EXPECT_TRUE(std::isnan(loss.item<double>()));
  CrossEntropyOptions sum_all;
  sum_all.reduction = Reduction::Sum;
  cross_entropy(xd, t, sum_all).backward();
  const std::vector<double> gx = xd.grad().to_vector<double>();
  EXPECT_EQ(gx, std::vector<double>(gx.size(), 0.0));
}

TEST_P(CudaLoss, NllLossMatchesTheCpu) {
  const DType dt = GetParam();
  struct Case {
    Shape input;
    bool weighted;
    Reduction reduction;
    int64_t ignore;
  };
  uint64_t seed = 300;
  for (const Case& c : std::vector<Case>{{{40, 7}, true, Reduction::Mean, 2},
                                         {{4, 9, 6}, false, Reduction::Sum, -100},
                                         {{16, 50257}, true, Reduction::None, -100},
                                         {{9}, false, Reduction::Mean, -100}}) {
    SCOPED_TRACE("input " + shape_str(c.input) + " " + reduction_str(c.reduction));
    Generator g(seed++);
    const int64_t classes = c.input.size() == 1 ? c.input[0] : c.input[1];
    Shape ts;
    if (c.input.size() > 1) {
      ts.push_back(c.input[0]);
      for (size_t d = 2; d < c.input.size(); ++d) ts.push_back(c.input[d]);
    }
    const Tensor lp = log_softmax(randn(c.input, kF64, &g), c.input.size() == 1 ? 0 : 1).to(dt);
    const Tensor t = targets(ts, classes, c.ignore, g);
    const Tensor w = c.weighted ? add(rand({classes}, kF64, &g), 0.5).to(dt) : Tensor();
    Tensor xr = lp.to(kF64).detach().set_requires_grad(), xd = lp.to(kGPU).detach().set_requires_grad();
    const Tensor ref = nll_loss(xr, t, {c.reduction, c.ignore, w.defined() ? w.to(kF64) : Tensor()});
    const Tensor got = nll_loss(xd, t.to(kGPU), {c.reduction, c.ignore, w.defined() ? w.to(kGPU) : Tensor()});
    compare(got, ref, {xd}, {xr}, dt, g);
  }
}

TEST_P(CudaLoss, BceWithLogitsMatchesTheCpu) {
  const DType dt = GetParam();
  uint64_t seed = 400;
  for (const Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    for (const bool with_pw : {false, true}) {
      SCOPED_TRACE(std::string(reduction_str(r)) + (with_pw ? " with pos_weight" : ""));
      Generator g(seed++);
      const Tensor x = mul(randn({7, 13}, kF64, &g), 4.0).to(dt), y = rand({7, 13}, kF64, &g).to(dt);
      const Tensor pw = with_pw ? add(rand({13}, kF64, &g), 0.5).to(dt) : Tensor();
      Tensor xr = x.to(kF64).detach().set_requires_grad(), yr = y.to(kF64).detach().set_requires_grad();
      Tensor xd = x.to(kGPU).detach().set_requires_grad(), yd = y.to(kGPU).detach().set_requires_grad();
      const Tensor ref = binary_cross_entropy_with_logits(xr, yr, r, with_pw ? pw.to(kF64) : Tensor());
      const Tensor got = binary_cross_entropy_with_logits(xd, yd, r, with_pw ? pw.to(kGPU) : Tensor());
      compare(got, ref, {xd, yd}, {xr, yr}, dt, g);
    }
  }
}

TEST_P(CudaLoss, MseLossMatchesTheCpu) {
  const DType dt = GetParam();
  uint64_t seed = 500;
  // A broadcast target, and a long one whose sum takes many device partials.
  for (const auto& shapes : std::vector<std::pair<Shape, Shape>>{{{5, 9}, {9}}, {{3, 70001}, {3, 70001}}}) {
    for (const Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
      SCOPED_TRACE("input " + shape_str(shapes.first) + " target " + shape_str(shapes.second) + " " + reduction_str(r));
      Generator g(seed++);
      const Tensor a = randn(shapes.first, kF64, &g).to(dt), b = randn(shapes.second, kF64, &g).to(dt);
      Tensor ar = a.to(kF64).detach().set_requires_grad(), br = b.to(kF64).detach().set_requires_grad();
      Tensor ad = a.to(kGPU).detach().set_requires_grad(), bd = b.to(kGPU).detach().set_requires_grad();
      compare(mse_loss(ad, bd, r), mse_loss(ar, br, r), {ad, bd}, {ar, br}, dt, g);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaLoss, ::testing::Values(DType::F32, DType::F16, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

// A bad target is the CPU's error, word for word: the device finds the first one.
TEST(CudaLossErrors, TargetsOutOfRangeGiveTheCpuError) {
  TRIDENT_REQUIRE_CUDA();
  const Tensor x = randn({3, 4, 2});
  const Tensor t = from_vector<int64_t>({0, 1, -100, 3, 4, 9}, {3, 2});  // 4 at [2, 0] is the first bad one
  for (const bool nll : {false, true}) {
    auto run = [&](const Tensor& xx, const Tensor& tt) {
      if (nll) {
        nll_loss(xx, tt);
      } else {
        cross_entropy(xx, tt);
      }
    };
    const std::string want = error_message([&] { run(x, t); });
    EXPECT_NE(want.find("target 4 at position [2, 0]"), std::string::npos) << want;
    EXPECT_EQ(error_message([&] { run(x.to(kGPU), t.to(kGPU)); }), want);
  }
  // Targets and weights must be on the logits' device.
  const std::string mixed = error_message([&] { cross_entropy(x.to(kGPU), t); });
  EXPECT_NE(mixed.find("same device"), std::string::npos) << mixed;
  CrossEntropyOptions o;
  o.weight = ones({4});
  const std::string wmixed = error_message([&] { cross_entropy(x.to(kGPU), zeros({3, 2}, kI64).to(kGPU), o); });
  EXPECT_NE(wmixed.find("same device"), std::string::npos) << wmixed;
}

}  // namespace
