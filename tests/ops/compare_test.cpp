#include <cmath>
#include <functional>
#include <limits>

#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using autograd::TensorList;

namespace {

std::vector<bool> bools(const Tensor& t) {
  EXPECT_EQ(t.dtype(), kBool);
  std::vector<bool> out;
  for (int64_t v : t.to_vector<int64_t>()) out.push_back(v != 0);
  return out;
}


bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

}  // namespace

// ---- comparisons ----

TEST(Compare, TensorTensorWithBroadcasting) {
  const Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = from_vector<float>({2, 2, 7});
  using V = std::vector<bool>;
  EXPECT_EQ(bools(eq(a, b)), (V{false, true, false, false, false, false}));
  EXPECT_EQ(bools(ne(a, b)), (V{true, false, true, true, true, true}));
  EXPECT_EQ(bools(lt(a, b)), (V{true, false, true, false, false, true}));
  EXPECT_EQ(bools(le(a, b)), (V{true, true, true, false, false, true}));
  EXPECT_EQ(bools(gt(a, b)), (V{false, false, false, true, true, false}));
  EXPECT_EQ(bools(ge(a, b)), (V{false, true, false, true, true, false}));
  EXPECT_EQ(lt(from_vector<float>({1, 2}, {2, 1}), from_vector<float>({0, 5, 9}, {1, 3})).sizes(), (Shape{2, 3}));
  EXPECT_EQ(eq(zeros({0, 3}), zeros({3})).sizes(), (Shape{0, 3}));
  // Non-contiguous operands.
  const Tensor tr = transpose(a, 0, 1);  // [[1,4],[2,5],[3,6]]
  EXPECT_EQ(bools(gt(tr, from_vector<float>({3, 3}))), (V{false, true, false, true, false, true}));
}

TEST(Compare, NaNIntegersBoolAndHalf) {
  using V = std::vector<bool>;
  const Tensor n = from_vector<double>({kNaN, 1.0});
  EXPECT_EQ(bools(eq(n, n)), (V{false, true}));
  EXPECT_EQ(bools(ne(n, n)), (V{true, false}));
  EXPECT_EQ(bools(lt(n, 2.0)), (V{false, true}));
  EXPECT_EQ(bools(ge(n, kNaN)), (V{false, false}));
  // Integers compare with a scalar in f64 (PyTorch 1.13: tensor([1,2,3]) > 1.5 -> [F, T, T]).
  EXPECT_EQ(bools(gt(from_vector<int64_t>({1, 2, 3}), 1.5)), (V{false, true, true}));
  EXPECT_EQ(bools(eq(from_vector<int32_t>({2, 3}), 2.0)), (V{true, false}));
  EXPECT_EQ(bools(le(from_vector<uint8_t>({0, 255}), 254.5)), (V{true, false}));
  // Bool tensors compare too (PyTorch 1.13: [T, F] < [T, T] -> [F, T]).
  EXPECT_EQ(bools(lt(from_vector<bool>({true, false}), from_vector<bool>({true, true}))), (V{false, true}));
  EXPECT_EQ(bools(eq(from_vector<bool>({true, false}), 1.0)), (V{true, false}));
  // A scalar is rounded to a floating tensor's dtype (PyTorch 1.13: f16 and bf16 tensors
  // holding 0.1 == 0.1 -> True).
  EXPECT_EQ(bools(eq(from_vector<double>({0.1}).to(kF16), 0.1)), (V{true}));
  EXPECT_EQ(bools(eq(from_vector<double>({0.1}).to(kBF16), 0.1)), (V{true}));
  EXPECT_EQ(bools(eq(from_vector<double>({0.1}).to(kF32), 0.1)), (V{true}));
  EXPECT_EQ(bools(eq(from_vector<double>({0.1}), 0.1f)), (V{false})) << "f64 keeps the scalar's full precision";
}

TEST(Compare, ResultsHaveNoGradient) {
  Tensor a = rand_leaf({3}, 1);
  Tensor r = gt(a, 0.0);
  EXPECT_EQ(r.dtype(), kBool);
  EXPECT_FALSE(r.requires_grad());
  EXPECT_FALSE(eq(a, a).requires_grad());
  EXPECT_FALSE(isnan(a).requires_grad());
}

TEST(Compare, Errors) {
  EXPECT_TRUE(contains(error_message([] { lt(zeros({2}, kF32), zeros({2}, kF64)); }),
                       "lt: expected both tensors to have the same dtype, got f32 (shape [2]) and f64 (shape [2])"));
  EXPECT_TRUE(contains(error_message([] { eq(zeros({2, 3}), zeros({2})); }),
                       "eq: shapes [2, 3] and [2] cannot be broadcast together"));
  EXPECT_TRUE(contains(error_message([] { ge(Tensor(), 1.0); }), "ge: input is an undefined tensor"));
}

// ---- logical ops and classification ----

TEST(Logical, OnBoolAndOnNumbers) {
  using V = std::vector<bool>;
  const Tensor a = from_vector<bool>({true, true, false, false});
  const Tensor b = from_vector<bool>({true, false, true, false});
  EXPECT_EQ(bools(logical_and(a, b)), (V{true, false, false, false}));
  EXPECT_EQ(bools(logical_or(a, b)), (V{true, true, true, false}));
  EXPECT_EQ(bools(logical_xor(a, b)), (V{false, true, true, false}));
  EXPECT_EQ(bools(logical_not(a)), (V{false, false, true, true}));
  // Nonzero is true, dtypes may differ (PyTorch 1.13: logical_and([1., 0.], [2, 3]) -> [T, F]).
  EXPECT_EQ(bools(logical_and(from_vector<float>({1, 0}), from_vector<int64_t>({2, 3}))), (V{true, false}));
  EXPECT_EQ(bools(logical_not(from_vector<double>({0.0, -0.5, kNaN}))), (V{true, false, false}));
  // Broadcasting.
  EXPECT_EQ(bools(logical_or(from_vector<bool>({true, false}, {2, 1}), from_vector<bool>({false, false, true}))),
            (V{true, true, true, false, false, true}));
}

TEST(Logical, IsNanIsInfIsFinite) {
  using V = std::vector<bool>;
  for (DType dt : {kF32, kF64, kF16, kBF16}) {
    const Tensor x = from_vector<double>({1.0, kNaN, kInf, -kInf, -0.0, 1e300}).to(dt);
    // 1e300 overflows to inf in every dtype but f64.
    const bool big_inf = dt != kF64;
    EXPECT_EQ(bools(isnan(x)), (V{false, true, false, false, false, false})) << dt;
    EXPECT_EQ(bools(isinf(x)), (V{false, false, true, true, false, big_inf})) << dt;
    EXPECT_EQ(bools(isfinite(x)), (V{true, false, false, false, true, !big_inf})) << dt;
  }
  // Integers are always finite (PyTorch 1.13: isinf(tensor([1, 2])) -> [F, F]).
  EXPECT_EQ(bools(isnan(from_vector<int64_t>({1, 2}))), (V{false, false}));
  EXPECT_EQ(bools(isinf(from_vector<int32_t>({1}))), (V{false}));
  EXPECT_EQ(bools(isfinite(from_vector<uint8_t>({7}))), (V{true}));
  EXPECT_EQ(isfinite(zeros({2, 0})).sizes(), (Shape{2, 0}));
  // Strided input.
  const Tensor t = transpose(from_vector<float>({1, static_cast<float>(kNaN), 3, 4}, {2, 2}), 0, 1);
  EXPECT_EQ(bools(isnan(t)), (V{false, false, true, false}));
}

// ---- where ----

TEST(Where, ThreeWayBroadcastingAgainstPyTorch) {
  // PyTorch 1.13: cond [2, 1, 3], a [4, 1] = arange(4), b [3] = [10, 20, 30]; out [2, 4, 3];
  // backward of sum(out * arange(24)).
  const Tensor c = from_vector<bool>({true, false, true, false, false, true}, {2, 1, 3});
  Tensor a = reshape(arange(4, kF64), {4, 1}).set_requires_grad();
  Tensor b = from_vector<double>({10, 20, 30}).set_requires_grad();
  const Tensor y = where(c, a, b);
  EXPECT_EQ(y.sizes(), (Shape{2, 4, 3}));
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{0, 20, 0, 1, 20, 1, 2, 20, 2, 3, 20, 3,
                                                        10, 20, 0, 10, 20, 1, 10, 20, 2, 10, 20, 3}));
  sum(mul(y, reshape(arange(24, kF64), {2, 4, 3}))).backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{16, 25, 34, 43}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{66, 92, 0}));
}

TEST(Where, ScalarFormsDtypesAndLayouts) {
  const Tensor c = from_vector<bool>({true, false, true});
  EXPECT_EQ(where(c, from_vector<float>({1, 2, 3}), -1.0).to_vector<float>(), (std::vector<float>{1, -1, 3}));
  EXPECT_EQ(where(c, 7.0, from_vector<float>({1, 2, 3})).to_vector<float>(), (std::vector<float>{7, 2, 7}));
  EXPECT_EQ(where(c, from_vector<int64_t>({1, 2, 3}), from_vector<int64_t>({4, 5, 6})).to_vector<int64_t>(),
            (std::vector<int64_t>{1, 5, 3}));
  const Tensor h = where(c, from_vector<float>({1, 2, 3}).to(kF16), 0.1);
  EXPECT_EQ(h.dtype(), kF16);
  EXPECT_EQ(h.to_vector<float>()[1], static_cast<float>(Half(0.1f)));
  EXPECT_EQ(where(c, from_vector<bool>({false, false, false}), from_vector<bool>({true, true, true})).dtype(), kBool);
  // A strided condition and operand.
  const Tensor cc = transpose(from_vector<bool>({true, false, false, true}, {2, 2}), 0, 1);  // [[T,F],[F,T]]
  const Tensor aa = transpose(reshape(arange(4, kF32), {2, 2}), 0, 1);                       // [[0,2],[1,3]]
  EXPECT_EQ(where(cc, aa, 9.0).to_vector<float>(), (std::vector<float>{0, 9, 9, 3}));
  EXPECT_EQ(where(from_vector<bool>({true}), zeros({2, 1}), ones({3})).sizes(), (Shape{2, 3}));
  EXPECT_EQ(where(zeros({0}, kBool), zeros({3, 1}), 1.0).sizes(), (Shape{3, 0}));
}

struct WhereCase {
  const char* name;
  Shape c, a, b;
};
void PrintTo(const WhereCase& w, std::ostream* os) {
  *os << shape_str(w.c) << " " << shape_str(w.a) << " " << shape_str(w.b);
}

class WhereGradcheck : public ::testing::TestWithParam<WhereCase> {};

TEST_P(WhereGradcheck, BothOperands) {
  // where is linear in a and b (no kinks).
  const WhereCase w = GetParam();
  Generator g(7);
  const Tensor cond = lt(rand(w.c, kF64, &g), 0.5);
  Tensor a = rand_leaf(w.a, 91), b = rand_leaf(w.b, 92);
  EXPECT_TRUE(grad_ok(gradcheck([cond](const TensorList& x) { return where(cond, x[0], x[1]); }, {a, b})));
  EXPECT_TRUE(grad_ok(gradcheck([cond](const TensorList& x) { return where(cond, x[0], 2.5); }, {a})));
  EXPECT_TRUE(grad_ok(gradcheck([cond](const TensorList& x) { return where(cond, -1.0, x[0]); }, {b})));
  EXPECT_TRUE(grad_ok(gradcheck([cond](const TensorList& x) { return masked_fill(x[0], cond, 3.0); }, {a})));
}

INSTANTIATE_TEST_SUITE_P(Shapes, WhereGradcheck,
                         ::testing::Values(WhereCase{"same", {2, 3}, {2, 3}, {2, 3}},
                                           WhereCase{"three_way", {2, 1, 3}, {4, 1}, {3}},
                                           WhereCase{"cond_smaller", {3}, {2, 3}, {2, 3}},
                                           WhereCase{"cond_bigger", {2, 3}, {1}, {3}},
                                           WhereCase{"scalars", {}, {2, 2}, {}},
                                           WhereCase{"size1", {1, 1}, {1}, {1, 1}},
                                           WhereCase{"empty", {0, 3}, {3}, {1, 3}}),
                         [](const ::testing::TestParamInfo<WhereCase>& i) { return std::string(i.param.name); });

TEST(WhereGradcheck, NonContiguousOperandsAndCondition) {
  const Tensor cond = transpose(from_vector<bool>({true, false, false, true, true, false}, {2, 3}), 0, 1);
  Tensor a = rand_leaf_transposed({3, 2}, 95);
  Tensor b = rand_leaf({3, 2}, 96);
  ASSERT_FALSE(a.is_contiguous());
  EXPECT_TRUE(grad_ok(gradcheck([cond](const TensorList& x) { return where(cond, x[0], x[1]); }, {a, b})));
  EXPECT_TRUE(grad_ok(gradcheck([cond](const TensorList& x) { return masked_fill(x[0], cond, 0.0); }, {a})));
}

TEST(Where, OnlyTheOperandThatRequiresGradGetsOne) {
  const Tensor c = from_vector<bool>({true, false});
  Tensor a = from_vector<double>({1, 2}).set_requires_grad();
  const Tensor b = from_vector<double>({3, 4});
  sum(where(c, a, b)).backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{1, 0}));
  EXPECT_FALSE(b.grad().defined());
}

TEST(Where, Errors) {
  const Tensor c = from_vector<bool>({true, false});
  EXPECT_TRUE(contains(error_message([] { where(from_vector<int64_t>({1, 0}), zeros({2, 1}), ones({2})); }),
                       "where: expected cond to be a bool tensor, got i64 (shape [2])"));
  EXPECT_TRUE(contains(error_message([&] { where(c, zeros({2}, kF32), zeros({2}, kF64)); }),
                       "where: expected a and b to have the same dtype, got f32 (shape [2]) and f64 (shape [2])"));
  EXPECT_TRUE(contains(error_message([&] { where(c, zeros({3, 2}), zeros({4, 1})); }),
                       "where: shapes [2] (cond), [3, 2] and [4, 1] cannot be broadcast together (dim 0: 1, 3, 4)"));
  EXPECT_TRUE(contains(error_message([&] { where(c, zeros({3}), 1.0); }),
                       "where: shapes [3] and [2] cannot be broadcast together"));
  EXPECT_TRUE(contains(error_message([&] { where(c, from_vector<int64_t>({1, 2}), 0.5); }),
                       "where: value 0.5 cannot be stored in a tensor of dtype i64"));
}

// ---- masked_fill ----

TEST(MaskedFill, ValuesAndGradientAgainstPyTorch) {
  // PyTorch 1.13: x [2, 3], mask [3] = [T, F, T], value -1.5; backward of sum(out * x0).
  Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}).set_requires_grad();
  const Tensor m = from_vector<bool>({true, false, true});
  const Tensor y = masked_fill(x, m, -1.5);
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{-1.5, 2, -1.5, -1.5, 5, -1.5}));
  sum(mul(y, from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}))).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 2, 0, 0, 5, 0}));
  // The mask may be the larger operand: the out-of-place form broadcasts both (PyTorch 1.13:
  // zeros(3).masked_fill(ones(2, 3, bool), 1).shape == [2, 3]); x's gradient sums back.
  Tensor v = from_vector<double>({1, 2, 3}).set_requires_grad();
  const Tensor big = from_vector<bool>({true, false, false, false, false, true}, {2, 3});
  const Tensor z = masked_fill(v, big, 0.0);
  EXPECT_EQ(z.sizes(), (Shape{2, 3}));
  sum(z).backward();
  EXPECT_EQ(v.grad().to_vector<double>(), (std::vector<double>{1, 2, 1}));
  // -inf for attention masks, in f32 and bf16.
  const Tensor s = masked_fill(zeros({2, 2}), from_vector<bool>({false, true}), -kInf);
  EXPECT_EQ(s.to_vector<float>()[1], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(masked_fill(zeros({2}, kBF16), from_vector<bool>({true, false}), 3.0).to_vector<float>(),
            (std::vector<float>{3, 0}));
}

TEST(MaskedFill, InPlace) {
  Tensor x = from_vector<float>({1, 2, 3, 4}, {2, 2});
  const uint32_t v0 = x.version();
  masked_fill_(x, from_vector<bool>({false, true}), 9.0);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1, 9, 3, 9}));
  EXPECT_GT(x.version(), v0);
  // Through a strided view.
  Tensor y = zeros({2, 3}, kI64);
  masked_fill_(transpose(y, 0, 1), from_vector<bool>({true, false}), 5.0);
  EXPECT_EQ(y.to_vector<int64_t>(), (std::vector<int64_t>{5, 5, 5, 0, 0, 0}));
  // Refused on a tensor that requires grad while grad mode is on, allowed under NoGradGuard.
  Tensor p = from_vector<double>({1, 2}).set_requires_grad();
  EXPECT_TRUE(contains(error_message([&] { masked_fill_(p, from_vector<bool>({true, false}), 0.0); }),
                       "masked_fill_: in-place operations on tensors that require grad"));
  {
    autograd::NoGradGuard no_grad;
    masked_fill_(p, from_vector<bool>({true, false}), 0.0);
  }
  EXPECT_EQ(p.to_vector<double>(), (std::vector<double>{0, 2}));
}

TEST(MaskedFill, Errors) {
  EXPECT_TRUE(contains(error_message([] { masked_fill(zeros({3}), from_vector<int64_t>({1, 0, 1}), 1.0); }),
                       "masked_fill: expected mask to be a bool tensor, got i64 (shape [3])"));
  EXPECT_TRUE(contains(error_message([] { masked_fill(zeros({3}), zeros({2}, kBool), 1.0); }),
                       "masked_fill: shapes [3] and [2] cannot be broadcast together"));
  EXPECT_TRUE(contains(error_message([] { masked_fill_(zeros({3}), zeros({2, 3}, kBool), 1.0); }),
                       "masked_fill_: mask's shape [2, 3] does not broadcast to self's shape [3]"));
  EXPECT_TRUE(contains(error_message([] { masked_fill(zeros({3}, kU8), zeros({3}, kBool), 256.0); }),
                       "masked_fill: value 256 cannot be stored in a tensor of dtype u8"));
  EXPECT_TRUE(contains(error_message([] { masked_fill(zeros({3}, kI32), zeros({3}, kBool), 1.5); }),
                       "value 1.5 cannot be stored in a tensor of dtype i32"));
}
