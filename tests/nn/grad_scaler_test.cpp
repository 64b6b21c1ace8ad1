#include "test_util.h"

#include <limits>

using namespace trident;
using namespace trident::nn;
using namespace trident::testing;

TEST(GradScaler, SkipsAndHalvesOnOverflowGrowsAfterCleanSteps) {
  Tensor w = from_vector<float>({1, 2}).set_requires_grad();
  optim::SGD opt({w}, optim::SGDOptions{.lr = 0.5});
  GradScaler scaler({.init_scale = 8.0, .growth_interval = 3});
  auto one_step = [&](bool overflow) {
    opt.zero_grad();
    Tensor loss = sum(mul(w, w));  // grad 2w
    scaler.scale(loss).backward();
    if (overflow) {
      NoGradGuard ng;
      fill_(w.grad().as_strided({1}, {1}, 0), std::numeric_limits<double>::infinity());
    }
    const bool stepped = scaler.step(opt);
    scaler.update();
    return stepped;
  };
  // A clean step: the optimizer sees the true gradient (2w = [2, 4]), not the scaled one.
  EXPECT_TRUE(one_step(false));
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{0, 0}));
  {
    NoGradGuard ng;
    copy_(w, from_vector<float>({1, 2}));
  }
  // Overflow: no update, scale halved, clean count reset.
  const std::vector<float> before = w.to_vector<float>();
  EXPECT_FALSE(one_step(true));
  EXPECT_TRUE(scaler.last_step_skipped());
  EXPECT_EQ(w.to_vector<float>(), before);
  EXPECT_EQ(scaler.get_scale(), 4.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  // Three clean steps: the scale doubles.
  one_step(false);
  one_step(false);
  EXPECT_EQ(scaler.get_scale(), 4.0);
  one_step(false);
  EXPECT_EQ(scaler.get_scale(), 8.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(GradScaler, NaNGradientsAreCaughtToo) {
  Tensor w = from_vector<float>({1}).set_requires_grad();
  optim::SGD opt({w}, optim::SGDOptions{.lr = 0.1});
  GradScaler scaler;
  scaler.scale(sum(mul(w, std::numeric_limits<double>::quiet_NaN()))).backward();
  EXPECT_FALSE(scaler.unscale_(opt));
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_EQ(w.item<float>(), 1.f);
}

TEST(GradScaler, UnscaleForClippingAndMisuse) {
  Tensor w = from_vector<float>({3, 4}).set_requires_grad();
  optim::SGD opt({w}, optim::SGDOptions{.lr = 1.0});
  GradScaler scaler({.init_scale = 1024.0});
  scaler.scale(sum(mul(w, w))).backward();  // true gradient [6, 8]
  EXPECT_TRUE(scaler.unscale_(opt));
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{6, 8}));
  EXPECT_NEAR(clip_grad_norm_({w}, 5.0), 10.0, 1e-6);  // clipping sees true magnitudes
  EXPECT_THROW(scaler.unscale_(opt), Error);
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_THROW(scaler.step(opt), Error);
  scaler.update();
  EXPECT_THROW(GradScaler({.init_scale = -1}), Error);
}

TEST(GradScaler, DisabledPassesThroughAndStateRoundTrips) {
  Tensor w = from_vector<float>({1}).set_requires_grad();
  optim::SGD opt({w}, optim::SGDOptions{.lr = 1.0});
  GradScaler off({.enabled = false});
  Tensor loss = sum(mul(w, 3.0));
  EXPECT_TRUE(off.scale(loss).is_same(loss));
  loss.backward();
  EXPECT_TRUE(off.step(opt));
  EXPECT_EQ(w.item<float>(), -2.f);
  GradScaler a({.init_scale = 16.0, .growth_interval = 5}), b;
  a.update();
  a.update();
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.get_scale(), 16.0);
  EXPECT_EQ(b.growth_tracker(), 2);
  EXPECT_THROW(b.load_state_dict({{"scale", 2.0}}), Error);
}

TEST(GradScaler, F16TrainingWithAutocastConverges) {
  Generator g(4);
  Sequential mlp({std::make_shared<Linear>(8, 32, true, kF32, &g), std::make_shared<GELU>(),
                  std::make_shared<Linear>(32, 1, true, kF32, &g)});
  optim::Adam opt(mlp.parameters(), optim::AdamOptions{.lr = 1e-2});
  GradScaler scaler;
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    Tensor x = randn({64, 8}, kF32, &g);
    Tensor y = sum(mul(x, x), {1}, true);
    Tensor loss;
    {
      autocast::Guard ac(kF16);
      loss = mse_loss(mlp.forward(x), y);
    }
    opt.zero_grad();
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
  }
  EXPECT_LT(last, 0.3 * first) << first << " -> " << last;
}
