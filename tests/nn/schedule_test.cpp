// Learning-rate schedules (nn/optim/schedule.h): every schedule against its formula, written out
// here, at chosen steps including the warm-up boundaries; applying to groups; exact resume.
#include <cmath>
#include <memory>
#include <numbers>
#include <vector>

#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using namespace trident::nn::optim;

namespace {
constexpr double kPi = std::numbers::pi;

Tensor leaf(double v) {
  Tensor p = from_vector<double>({v});
  p.set_requires_grad();
  return p;
}
}  // namespace

TEST(Schedule, WarmupCosineIsLlmcsSchedule) {
  // 10 warm-up steps, 110 in all, floor 10% of the peak.
  const WarmupCosineLR s(10, 110, 0.1);
  // Warm-up: (step + 1) / 10; the first update already moves, update 9 is at the peak.
  EXPECT_DOUBLE_EQ(s.multiplier(0), 0.1);
  EXPECT_DOUBLE_EQ(s.multiplier(4), 0.5);
  EXPECT_DOUBLE_EQ(s.multiplier(9), 1.0);
  // Decay over 100 steps: 0.1 + 0.9 * (1 + cos(pi x)) / 2.
  EXPECT_DOUBLE_EQ(s.multiplier(10), 1.0);
  EXPECT_DOUBLE_EQ(s.multiplier(11), 0.1 + 0.9 * 0.5 * (1 + std::cos(kPi * 0.01)));
  EXPECT_DOUBLE_EQ(s.multiplier(35), 0.1 + 0.9 * 0.5 * (1 + std::sqrt(0.5)));
  EXPECT_DOUBLE_EQ(s.multiplier(60), 0.55);
  EXPECT_DOUBLE_EQ(s.multiplier(110), 0.1);
  EXPECT_DOUBLE_EQ(s.multiplier(5000), 0.1);  // stays at the floor
  EXPECT_DOUBLE_EQ(s.lr(60, 6e-4), 0.55 * 6e-4);
  // No warm-up, decay to zero.
  const WarmupCosineLR z(0, 4);
  EXPECT_DOUBLE_EQ(z.multiplier(0), 1.0);
  EXPECT_NEAR(z.multiplier(2), 0.5, 1e-16);
  EXPECT_NEAR(z.multiplier(4), 0.0, 1e-16);
}

TEST(Schedule, LinearAndPolynomial) {
  const LinearLR lin(0, 100);
  EXPECT_DOUBLE_EQ(lin.multiplier(0), 1.0);
  EXPECT_DOUBLE_EQ(lin.multiplier(25), 0.75);
  EXPECT_DOUBLE_EQ(lin.multiplier(100), 0.0);
  EXPECT_DOUBLE_EQ(lin.multiplier(150), 0.0);
  // BERT's: 5 warm-up steps then linear decay to 0 over the remaining 50.
  const LinearLR bert(5, 55);
  EXPECT_DOUBLE_EQ(bert.multiplier(0), 0.2);
  EXPECT_DOUBLE_EQ(bert.multiplier(4), 1.0);
  EXPECT_DOUBLE_EQ(bert.multiplier(5), 1.0);
  EXPECT_DOUBLE_EQ(bert.multiplier(30), 0.5);
  EXPECT_DOUBLE_EQ(bert.multiplier(55), 0.0);
  // Linear decay to a floor: 0.2 + 0.8 (1 - x).
  EXPECT_DOUBLE_EQ(LinearLR(0, 10, 0.2).multiplier(5), 0.6);
  // Power 2 to a floor of 0.1: 0.1 + 0.9 (1 - x)^2.
  const PolynomialLR poly(0, 10, 2.0, 0.1);
  EXPECT_DOUBLE_EQ(poly.multiplier(5), 0.1 + 0.9 * 0.25);
  EXPECT_DOUBLE_EQ(poly.multiplier(8), 0.1 + 0.9 * 0.04);
  EXPECT_DOUBLE_EQ(poly.multiplier(10), 0.1);
  // PyTorch's PolynomialLR(total_iters=10, power=0.5) at step 3: (1 - 3/10)^0.5.
  EXPECT_DOUBLE_EQ(PolynomialLR(0, 10, 0.5).multiplier(3), std::sqrt(0.7));
  // With warm-up (the LAMB paper's): ramp over 4 steps, then (1 - x)^2 over 8.
  const PolynomialLR warm(4, 12, 2.0);
  EXPECT_DOUBLE_EQ(warm.multiplier(1), 0.5);
  EXPECT_DOUBLE_EQ(warm.multiplier(3), 1.0);
  EXPECT_DOUBLE_EQ(warm.multiplier(4), 1.0);
  EXPECT_DOUBLE_EQ(warm.multiplier(8), 0.25);
}

TEST(Schedule, ConstantStepExponentialLambda) {
  EXPECT_EQ(ConstantLR().multiplier(0), 1.0);
  EXPECT_EQ(ConstantLR().multiplier(123456), 1.0);
  const ConstantLR cw(4);
  EXPECT_DOUBLE_EQ(cw.multiplier(0), 0.25);
  EXPECT_DOUBLE_EQ(cw.multiplier(3), 1.0);
  EXPECT_DOUBLE_EQ(cw.multiplier(4), 1.0);
  // gamma^floor(step / 30).
  const StepLR st(30, 0.1);
  EXPECT_DOUBLE_EQ(st.multiplier(0), 1.0);
  EXPECT_DOUBLE_EQ(st.multiplier(29), 1.0);
  EXPECT_DOUBLE_EQ(st.multiplier(30), 0.1);
  EXPECT_DOUBLE_EQ(st.multiplier(59), 0.1);
  EXPECT_DOUBLE_EQ(st.multiplier(60), 0.1 * 0.1);
  const ExponentialLR ex(0.5);
  EXPECT_DOUBLE_EQ(ex.multiplier(0), 1.0);
  EXPECT_DOUBLE_EQ(ex.multiplier(3), 0.125);
  const LambdaLR la([](int64_t s) { return 1.0 / static_cast<double>(s + 1); });
  EXPECT_DOUBLE_EQ(la.multiplier(3), 0.25);
}

TEST(Schedule, AppliedToEveryGroupFromItsInitialLr) {
  Tensor a = leaf(1.0), b = leaf(2.0);
  SGD opt({{{a}, {.lr = 0.1}}, {{b}, {.lr = 0.02}}});
  const WarmupCosineLR s(2, 12, 0.0);
  EXPECT_DOUBLE_EQ(apply_schedule(s, opt, 0), 0.05);
  EXPECT_DOUBLE_EQ(opt.lr(1), 0.01);
  EXPECT_DOUBLE_EQ(opt.initial_lr(0), 0.1);  // schedules never change the base
  apply_schedule(s, opt, 7);  // x = 0.5
  EXPECT_DOUBLE_EQ(opt.lr(0), 0.05);
  EXPECT_DOUBLE_EQ(opt.lr(1), 0.01);
  // The step uses the scheduled lr: p = 1 - 0.05 * 1.
  Tensor g = from_vector<double>({1.0});
  a.set_grad(g);
  opt.step();
  EXPECT_DOUBLE_EQ(a.item<double>(), 0.95);
}

TEST(Schedule, SchedulerResumesExactly) {
  auto schedule = std::make_shared<WarmupCosineLR>(3, 20, 0.1);
  Tensor a = leaf(1.0);
  Adam opt_a({a}, {.lr = 0.01});
  LRScheduler sched_a(opt_a, schedule);
  EXPECT_EQ(sched_a.current_step(), 0);
  EXPECT_DOUBLE_EQ(sched_a.lr(), 0.01 / 3);
  std::vector<double> lrs;
  for (int s = 0; s < 7; ++s) {
    a.set_grad(from_vector<double>({0.5}));
    opt_a.step();
    sched_a.step();
    lrs.push_back(sched_a.lr());
  }
  EXPECT_EQ(sched_a.current_step(), 7);
  EXPECT_DOUBLE_EQ(lrs[1], 0.01 * schedule->multiplier(2));
  // Resume: a fresh optimizer loads the state (whose lr is the scheduled one, and whose
  // initial_lr is the base), and a scheduler starts at the saved step.
  const OptimizerState saved = opt_a.state_dict();
  const int64_t saved_step = sched_a.current_step();
  Tensor b = leaf(a.item<double>());
  Adam opt_b({b}, {.lr = 123.0});
  opt_b.load_state_dict(saved);
  LRScheduler sched_b(opt_b, schedule, saved_step);
  EXPECT_EQ(opt_b.initial_lr(0), 0.01);
  EXPECT_EQ(sched_b.lr(), sched_a.lr());
  for (int s = 0; s < 20; ++s) {
    a.set_grad(from_vector<double>({0.5}));
    b.set_grad(from_vector<double>({0.5}));
    opt_a.step();
    opt_b.step();
    sched_a.step();
    sched_b.step();
    EXPECT_EQ(sched_a.lr(), sched_b.lr());
    EXPECT_EQ(a.item<double>(), b.item<double>());
  }
  EXPECT_DOUBLE_EQ(sched_b.lr(), 0.001);  // past the end: the floor
  sched_b.set_step(0);
  EXPECT_DOUBLE_EQ(opt_b.lr(0), 0.01 / 3);
}

TEST(Schedule, Errors) {
  expect_error([] { WarmupCosineLR(10, 10); }, {"total_steps (10) must exceed warmup_steps (10)"});
  expect_error([] { WarmupCosineLR(-1, 10); }, {"warmup_steps must be >= 0, got -1"});
  expect_error([] { WarmupCosineLR(0, 10, 1.5); }, {"final_fraction must be in [0, 1], got 1.5"});
  expect_error([] { LinearLR(5, 3); }, {"PolynomialLR", "total_steps (3)"});
  expect_error([] { PolynomialLR(0, 10, -1.0); }, {"power must be >= 0"});
  expect_error([] { StepLR(0); }, {"step_size must be >= 1, got 0"});
  expect_error([] { ExponentialLR(-0.5); }, {"gamma must be >= 0"});
  expect_error([] { ConstantLR(-2); }, {"warmup_steps must be >= 0"});
  expect_error([] { ExponentialLR(0.5).multiplier(-1); }, {"step must be >= 0, got -1"});
  Tensor a = leaf(1.0);
  SGD opt({a}, {.lr = 0.1});
  expect_error([&] { apply_schedule(LambdaLR([](int64_t) { return -1.0; }), opt, 0); },
               {"multiplier at step 0 is -1"});
  EXPECT_EQ(opt.lr(0), 0.1);
  expect_error([&] { LRScheduler(opt, nullptr); }, {"no schedule"});
}
