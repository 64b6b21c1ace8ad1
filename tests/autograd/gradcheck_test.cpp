#include "test_util.h"

using namespace trident;
using namespace trident::testing;

namespace {
// A deliberately wrong op: forward x^2, backward claims 3x (should be 2x).
Tensor bad_square(const Tensor& x) {
  Tensor out = mul(x.detach(), x.detach());
  autograd::record("BadSquareBackward", {x}, out, [s = autograd::SavedTensor(x)](const autograd::TensorList& g) {
    return autograd::TensorList{mul(mul(g[0], s.unpack()), 3.0)};
  });
  return out;
}
}  // namespace

TEST(Gradcheck, PassesOnACorrectFunction) {
  Tensor a = rand_leaf({3, 4}, 1), b = rand_leaf({4}, 2);
  GradcheckResult r = gradcheck([](const autograd::TensorList& x) { return mul(add(x[0], x[1]), x[0]); }, {a, b});
  EXPECT_TRUE(grad_ok(r));
  EXPECT_EQ(r.compared, (12 + 4) * 12);
}

TEST(Gradcheck, FailsOnAWrongBackwardAndReportsTheWorstElement) {
  Tensor x = from_vector<double>({1.0, -2.0, 0.5}).set_requires_grad();
  GradcheckResult r = gradcheck([](const autograd::TensorList& in) { return bad_square(in[0]); }, {x});
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.mismatches, 3);      // the diagonal entries are wrong; off-diagonal zeros agree
  EXPECT_EQ(r.input, 0);
  EXPECT_EQ(r.input_index, 1);     // |3x - 2x| is largest at x = -2
  EXPECT_EQ(r.output_index, 1);
  EXPECT_NEAR(r.analytic, -6.0, 1e-12);
  EXPECT_NEAR(r.numeric, -4.0, 1e-6);
  EXPECT_EQ(r.input_value, -2.0);
  // The whole report, the numeric value rounded to the report's 10 digits.
  EXPECT_EQ(r.report,
            "gradcheck failed: 3 of 9 Jacobian entries differ; worst: d output 0[1] / d input 0[1] (value -2): "
            "analytic -6, numeric -4, |diff| 2 (relative 0.5) > atol 1e-05 + rtol 0.001 * |numeric|");
}

TEST(Gradcheck, TheReportNamesTheInputs) {
  Tensor c = from_vector<double>({1.0, 1.0});  // does not require grad, but is named
  Tensor x = from_vector<double>({1.0, -2.0, 0.5}, {3, 1}).set_requires_grad();
  GradcheckOptions opts;
  opts.input_names = {"offset", "x"};
  GradcheckResult r = gradcheck([](const autograd::TensorList& in) { return bad_square(in[1]); }, {c, x}, opts);
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.input, 1);
  EXPECT_NE(r.report.find("/ d input 1[1, 0] (x, value -2): analytic -6"), std::string::npos) << r.report;
  opts.input_names = {"x"};
  expect_error([&] { gradcheck([](const autograd::TensorList& in) { return bad_square(in[1]); }, {c, x}, opts); },
               {"gradcheck: 1 input names for 2 inputs"});
}

TEST(Gradcheck, MultipleOutputsAndInputsThatDoNotRequireGrad) {
  Tensor x = rand_leaf({2, 3}, 3);
  Tensor c = from_vector<double>({1, 2, 3}, {3});  // constant
  GradcheckResult r = gradcheck(
      autograd::GradcheckFn([](const autograd::TensorList& in) {
        return autograd::TensorList{mul(in[0], in[1]), sum(in[0], {1})};
      }),
      {x, c});
  EXPECT_TRUE(grad_ok(r));
}

TEST(Gradcheck, RejectsLowPrecisionAndOverlappingInputs) {
  Tensor f = zeros({2}).set_requires_grad();
  EXPECT_THROW(gradcheck([](const autograd::TensorList& in) { return mul(in[0], 2.0); }, {f}), Error);
  Tensor e = expand(from_vector<double>({1.0}), {3}).detach().set_requires_grad();
  EXPECT_THROW(gradcheck([](const autograd::TensorList& in) { return mul(in[0], 2.0); }, {e}), Error);
  Tensor n = zeros({2}, kF64);
  EXPECT_THROW(gradcheck([](const autograd::TensorList& in) { return mul(in[0], 2.0); }, {n}), Error);
}

TEST(Gradcheck, LeavesInputsAndGradsUntouched) {
  Tensor x = rand_leaf({4}, 4);
  const std::vector<double> before = x.to_vector<double>();
  EXPECT_TRUE(grad_ok(gradcheck([](const autograd::TensorList& in) { return mul(in[0], in[0]); }, {x})));
  EXPECT_EQ(x.to_vector<double>(), before);
  EXPECT_FALSE(x.grad().defined());
}

TEST(Gradcheck, NonContiguousInputs) {
  Tensor x = rand_leaf_transposed({3, 4}, 5);
  ASSERT_FALSE(x.is_contiguous());
  EXPECT_TRUE(grad_ok(gradcheck([](const autograd::TensorList& in) { return mul(in[0], in[0]); }, {x})));
}

// ---- NOTE [Non-differentiable points] ----

namespace {
// relu whose backward returns `at_zero` * g at x == 0 (0 is the subgradient PyTorch picks).
Tensor relu_with(const Tensor& x, double at_zero) {
  Tensor out = relu(x.detach());
  autograd::record("ReluWithBackward", {x}, out, [s = autograd::SavedTensor(x), at_zero](const autograd::TensorList& g) {
    const Tensor xv = s.unpack();
    const Tensor slope = add(gt(xv, 0.0).to(DType::F64), mul(eq(xv, 0.0).to(DType::F64), at_zero));
    return autograd::TensorList{mul(g[0], slope)};
  });
  return out;
}
}  // namespace

TEST(Gradcheck, AKinkFailsUntilSkippedNearIt) {
  // At x = 0 the central difference of relu is 0.5, the analytic value 0.
  Tensor x = from_vector<double>({-1.0, 0.0, 2.0}).set_requires_grad();
  auto f = [](const autograd::TensorList& in) { return relu(in[0]); };
  GradcheckResult plain = gradcheck(f, {x});
  ASSERT_FALSE(plain.ok);
  EXPECT_EQ(plain.input_index, 1);
  EXPECT_NEAR(plain.numeric, 0.5, 1e-9);

  GradcheckOptions opts;
  opts.skip = autograd::skip_near({0.0}, 1e-3);
  GradcheckResult r = gradcheck(f, {x}, opts);
  EXPECT_TRUE(grad_ok(r));
  EXPECT_EQ(r.skipped, 3);   // one input element times three outputs
  EXPECT_EQ(r.compared, 6);
}

TEST(Gradcheck, SkipWhereAndPredicatesSeeAllInputs) {
  // relu(a - b) has a kink wherever a == b: element 1 here, in both inputs.
  Tensor a = from_vector<double>({1.0, 2.0, 3.0}).set_requires_grad();
  Tensor b = from_vector<double>({0.5, 2.0, 4.0}).set_requires_grad();
  auto f = [](const autograd::TensorList& in) { return relu(sub(in[0], in[1])); };
  ASSERT_FALSE(gradcheck(f, {a, b}).ok);

  const Tensor tie = eq(a.detach(), b.detach());
  GradcheckOptions by_mask;
  by_mask.skip = autograd::skip_where({tie, tie});
  GradcheckResult r = gradcheck(f, {a, b}, by_mask);
  EXPECT_TRUE(grad_ok(r));
  EXPECT_EQ(r.skipped, 2 * 3);

  // The same condition as a predicate over the unperturbed inputs.
  std::vector<std::pair<size_t, int64_t>> asked;
  GradcheckOptions by_predicate;
  by_predicate.skip = [&](const GradcheckPoint& p) {
    asked.emplace_back(p.input, p.index);
    EXPECT_EQ(p.position, Shape{p.index});
    return p.inputs[0].to_vector<double>()[static_cast<size_t>(p.index)] ==
           p.inputs[1].to_vector<double>()[static_cast<size_t>(p.index)];
  };
  EXPECT_TRUE(grad_ok(gradcheck(f, {a, b}, by_predicate)));
  EXPECT_EQ(asked.size(), 6u);  // every element of both inputs, once

  expect_error([&] { autograd::skip_where({a}); }, {"skip_where: mask 0 has dtype f64; expected bool"});
  GradcheckOptions wrong_shape;
  wrong_shape.skip = autograd::skip_where({eq(zeros({2}, kF64), 0.0)});
  expect_error([&] { gradcheck(f, {a, b}, wrong_shape); }, {"skip_where: mask 0 has shape [2] but input 0 has shape [3]"});
}

TEST(Gradcheck, AllowKinksAcceptsSubgradientsAndStillCatchesWrongBackwards) {
  Tensor x = from_vector<double>({-1.0, 0.0, 2.0}).set_requires_grad();
  GradcheckOptions opts;
  opts.allow_kinks = true;
  // relu's 0 at the kink lies between the one-sided slopes 0 and 1: accepted, and counted.
  GradcheckResult r = gradcheck([](const autograd::TensorList& in) { return relu(in[0]); }, {x}, opts);
  EXPECT_TRUE(grad_ok(r));
  EXPECT_EQ(r.kinks, 1);
  EXPECT_EQ(r.compared, 8);
  // Any subgradient passes ...
  EXPECT_TRUE(grad_ok(gradcheck([](const autograd::TensorList& in) { return relu_with(in[0], 1.0); }, {x}, opts)));
  // ... but a value outside [0, 1] at the kink does not.
  GradcheckResult bad = gradcheck([](const autograd::TensorList& in) { return relu_with(in[0], 5.0); }, {x}, opts);
  ASSERT_FALSE(bad.ok);
  EXPECT_EQ(bad.input_index, 1);
  EXPECT_EQ(bad.analytic, 5.0);
  // A wrong backward where the function is smooth is caught as before.
  Tensor y = from_vector<double>({1.0, -2.0, 0.5}).set_requires_grad();
  GradcheckResult smooth = gradcheck([](const autograd::TensorList& in) { return bad_square(in[0]); }, {y}, opts);
  EXPECT_FALSE(smooth.ok);
  EXPECT_EQ(smooth.mismatches, 3);
  EXPECT_EQ(smooth.kinks, 0);
}
