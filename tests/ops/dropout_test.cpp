#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using autograd::TensorList;


TEST(Dropout, KeepRateAndScale) {
  // 2^20 ones with p = 0.3: the dropped fraction is within 5 standard deviations
  // (sqrt(0.3 * 0.7 / 2^20) = 4.5e-4) of 0.3, kept values are exactly 1 / 0.7 in f32, and the
  // mean stays near 1 (dropout preserves the expectation).
  const int64_t n = 1 << 20;
  Generator g(11);
  const std::vector<float> y = dropout(ones({n}), 0.3, true, &g).to_vector<float>();
  int64_t zeros_count = 0;
  double total = 0;
  for (float v : y) {
    if (v == 0.0f) {
      ++zeros_count;
    } else {
      ASSERT_EQ(v, static_cast<float>(1.0 / 0.7));
    }
    total += v;
  }
  EXPECT_NEAR(static_cast<double>(zeros_count) / n, 0.3, 5 * 4.5e-4);
  EXPECT_NEAR(total / n, 1.0, 5 * 6.5e-4);  // sd of the mean: sqrt(0.3 / 0.7 / 2^20)
  // p = 0.9 in f64.
  const std::vector<double> z = dropout(ones({n}, kF64), 0.9, true, &g).to_vector<double>();
  int64_t kept = 0;
  for (double v : z) {
    if (v != 0.0) {
      ++kept;
      ASSERT_EQ(v, 1.0 / (1.0 - 0.9));
    }
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 0.1, 5 * 2.9e-4);
}

TEST(Dropout, MaskIsTheGeneratorsUniformDraw) {
  // Element i is kept iff the i-th f32 uniform that rand() would draw from the same state is
  // >= p (NOTE in ops/math/dropout.h): rand() is separate code in core/factory.cpp.
  Generator g(12);
  rand({7}, kF32, &g);  // start at a non-zero offset
  const PhiloxState s = g.state();
  const Tensor y = dropout(ones({3, 333}, kF64), 0.45, true, &g);
  EXPECT_EQ(g.state().offset, s.offset + (999 + 3) / 4);  // the draw reserved ceil(n / 4) blocks
  Generator h(0);
  h.set_state(s);
  const std::vector<float> u = rand({999}, kF32, &h).to_vector<float>();
  const std::vector<double> yv = y.to_vector<double>();
  for (size_t i = 0; i < u.size(); ++i) ASSERT_EQ(yv[i] != 0.0, static_cast<double>(u[i]) >= 0.45) << "element " << i;
}

TEST(Dropout, RestoringTheGeneratorReplaysTheMask) {
  Generator g(13);
  dropout(ones({5}), 0.5, true, &g);  // move away from offset 0
  const Tensor x = randn({64, 33}, kF32, &g).detach();
  const PhiloxState before = g.state();
  const std::vector<float> first = dropout(x, 0.25, true, &g).to_vector<float>();
  const std::vector<float> second = dropout(x, 0.25, true, &g).to_vector<float>();
  EXPECT_NE(first, second);  // the stream moved on
  g.set_state(before);
  EXPECT_EQ(dropout(x, 0.25, true, &g).to_vector<float>(), first);
  EXPECT_EQ(dropout(x, 0.25, true, &g).to_vector<float>(), second);
  // The default generator too, through manual_seed.
  manual_seed(99);
  const std::vector<float> d1 = dropout(x, 0.5).to_vector<float>();
  manual_seed(99);
  EXPECT_EQ(dropout(x, 0.5).to_vector<float>(), d1);
  // Layout does not matter: element i is the i-th in row-major order.
  const Tensor xt = t(contiguous(t(x)));
  ASSERT_FALSE(xt.is_contiguous());
  g.set_state(before);
  EXPECT_EQ(dropout(xt, 0.25, true, &g).to_vector<float>(), first);
  // f16 drops the same elements as f32 from the same state.
  g.set_state(before);
  const std::vector<float> half = dropout(x.to(kF16), 0.25, true, &g).to_vector<float>();
  for (size_t i = 0; i < half.size(); ++i) ASSERT_EQ(half[i] == 0.0f, first[i] == 0.0f) << "element " << i;
}

TEST(Dropout, BackwardRegeneratesTheSameMask) {
  Generator g(14);
  Tensor x = add(rand({40, 50}, kF64, &g), 0.5).detach().set_requires_grad();  // no zeros in x
  const Tensor y = dropout(x, 0.35, true, &g);
  const PhiloxState after_forward = g.state();
  const Tensor up = randn({40, 50}, kF64, &g);
  g.set_state(after_forward);
  dropout(ones({1000}), 0.5, true, &g);  // the generator moves on before backward runs
  y.backward(up);
  const std::vector<double> yv = y.to_vector<double>(), gv = x.grad().to_vector<double>(), uv = up.to_vector<double>();
  for (size_t i = 0; i < yv.size(); ++i) {
    const double want = yv[i] != 0.0 ? uv[i] / (1.0 - 0.35) : 0.0;
    ASSERT_NEAR(gv[i], want, 1e-15) << "element " << i;
  }
}

TEST(DropoutGradcheck, FixedMask) {
  // A fresh generator with a fixed seed per call: every evaluation sees the same mask.
  auto f = [](const TensorList& in) {
    Generator g(15);
    return dropout(in[0], 0.4, true, &g);
  };
  EXPECT_TRUE(grad_ok(gradcheck(f, {rand_leaf({6, 7}, 16)})));
  EXPECT_TRUE(grad_ok(gradcheck(f, {rand_leaf_transposed({5, 3}, 17)})));
  EXPECT_TRUE(grad_ok(gradcheck(f, {rand_leaf({}, 18)})));
}

TEST(Dropout, IdentityAndEdgeCases) {
  Generator g(19);
  Tensor x = randn({4, 5}, kF32, &g).detach().set_requires_grad();
  const PhiloxState s = g.state();
  // p = 0 and eval mode return x itself: no node, no copy, the generator untouched.
  EXPECT_TRUE(dropout(x, 0.0, true, &g).is_same(x));
  EXPECT_TRUE(dropout(x, 0.7, false, &g).is_same(x));
  const Tensor empty_x = zeros({0, 3});
  EXPECT_TRUE(dropout(empty_x, 0.5, true, &g).is_same(empty_x));
  EXPECT_EQ(g.state(), s);
  // p = 1: zeros, with a zero gradient.
  const Tensor z = dropout(x, 1.0, true, &g);
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(20, 0.0f));
  ASSERT_TRUE(z.requires_grad());
  sum(z).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), std::vector<float>(20, 0.0f));
  // Dropped NaNs stay NaN (x * 0), as in PyTorch's x * mask.
  const std::vector<float> nan_in(64, std::nanf(""));
  for (float v : dropout(from_vector<float>(nan_in), 0.5, true, &g).to_vector<float>()) EXPECT_TRUE(std::isnan(v));
}

TEST(Dropout, Errors) {
  std::string m = error_message([] { dropout(ones({3}), 1.5); });
  EXPECT_NE(m.find("dropout: probability p must be in [0, 1], got 1.5"), std::string::npos) << m;
  m = error_message([] { dropout(ones({3}), -0.25, false); });
  EXPECT_NE(m.find("got -0.25"), std::string::npos) << m;
  m = error_message([] { dropout(from_vector<int64_t>({1, 2}), 0.5); });
  EXPECT_NE(m.find("dropout: expected a floating-point tensor, got i64"), std::string::npos) << m;
}
