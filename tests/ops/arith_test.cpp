#include <cmath>
#include <functional>
#include <limits>

#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using autograd::TensorList;

TEST(Arith, KnownValuesWithBroadcasting) {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor row = from_vector<float>({10, 20, 30}, {3});
  Tensor col = from_vector<float>({100, 200}, {2, 1});
  EXPECT_EQ(add(a, row).to_vector<float>(), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(sub(a, col).to_vector<float>(), (std::vector<float>{-99, -98, -97, -196, -195, -194}));
  EXPECT_EQ(mul(col, row).sizes(), (Shape{2, 3}));
  EXPECT_EQ(mul(col, row).to_vector<float>(), (std::vector<float>{1000, 2000, 3000, 2000, 4000, 6000}));
  EXPECT_EQ(div(a, 2.0).to_vector<float>(), (std::vector<float>{0.5, 1, 1.5, 2, 2.5, 3}));
  EXPECT_EQ((1.0 / from_vector<float>({2, 4})).to_vector<float>(), (std::vector<float>{0.5, 0.25}));
  EXPECT_EQ((10.0 - from_vector<float>({2, 4})).to_vector<float>(), (std::vector<float>{8, 6}));
  EXPECT_EQ((-a).to_vector<float>()[5], -6.f);
  EXPECT_EQ((a + 1.0).to_vector<float>()[0], 2.f);
  EXPECT_EQ(add(scalar_tensor(1.0), a).sizes(), (Shape{2, 3}));
}

TEST(Arith, IntegerAndHalfDtypes) {
  Tensor i = from_vector<int64_t>({1, 2, 3});
  EXPECT_EQ(mul(i, i).to_vector<int64_t>(), (std::vector<int64_t>{1, 4, 9}));
  EXPECT_EQ(mul(i, i).dtype(), kI64);
  EXPECT_THROW(div(i, i), Error);
  // f16/bf16 compute in f32 and round once.
  Tensor h = from_vector<float>({1.0f, 2048.0f}).to(kF16);
  Tensor hs = add(h, from_vector<float>({1e-4f, 1.0f}).to(kF16));
  EXPECT_EQ(hs.dtype(), kF16);
  EXPECT_EQ(hs.to_vector<float>(), (std::vector<float>{static_cast<float>(Half(1.0f + static_cast<float>(Half(1e-4f)))), 2048.f}));
  Tensor b = from_vector<float>({3.0f}).to(kBF16);
  EXPECT_EQ(mul(b, b).to_vector<float>()[0], 9.0f);
}

TEST(Arith, NonContiguousAndEmptyInputs) {
  Tensor base = reshape(arange(6, kF64), {2, 3});
  Tensor tr = transpose(base, 0, 1);  // [[0,3],[1,4],[2,5]]
  EXPECT_EQ(add(tr, tr).to_vector<double>(), (std::vector<double>{0, 6, 2, 8, 4, 10}));
  Tensor e = zeros({0, 3}, kF64);
  EXPECT_EQ(add(e, from_vector<double>({1, 2, 3})).sizes(), (Shape{0, 3}));
  EXPECT_EQ(mul(zeros({2, 0}), zeros({1, 0})).sizes(), (Shape{2, 0}));
}

TEST(Arith, InPlaceForms) {
  Tensor a = from_vector<float>({1, 2, 3, 4}, {2, 2});
  add_(a, from_vector<float>({10, 20}));
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{11, 22, 13, 24}));
  mul_(a, 2.0);
  sub_(a, 2.0);
  div_(a, 2.0);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{10, 21, 12, 23}));
  zero_(a);
  EXPECT_EQ(sum(a).item<float>(), 0.f);
  EXPECT_THROW(add_(from_vector<float>({1}), from_vector<float>({1, 2})), Error);  // would need to grow self
  // Through a strided view.
  Tensor b = zeros({2, 3});
  add_(transpose(b, 0, 1), from_vector<float>({1, 2}, {1, 2}));
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1, 1, 1, 2, 2, 2}));
}

struct BinaryCase {
  const char* name;
  Shape a, b;
};

void PrintTo(const BinaryCase& c, std::ostream* os) { *os << shape_str(c.a) << " op " << shape_str(c.b); }

class ArithGradcheck : public ::testing::TestWithParam<BinaryCase> {};

TEST_P(ArithGradcheck, AllFourOps) {
  const BinaryCase c = GetParam();
  Tensor a = rand_leaf(c.a, 11);
  // Keep divisors away from zero.
  Tensor b = add(rand_leaf(c.b, 12, 0.3), 2.0).detach().set_requires_grad();
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return add(x[0], x[1]); }, {a, b}))) << "add";
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return sub(x[0], x[1]); }, {a, b}))) << "sub";
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return mul(x[0], x[1]); }, {a, b}))) << "mul";
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return div(x[0], x[1]); }, {a, b}))) << "div";
}

INSTANTIATE_TEST_SUITE_P(Shapes, ArithGradcheck,
                         ::testing::Values(BinaryCase{"same", {2, 3}, {2, 3}}, BinaryCase{"row", {2, 3}, {3}},
                                           BinaryCase{"col", {2, 3}, {2, 1}}, BinaryCase{"outer", {3, 1}, {1, 4}},
                                           BinaryCase{"scalar", {2, 3}, {}}, BinaryCase{"lead", {2, 1, 3}, {4, 1}},
                                           BinaryCase{"size1", {1}, {1, 1}}, BinaryCase{"empty", {0, 3}, {3}}),
                         [](const ::testing::TestParamInfo<BinaryCase>& i) { return std::string(i.param.name); });

TEST(ArithGradcheck, NonContiguousOperands) {
  Tensor a = rand_leaf_transposed({3, 4}, 21);
  Tensor b = add(rand_leaf({4, 3}, 22, 0.3), 2.0).detach();
  b = transpose(b, 0, 1);
  b.set_requires_grad();
  ASSERT_FALSE(a.is_contiguous());
  ASSERT_FALSE(b.is_contiguous());
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return div(mul(x[0], x[1]), add(x[1], x[0])); }, {a, b})));
}

TEST(ArithGradcheck, ScalarFormsAndNeg) {
  Tensor a = add(rand_leaf({2, 3}, 31, 0.3), 2.0).detach().set_requires_grad();
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return add(x[0], 3.0); }, {a})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return sub(x[0], 3.0); }, {a})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return rsub(x[0], 3.0); }, {a})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return mul(x[0], -1.5); }, {a})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return div(x[0], 4.0); }, {a})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return rdiv(x[0], 4.0); }, {a})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return neg(x[0]); }, {a})));
}

TEST(ArithGradcheck, SameTensorOnBothSides) {
  Tensor a = rand_leaf({5}, 41);
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return mul(x[0], x[0]); }, {a})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return sub(x[0], x[0]); }, {a})));
}

TEST(Arith, GradOfBroadcastOperandHasItsShape) {
  Tensor a = rand_leaf({4, 3}, 51), b = rand_leaf({3}, 52);
  sum(mul(a, b)).backward();
  EXPECT_EQ(b.grad().sizes(), (Shape{3}));
  EXPECT_TRUE(all_close(b.grad(), sum(a.detach(), {0})));
}

// ---- maximum / minimum ----


TEST(MaximumMinimum, KnownValuesWithBroadcastingAndTiesAgainstPyTorch) {
  // PyTorch 1.13: maximum/minimum of a [2, 3] and b [3], backward of sum(out * w).
  const Tensor w = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  for (bool is_max : {true, false}) {
    Tensor a = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}).set_requires_grad();
    Tensor b = from_vector<double>({3, 2, 7}).set_requires_grad();
    Tensor y = is_max ? maximum(a, b) : minimum(a, b);
    sum(mul(y, w)).backward();
    if (is_max) {
      EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{3, 2, 7, 4, 5, 7}));
      EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{0, 1, 0, 4, 5, 0}));  // the tie (2, 2) splits
      EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{1, 1, 9}));
    } else {
      EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{1, 2, 3, 3, 2, 6}));
      EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{1, 1, 3, 0, 0, 6}));
      EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{4, 6, 0}));
    }
  }
}

TEST(MaximumMinimum, NaNPropagatesAndBothOperandsGetItsGradient) {
  // PyTorch 1.13: values [1, nan, nan, 3]; gradients [0.5, 1, 1, 0.5] for both operands, for
  // maximum and minimum alike (ties split, and NaN positions pass the gradient to both).
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (bool is_max : {true, false}) {
    Tensor a = from_vector<float>({1, static_cast<float>(nan), 2, 3}).set_requires_grad();
    Tensor b = from_vector<float>({1, 1, static_cast<float>(nan), 3}).set_requires_grad();
    Tensor y = is_max ? maximum(a, b) : minimum(a, b);
    const std::vector<float> v = y.to_vector<float>();
    EXPECT_EQ(v[0], 1.f);
    EXPECT_TRUE(std::isnan(v[1]));
    EXPECT_TRUE(std::isnan(v[2]));
    EXPECT_EQ(v[3], 3.f);
    sum(y).backward();
    EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{0.5f, 1, 1, 0.5f}));
    EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{0.5f, 1, 1, 0.5f}));
  }
  // Same tensor on both sides: every element ties, the halves add up to 1.
  Tensor x = rand_leaf({5}, 61);
  sum(maximum(x, x)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), std::vector<double>(5, 1.0));
}

TEST(MaximumMinimum, ScalarFormsIntegersAndHalf) {
  const Tensor a = from_vector<float>({-2, 0.5f, 3});
  EXPECT_EQ(maximum(a, 0.0).to_vector<float>(), (std::vector<float>{0, 0.5f, 3}));
  EXPECT_EQ(minimum(a, 1.0).to_vector<float>(), (std::vector<float>{-2, 0.5f, 1}));
  const Tensor i = from_vector<int64_t>({-5, 7, 2});
  EXPECT_EQ(maximum(i, from_vector<int64_t>({0})).to_vector<int64_t>(), (std::vector<int64_t>{0, 7, 2}));
  EXPECT_EQ(minimum(i, 3.0).dtype(), kI64);
  EXPECT_EQ(minimum(i, 3.0).to_vector<int64_t>(), (std::vector<int64_t>{-5, 3, 2}));
  const Tensor h = from_vector<float>({1.5f, -2.0f}).to(kBF16);
  EXPECT_EQ(maximum(h, from_vector<float>({1.0f, 1.0f}).to(kBF16)).to_vector<float>(),
            (std::vector<float>{1.5f, 1.0f}));
  EXPECT_EQ(maximum(h, h).dtype(), kBF16);
  // The scalar form's gradient: all of g where a wins, half on a tie, 0 where s wins.
  Tensor x = from_vector<double>({-1, 0, 2}).set_requires_grad();
  sum(maximum(x, 0.0)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 0.5, 1}));
  // Empty and size-1 broadcasting.
  EXPECT_EQ(maximum(zeros({0, 3}), zeros({1, 3})).sizes(), (Shape{0, 3}));
  EXPECT_EQ(minimum(zeros({2, 1}), zeros({1})).sizes(), (Shape{2, 1}));
}

class MaxMinGradcheck : public ::testing::TestWithParam<BinaryCase> {};

TEST_P(MaxMinGradcheck, BothOps) {
  // Random normal operands differ almost surely, so no element sits on a tie (the kink); b is
  // shifted by 0.05 to make an exact tie impossible in practice.
  const BinaryCase c = GetParam();
  Tensor a = rand_leaf(c.a, 71);
  Tensor b = add(rand_leaf(c.b, 72), 0.05).detach().set_requires_grad();
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return maximum(x[0], x[1]); }, {a, b}))) << "maximum";
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return minimum(x[0], x[1]); }, {a, b}))) << "minimum";
}

INSTANTIATE_TEST_SUITE_P(Shapes, MaxMinGradcheck,
                         ::testing::Values(BinaryCase{"same", {2, 3}, {2, 3}}, BinaryCase{"row", {2, 3}, {3}},
                                           BinaryCase{"col", {2, 3}, {2, 1}}, BinaryCase{"outer", {3, 1}, {1, 4}},
                                           BinaryCase{"scalar", {2, 3}, {}}, BinaryCase{"lead", {2, 1, 3}, {4, 1}},
                                           BinaryCase{"size1", {1}, {1, 1}}, BinaryCase{"empty", {0, 3}, {3}}),
                         [](const ::testing::TestParamInfo<BinaryCase>& i) { return std::string(i.param.name); });

TEST(MaxMinGradcheck, NonContiguousAndScalarForms) {
  Tensor a = rand_leaf_transposed({3, 4}, 81);
  Tensor b = transpose(add(rand_leaf({4, 3}, 82), 0.05).detach(), 0, 1);
  b.set_requires_grad();
  ASSERT_FALSE(a.is_contiguous());
  ASSERT_FALSE(b.is_contiguous());
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return maximum(x[0], x[1]); }, {a, b})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return minimum(x[0], x[1]); }, {a, b})));
  // Scalar forms: 0.0123 is not among the normal draws' values.
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return maximum(x[0], 0.0123); }, {rand_leaf({2, 5}, 83)})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return minimum(x[0], 0.0123); }, {a})));
}

TEST(MaximumMinimum, Errors) {
  EXPECT_NE(error_message([] { maximum(zeros({2}, kF32), zeros({2}, kF64)); })
                .find("maximum: expected both tensors to have the same dtype, got f32 (shape [2]) and f64 (shape [2])"),
            std::string::npos);
  EXPECT_NE(error_message([] { minimum(zeros({2, 3}), zeros({4})); })
                .find("minimum: shapes [2, 3] and [4] cannot be broadcast together"),
            std::string::npos);
  EXPECT_NE(error_message([] { maximum(from_vector<bool>({true}), from_vector<bool>({false})); })
                .find("maximum: not defined for bool tensors"),
            std::string::npos);
}
