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
  EXPECT_NE(r.report.find("d output 0[1] / d input 0[1]"), std::string::npos) << r.report;
  EXPECT_NE(r.report.find("analytic -6"), std::string::npos) << r.report;
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
