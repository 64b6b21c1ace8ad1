#include "test_util.h"

#include <array>
#include <cstdlib>
#include <functional>

#include "core/parallel.h"
#include "ops/cpu/bgemm_amx.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/gemv.h"
#include "ops/cpu/isa.h"
#include "ops/cpu/sgemm.h"

using namespace trident;
using namespace trident::testing;
using autograd::TensorList;

namespace {
// Reference: out[b, i, j] = sum_k a[b, i, k] * c[b, k, j] on contiguous 3-D f64 tensors.
Tensor naive_bmm(const Tensor& a, const Tensor& b) {
  const int64_t B = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2);
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  std::vector<double> out(static_cast<size_t>(B * m * n), 0.0);
  for (int64_t t = 0; t < B; ++t)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += x[static_cast<size_t>((t * m + i) * k + p)] * y[static_cast<size_t>((t * k + p) * n + j)];
        out[static_cast<size_t>((t * m + i) * n + j)] = s;
      }
  return from_vector<double>(out, {B, m, n});
}
}  // namespace

TEST(Matmul, KnownValues) {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from_vector<float>({7, 8, 9, 10, 11, 12}, {3, 2});
  EXPECT_EQ(matmul(a, b).to_vector<float>(), (std::vector<float>{58, 64, 139, 154}));
  Tensor v = from_vector<float>({1, 1, 1});
  EXPECT_EQ(matmul(a, v).to_vector<float>(), (std::vector<float>{6, 15}));
  EXPECT_EQ(matmul(a, v).sizes(), (Shape{2}));
  EXPECT_EQ(matmul(from_vector<float>({1, 1}), a).to_vector<float>(), (std::vector<float>{5, 7, 9}));
  EXPECT_EQ(matmul(v, v).dim(), 0);
  EXPECT_EQ(matmul(v, v).item<float>(), 3.f);
  EXPECT_EQ(matmul(zeros({2, 0}), zeros({0, 3})).to_vector<float>(), std::vector<float>(6, 0.f));
  EXPECT_EQ(matmul(zeros({0, 4}), zeros({4, 3})).sizes(), (Shape{0, 3}));
}

TEST(Matmul, BatchedBroadcastingMatchesNestedLoops) {
  Generator g(8);
  struct Case {
    Shape a, b, out;
  };
  for (const Case& c : {Case{{3, 2, 4}, {3, 4, 5}, {3, 2, 5}}, Case{{2, 4}, {3, 4, 5}, {3, 2, 5}},
                        Case{{3, 2, 4}, {4, 5}, {3, 2, 5}}, Case{{2, 1, 3, 4}, {1, 5, 4, 2}, {2, 5, 3, 2}},
                        Case{{4}, {2, 4, 3}, {2, 3}}, Case{{2, 3, 4}, {4}, {2, 3}}}) {
    Tensor a = randn(c.a, kF64, &g), b = randn(c.b, kF64, &g);
    Tensor out = matmul(a, b);
    ASSERT_EQ(out.sizes(), c.out);
    // Reference: materialize the broadcast and use the 3-D loop.
    Tensor a2 = a.dim() == 1 ? unsqueeze(a, 0) : a;
    Tensor b2 = b.dim() == 1 ? unsqueeze(b, 1) : b;
    Shape batch = broadcast_shapes(Shape(a2.sizes().begin(), a2.sizes().end() - 2),
                                   Shape(b2.sizes().begin(), b2.sizes().end() - 2), "test");
    Shape ea = batch, eb = batch;
    ea.insert(ea.end(), a2.sizes().end() - 2, a2.sizes().end());
    eb.insert(eb.end(), b2.sizes().end() - 2, b2.sizes().end());
    Tensor ref = naive_bmm(reshape(contiguous(expand(a2, ea)), {-1, a2.size(-2), a2.size(-1)}),
                           reshape(contiguous(expand(b2, eb)), {-1, b2.size(-2), b2.size(-1)}));
    EXPECT_TRUE(all_close(reshape(out, {-1}), reshape(ref, {-1}), 1e-12, 1e-12));
  }
}

TEST(Matmul, TransposedOperandsNeedNoCopyAndGiveTheSameResult) {
  Generator g(9);
  Tensor a = randn({5, 7}, kF32, &g), b = randn({6, 7}, kF32, &g);
  Tensor bt = transpose(b, 0, 1);
  Tensor ref = matmul(a, contiguous(bt));
  const int64_t before = memory_stats(kCPU).total_allocations;
  Tensor out = matmul(a, bt);
  EXPECT_EQ(memory_stats(kCPU).total_allocations - before, 1) << "only the output is allocated";
  EXPECT_TRUE(all_close(out, ref, 1e-6));
  // Strided rows (every other column) take the copy path and still agree.
  Tensor wide = randn({5, 14}, kF32, &g);
  Tensor sl = wide.as_strided({5, 7}, {14, 2}, 0);
  EXPECT_TRUE(all_close(matmul(sl, bt), matmul(contiguous(sl), contiguous(bt)), 1e-6));
}

TEST(Matmul, HalfPrecisionComputesInF32) {
  // The f32 path (the bf16 GEMMs sum in another order: tests/ops/bgemm_amx_test.cpp).
  const cpu::Bf16Gemm kernel = cpu::set_bf16_gemm_kernel_for_testing(cpu::Bf16Gemm::None);
  Generator g(10);
  Tensor a = randn({4, 8}, kF32, &g).to(kBF16), b = randn({8, 3}, kF32, &g).to(kBF16);
  Tensor out = matmul(a, b);
  EXPECT_EQ(out.dtype(), kBF16);
  Tensor ref = matmul(a.to(kF32), b.to(kF32)).to(kBF16);
  cpu::set_bf16_gemm_kernel_for_testing(kernel);
  EXPECT_EQ(out.to_vector<float>(), ref.to_vector<float>());
}

TEST(Matmul, BmmAndMmCheckRanks) {
  EXPECT_THROW(mm(zeros({2, 3, 4}), zeros({4, 2})), Error);
  EXPECT_THROW(bmm(zeros({2, 3, 4}), zeros({3, 4, 2})), Error);
  EXPECT_EQ(bmm(zeros({2, 3, 4}), zeros({2, 4, 5})).sizes(), (Shape{2, 3, 5}));
  EXPECT_THROW(matmul(zeros({2, 3}, kI64), zeros({3, 2}, kI64)), Error);
  EXPECT_THROW(matmul(zeros({2, 3}), zeros({})), Error);
}

TEST(MatmulGradcheck, AllRankCombinations) {
  struct Case {
    Shape a, b;
  };
  uint64_t seed = 100;
  for (const Case& c : {Case{{3}, {3}}, Case{{2, 3}, {3}}, Case{{3}, {3, 2}}, Case{{2, 3}, {3, 4}},
                        Case{{2, 2, 3}, {3, 2}}, Case{{2, 3}, {2, 3, 2}}, Case{{2, 1, 2, 3}, {3, 3, 2}},
                        Case{{1, 3}, {3, 1}}, Case{{2, 0}, {0, 3}}}) {
    Tensor a = rand_leaf(c.a, seed++), b = rand_leaf(c.b, seed++);
    EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return matmul(x[0], x[1]); }, {a, b})))
        << shape_str(c.a) << " x " << shape_str(c.b);
  }
}

TEST(MatmulGradcheck, NonContiguousOperands) {
  Tensor a = rand_leaf_transposed({3, 4}, 120), b = rand_leaf_transposed({4, 2}, 121);
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return matmul(x[0], x[1]); }, {a, b})));
  Tensor c = rand_leaf_transposed({2, 3, 4}, 122);  // batch dim is the innermost in memory
  Tensor d = rand_leaf({4, 2}, 123);
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return matmul(x[0], x[1]); }, {c, d})));
}

TEST(Linear, MatchesMatmulPlusBias) {
  Generator g(30);
  Tensor x = randn({2, 5, 4}, kF64, &g), w = randn({3, 4}, kF64, &g), b = randn({3}, kF64, &g);
  Tensor ref = add(matmul(x, transpose(w, 0, 1)), b);
  EXPECT_TRUE(all_close(linear(x, w, b), ref, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(linear(x, w), matmul(x, transpose(w, 0, 1)), 1e-12, 1e-12));
  EXPECT_EQ(linear(x, w, b).sizes(), (Shape{2, 5, 3}));
  // Hand-computed: [1, 2] . [[1, 0], [0, 1], [1, 1]]^T + [0, 1, 2] = [1, 3, 5].
  Tensor xs = from_vector<float>({1, 2}, {1, 2});
  Tensor ws = from_vector<float>({1, 0, 0, 1, 1, 1}, {3, 2});
  EXPECT_EQ(linear(xs, ws, from_vector<float>({0, 1, 2})).to_vector<float>(), (std::vector<float>{1, 3, 5}));
  // 1-D input, non-contiguous input and weight, half precision.
  EXPECT_EQ(linear(from_vector<float>({1, 2}), ws).sizes(), (Shape{3}));
  Tensor xt = transpose(randn({4, 6}, kF64, &g), 0, 1);
  Tensor wt = transpose(randn({4, 3}, kF64, &g), 0, 1);
  EXPECT_TRUE(all_close(linear(xt, wt, b), add(matmul(xt, transpose(wt, 0, 1)), b), 1e-12, 1e-12));
  Tensor xh = x.to(kBF16), wh = w.to(kBF16);
  EXPECT_EQ(linear(xh, wh).dtype(), kBF16);
  EXPECT_EQ(linear(xh, wh).to_vector<float>(), linear(xh.to(kF32), wh.to(kF32)).to(kBF16).to_vector<float>());
  EXPECT_EQ(linear(zeros({0, 4}), zeros({3, 4})).sizes(), (Shape{0, 3}));
  EXPECT_EQ(linear(zeros({2, 0}), zeros({3, 0}), ones({3})).to_vector<float>(), std::vector<float>(6, 1.f));
}

TEST(Linear, ErrorsNameTheShapes) {
  try {
    linear(zeros({2, 5}), zeros({3, 4}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 5]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3, 4]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(linear(zeros({2, 4}), zeros({3, 4}), zeros({4})), Error);
  EXPECT_THROW(linear(zeros({2, 4}), zeros({4})), Error);
}

TEST(LinearGradcheck, InputWeightAndBias) {
  Tensor x = rand_leaf({2, 3, 4}, 130), w = rand_leaf({5, 4}, 131), b = rand_leaf({5}, 132);
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return linear(in[0], in[1], in[2]); }, {x, w, b})));
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return linear(in[0], in[1]); }, {x, w})));
  Tensor xt = rand_leaf_transposed({3, 4}, 133), wt = rand_leaf_transposed({5, 4}, 134);
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return linear(in[0], in[1], in[2]); }, {xt, wt, b})));
}

// A weight passed transposed (Hugging Face's [in, out] Conv1D layout, as GPT-2 passes it) gets
// its gradient computed in that layout (NOTE [Casts keep the layout]): the gradient reaching the
// [in, out] leaf is contiguous as it arrives (no transposing copy before it is accumulated), with
// the values of the contiguous weight's gradient, in f32, f64 and bf16 (autocast casts the
// transposed weight keeping its layout).
TEST(Linear, TransposedWeightsGetTheirGradientInTheirLayout) {
  Generator g(41);
  // Whether every gradient the leaf received arrived contiguous.
  const auto arrives_contiguous = [](Tensor& leaf) {
    auto all = std::make_shared<bool>(true);
    leaf.register_hook([all](const Tensor& grad) {
      *all = *all && grad.is_contiguous();
      return Tensor();
    });
    return all;
  };
  for (DType dt : {kF32, kF64}) {
    const Tensor x = randn({2, 5, 8}, dt, &g), dy = randn({2, 5, 6}, dt, &g);
    const Tensor w_in_out = randn({8, 6}, dt, &g);
    Tensor a = w_in_out.clone().set_requires_grad();
    Tensor b = transpose(w_in_out, 0, 1).contiguous().set_requires_grad();  // the same weight, [out, in]
    const auto a_contiguous = arrives_contiguous(a);
    sum(mul(linear(x, transpose(a, 0, 1)), dy)).backward();
    EXPECT_TRUE(*a_contiguous);
    sum(mul(linear(x, b), dy)).backward();
    ASSERT_TRUE(a.grad().defined());
    EXPECT_TRUE(a.grad().is_contiguous());
    EXPECT_EQ(a.grad().sizes(), (Shape{8, 6}));
    EXPECT_TRUE(all_close(a.grad(), transpose(b.grad(), 0, 1), dt == kF64 ? 1e-12 : 1e-5, 1e-6));
    for (GeluApproximation ap : {GeluApproximation::None, GeluApproximation::Tanh}) {
      Tensor c = w_in_out.clone().set_requires_grad();
      const auto c_contiguous = arrives_contiguous(c);
      sum(mul(linear_gelu(x, transpose(c, 0, 1), Tensor(), ap), dy)).backward();
      EXPECT_TRUE(*c_contiguous);
      Tensor d = transpose(w_in_out, 0, 1).contiguous().set_requires_grad();
      sum(mul(gelu(linear(x, d), ap), dy)).backward();
      EXPECT_TRUE(c.grad().is_contiguous());
      EXPECT_TRUE(all_close(c.grad(), transpose(d.grad(), 0, 1), dt == kF64 ? 1e-12 : 1e-5, 1e-6));
    }
  }
  // Under autocast bf16: an f32 [in, out] leaf, its cast kept transposed, the gradient cast back.
  const Tensor x = randn({16, 32}, kF32, &g), dy = randn({16, 24}, kF32, &g);
  const Tensor w_in_out = randn({32, 24}, kF32, &g);
  Tensor a = w_in_out.clone().set_requires_grad();
  Tensor b = transpose(w_in_out, 0, 1).contiguous().set_requires_grad();
  const auto a_contiguous = arrives_contiguous(a);
  {
    autocast::Guard guard(kBF16);
    Tensor ya = linear(x, transpose(a, 0, 1)), yb = linear(x, b);
    EXPECT_EQ(ya.to_vector<float>(), yb.to_vector<float>());
    sum(mul(ya.to(kF32), dy)).backward();
    sum(mul(yb.to(kF32), dy)).backward();
  }
  EXPECT_TRUE(*a_contiguous);
  EXPECT_EQ(a.grad().dtype(), kF32);
  // The same exact products summed in f32 (perhaps in another order), each rounded to bf16 once:
  // at most one bf16 rounding (2^-7 relative) apart.
  EXPECT_TRUE(all_close(a.grad(), transpose(b.grad(), 0, 1), 1.0 / 128, 1e-5));
}

// linear_gelu is gelu(linear(...)) as one op: on the CPU the same kernels, so the same bits.
TEST(LinearGelu, EqualsGeluOfLinear) {
  Generator g(40);
  for (DType dt : {kF32, kF64}) {
    const Tensor x = randn({2, 5, 8}, dt, &g), w = randn({6, 8}, dt, &g), b = randn({6}, dt, &g);
    for (GeluApproximation a : {GeluApproximation::None, GeluApproximation::Tanh}) {
      EXPECT_EQ(linear_gelu(x, w, b, a).to_vector<double>(), gelu(linear(x, w, b), a).to_vector<double>());
      EXPECT_EQ(linear_gelu(x, w, Tensor(), a).to_vector<double>(), gelu(linear(x, w), a).to_vector<double>());
    }
    EXPECT_EQ(linear_gelu(x, w, b, GeluApproximation::Tanh).sizes(), (Shape{2, 5, 6}));
  }
  // Hand-computed: x = [1, -1], W = [[1, 0], [0, 1], [1, 1]], b = [0, 0, 0.5] -> pre [1, -1, 0.5];
  // exact GELU x Phi(x): 0.841344746, -0.158655254, 0.345731 (0.5 Phi(0.5) = 0.5 x 0.691462461).
  const Tensor xs = from_vector<double>({1, -1}, {1, 2}), ws = from_vector<double>({1, 0, 0, 1, 1, 1}, {3, 2});
  const std::vector<double> y = linear_gelu(xs, ws, from_vector<double>({0, 0, 0.5}), GeluApproximation::None).to_vector<double>();
  ASSERT_EQ(y.size(), 3u);
  EXPECT_NEAR(y[0], 0.841344746, 1e-9);
  EXPECT_NEAR(y[1], -0.158655254, 1e-9);
  EXPECT_NEAR(y[2], 0.345731231, 1e-9);
  EXPECT_EQ(linear_gelu(zeros({0, 4}), zeros({3, 4}), Tensor(), GeluApproximation::Tanh).sizes(), (Shape{0, 3}));
  // Half precision: computed as the composition does.
  const Tensor xh = randn({3, 8}, kF32, &g).to(kBF16), wh = randn({4, 8}, kF32, &g).to(kBF16);
  EXPECT_EQ(linear_gelu(xh, wh, Tensor(), GeluApproximation::Tanh).to_vector<float>(),
            gelu(linear(xh, wh), GeluApproximation::Tanh).to_vector<float>());
}

TEST(LinearGelu, ErrorsNameTheOpAndShapes) {
  trident::testing::expect_error([] { linear_gelu(zeros({2, 5}), zeros({3, 4}), Tensor(), GeluApproximation::Tanh); },
                                 {"linear_gelu", "[2, 5]", "[3, 4]"});
  trident::testing::expect_error([] { linear_gelu(zeros({2, 4}), zeros({3, 4}), zeros({4}), GeluApproximation::None); },
                                 {"linear_gelu", "bias shape [4]"});
}

TEST(LinearGeluGradcheck, InputWeightAndBiasBothForms) {
  // Kept away from GELU's steep region only by the random draw; GELU is smooth everywhere.
  Tensor x = rand_leaf({2, 3, 4}, 140), w = rand_leaf({5, 4}, 141), b = rand_leaf({5}, 142);
  for (GeluApproximation a : {GeluApproximation::None, GeluApproximation::Tanh}) {
    EXPECT_TRUE(grad_ok(gradcheck([a](const TensorList& in) { return linear_gelu(in[0], in[1], in[2], a); }, {x, w, b})));
    EXPECT_TRUE(grad_ok(gradcheck([a](const TensorList& in) { return linear_gelu(in[0], in[1], Tensor(), a); }, {x, w})));
  }
  Tensor xt = rand_leaf_transposed({3, 4}, 143), wt = rand_leaf_transposed({5, 4}, 144);
  EXPECT_TRUE(grad_ok(gradcheck(
      [](const TensorList& in) { return linear_gelu(in[0], in[1], in[2], GeluApproximation::Tanh); }, {xt, wt, b})));
}

TEST(Matmul, FoldedAndParallelBatchPathsAgreeWithTheLoop) {
  Generator g(31);
  // [B, T, C] @ [C, N]: one tall GEMM.
  Tensor a = randn({3, 5, 4}, kF64, &g), w = randn({4, 6}, kF64, &g);
  Tensor ref = naive_bmm(a, contiguous(expand(unsqueeze(w, 0), {3, 4, 6})));
  EXPECT_TRUE(all_close(matmul(a, w), ref, 1e-12, 1e-12));
  // Batch dims that do not fold (a permuted batch) fall back to one GEMM per matrix.
  Tensor ap = permute(randn({5, 3, 4}, kF64, &g), {1, 0, 2});
  EXPECT_TRUE(all_close(matmul(ap, w), naive_bmm(contiguous(ap), contiguous(expand(unsqueeze(w, 0), {3, 4, 6}))), 1e-12,
                        1e-12));
  // Many small GEMMs: run one per thread.
  Tensor q = randn({64, 8, 16}, kF64, &g), k = randn({64, 16, 8}, kF64, &g);
  EXPECT_TRUE(all_close(matmul(q, k), naive_bmm(q, k), 1e-12, 1e-12));
  // A single-row batch with an odd row stride.
  Tensor r = randn({4, 1, 10}, kF64, &g).as_strided({4, 1, 3}, {10, 7, 1}, 0);
  Tensor m = randn({3, 2}, kF64, &g);
  EXPECT_TRUE(all_close(matmul(r, m), matmul(contiguous(r), m), 1e-12, 1e-12));
}

// NOTE [AVX-512 SGEMM], NOTE [AVX2 SGEMM]: Trident's own f32 GEMMs, called directly, against an
// f64 product of the same f32 values, for every transpose pair, edges of each block size (8 x 48
// and 4 x 24 tiles, kMC = 96 rows, kKC = 384 steps, blocks of 768 or 3072 columns), row strides wider
// than the matrices, alpha and beta (beta = 0 must not read C: C starts as NaN there). Elements
// outside C (the row padding) must stay untouched. Tolerance: the f32 dot-product bound,
// k eps sum |a||b| (plus |beta c| eps), per element.
namespace {
struct SgemmCase {
  int64_t m, n, k;
  float alpha, beta;
};
using SgemmFn = std::function<void(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                                   float, float*, int64_t)>;
// Runs `sgemm` on every transpose combination of each case, with spare columns in every operand
// (C's must stay untouched) and NaN in C where beta is 0 (it must not be read), against f64 sums
// within the f32 bound.
void expect_sgemm_matches_f64(const std::vector<SgemmCase>& cases, const SgemmFn& sgemm, uint64_t seed) {
  Generator g(seed);
  for (const SgemmCase& cs : cases) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      SCOPED_TRACE(::testing::Message() << cs.m << "x" << cs.n << "x" << cs.k << " ta " << ta << " tb " << tb << " alpha "
                                        << cs.alpha << " beta " << cs.beta);
      // Stored A is [m, k] (or [k, m] when transposed) with 3 spare columns; B likewise; C has 5.
      const int64_t ar = ta ? cs.k : cs.m, ac = ta ? cs.m : cs.k, br = tb ? cs.n : cs.k, bc = tb ? cs.k : cs.n;
      const int64_t lda = ac + 3, ldb = bc + 3, ldc = cs.n + 5;
      const std::vector<float> a = randn({ar, lda}, kF32, &g).to_vector<float>(), b = randn({br, ldb}, kF32, &g).to_vector<float>();
      std::vector<float> c = randn({cs.m, ldc}, kF32, &g).to_vector<float>();
      if (cs.beta == 0)
        for (int64_t i = 0; i < cs.m; ++i)
          for (int64_t j = 0; j < cs.n; ++j) c[i * ldc + j] = std::nanf("");
      const std::vector<float> c0 = c;
      sgemm(ta, tb, cs.m, cs.n, cs.k, cs.alpha, a.data(), lda, b.data(), ldb, cs.beta, c.data(), ldc);
      int bad = 0;
      for (int64_t i = 0; i < cs.m && bad < 5; ++i) {
        for (int64_t j = 0; j < ldc && bad < 5; ++j) {
          const size_t at = static_cast<size_t>(i * ldc + j);
          if (j >= cs.n) {  // padding
            if (!(c[at] == c0[at])) ++bad, ADD_FAILURE() << "wrote outside C at (" << i << ", " << j << ")";
            continue;
          }
          double s = 0, mag = 0;
          for (int64_t p = 0; p < cs.k; ++p) {
            const double x = a[static_cast<size_t>(ta ? p * lda + i : i * lda + p)];
            const double y = b[static_cast<size_t>(tb ? j * ldb + p : p * ldb + j)];
            s += x * y;
            mag += std::fabs(x * y);
          }
          const double cin = cs.beta == 0 ? 0.0 : c0[at];
          const double want = cs.alpha * s + cs.beta * cin;
          const double tol = 1e-6 + 6e-8 * (static_cast<double>(cs.k) + 2) * (std::fabs(cs.alpha) * mag + std::fabs(cs.beta * cin));
          if (!(std::fabs(c[at] - want) <= tol))
            ++bad, ADD_FAILURE() << "C(" << i << ", " << j << ") = " << c[at] << ", want " << want << " (tolerance " << tol << ")";
        }
      }
    }
  }
}
}  // namespace

TEST(Gemm, Avx512KernelMatchesF64OnEveryLayoutAndEdge) {
  if (!cpu::sgemm_avx512_available()) GTEST_SKIP() << "this CPU (or build) has no AVX-512 kernels";
  expect_sgemm_matches_f64({{1, 1, 1, 1, 0},      {7, 15, 9, 1, 0},      {8, 48, 8, 1, 0},       {9, 49, 7, 0.5f, 1},
                            {33, 47, 19, 1, -0.7f}, {96, 96, 384, 1, 0},  {97, 95, 385, 2, 1},    {200, 100, 800, 1, 0.25f},
                            {17, 3100, 40, 1, 0},   {130, 17, 1000, -1, 1}, {64, 64, 1, 1, 0},     {5, 300, 77, 1, 0}},
                           cpu::sgemm_avx512, 71);
}

TEST(Gemm, Avx2KernelMatchesF64OnEveryLayoutAndEdge) {
  if (!cpu::sgemm_avx2_available()) GTEST_SKIP() << "this CPU (or build) has no AVX2 and FMA";
  expect_sgemm_matches_f64({{1, 1, 1, 1, 0},       {3, 23, 9, 1, 0},        {4, 24, 8, 1, 0},      {5, 25, 7, 0.5f, 1},
                            {33, 47, 19, 1, -0.7f}, {96, 96, 384, 1, 0},     {97, 95, 385, 2, 1},   {200, 100, 800, 1, 0.25f},
                            {17, 3100, 40, 1, 0},   {130, 17, 1000, -1, 1},  {64, 64, 1, 1, 0},     {5, 300, 77, 1, 0},
                            {6, 3073, 13, 1, 0.5f}, {101, 49, 256, 0.5f, 0}, {8, 900, 8, 1, 0}},
                           cpu::sgemm_avx2, 75);
}

// NOTE [Small-m SGEMM]: one to four rows times a matrix, on one thread and on two (above the size
// where it shares), with tails in every dimension (k past a 64-row block and not a multiple of
// 4 or 8, n not a multiple of 8); the two thread counts give the same bits. Larger m, and n or k
// under 16, are left to the GEMM.
TEST(Gemm, SmallMProductsMatchF64AndDoNotDependOnTheThreads) {
  const SgemmFn small = [](bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    ASSERT_TRUE(cpu::sgemm_small_m(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc));
  };
  const std::vector<SgemmCase> cases = {{1, 16, 16, 1, 0},    {1, 17, 131, 1, 0},     {2, 33, 65, 0.5f, 1},  {3, 100, 130, 1, -0.7f},
                                        {4, 515, 200, 2, 0},  {1, 2304, 768, 1, 1},   {4, 1000, 77, -1, 0.25f}};
  const int threads = get_num_threads();
  for (const int nthreads : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << nthreads << " threads");
    set_num_threads(nthreads);
    expect_sgemm_matches_f64(cases, small, 73);
  }
  Generator g(74);
  for (const auto& [m, n, k] : {std::array<int64_t, 3>{1, 2304, 768}, {3, 1000, 300}, {2, 700, 1025}}) {
    for (const bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << m << "x" << n << "x" << k << " tb " << tb);
      const Tensor a = randn({m, k}, kF32, &g), b = tb ? randn({n, k}, kF32, &g) : randn({k, n}, kF32, &g);
      auto product = [&, m = m, n = n, k = k](int nthreads) {
        set_num_threads(nthreads);
        std::vector<float> c(static_cast<size_t>(m * n));
        cpu::gemm<float>(false, tb, m, n, k, 1.f, a.data<float>(), k, b.data<float>(), tb ? k : n, 0.f, c.data(), n);
        return c;
      };
      EXPECT_EQ(product(1), product(2));
    }
  }
  set_num_threads(threads);
  std::vector<float> a(64 * 64, 1.f), b(64 * 64, 1.f), c(64 * 64);
  EXPECT_FALSE(cpu::sgemm_small_m(false, false, 5, 64, 64, 1.f, a.data(), 64, b.data(), 64, 0.f, c.data(), 64));
  EXPECT_FALSE(cpu::sgemm_small_m(false, false, 1, 15, 64, 1.f, a.data(), 64, b.data(), 64, 0.f, c.data(), 64));
  EXPECT_FALSE(cpu::sgemm_small_m(false, false, 1, 64, 15, 1.f, a.data(), 64, b.data(), 64, 0.f, c.data(), 64));
}

// NOTE [AVX2 SGEMM]'s rule, with the AVX-512 kernels off: where OpenBLAS runs AVX2 kernels, the
// AVX2 GEMM takes products of at most 256 steps of k and at least 4 rows, 8 columns and 8 steps;
// OpenBLAS the longer and the thinner ones (and every one where its own kernels are AVX-512).
TEST(Gemm, Avx2KernelTakesShortSumsOnly) {
  if (!cpu::sgemm_avx2_available()) GTEST_SKIP() << "this CPU (or build) has no AVX2 and FMA";
  if (std::getenv("TRIDENT_CPU_SGEMM") != nullptr) GTEST_SKIP() << "TRIDENT_CPU_SGEMM is set: the rule does not apply";
  const bool was = cpu::set_cpu_avx512_kernels_enabled_for_testing(false);
  const cpu::Sgemm short_sums = blas_core_has_avx512() ? cpu::Sgemm::OpenBlas : cpu::Sgemm::Avx2;
  EXPECT_EQ(cpu::sgemm_kernel_for(64, 900, 256), short_sums);
  EXPECT_EQ(cpu::sgemm_kernel_for(4, 8, 8), short_sums);
  EXPECT_EQ(cpu::sgemm_kernel_for(1024, 50304, 256), short_sums);
  EXPECT_EQ(cpu::sgemm_kernel_for(64, 900, 257), cpu::Sgemm::OpenBlas);
  EXPECT_EQ(cpu::sgemm_kernel_for(64, 64, 900), cpu::Sgemm::OpenBlas);
  EXPECT_EQ(cpu::sgemm_kernel_for(3, 900, 64), cpu::Sgemm::OpenBlas);
  EXPECT_EQ(cpu::sgemm_kernel_for(64, 7, 64), cpu::Sgemm::OpenBlas);
  EXPECT_EQ(cpu::sgemm_kernel_for(64, 900, 7), cpu::Sgemm::OpenBlas);
  cpu::set_cpu_avx512_kernels_enabled_for_testing(was);
}

// TRIDENT_CPU_SGEMM picks the f32 GEMM; a value it does not know is an error that names it.
TEST(Gemm, SgemmEnvironmentChoice) {
  EXPECT_EQ(cpu::sgemm_choice_from_env(nullptr), -1);
  EXPECT_EQ(cpu::sgemm_choice_from_env(""), -1);
  EXPECT_EQ(cpu::sgemm_choice_from_env("auto"), -1);
  EXPECT_EQ(cpu::sgemm_choice_from_env("trident"), 1);
  EXPECT_EQ(cpu::sgemm_choice_from_env("openblas"), 0);
  try {
    cpu::sgemm_choice_from_env("mkl");
    ADD_FAILURE() << "no error for TRIDENT_CPU_SGEMM=mkl";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("TRIDENT_CPU_SGEMM=mkl: expected trident, openblas or auto"), std::string::npos) << e.what();
  }
}

// cpu::gemm splits a product into panels across threads; with Trident's own kernels each element
// is summed in the same order whatever the panel, so the thread count does not change a bit.
// The same products through OpenBLAS agree within the f32 bound. `avx512`: the AVX-512 kernel,
// else the AVX2 one (the AVX-512 kernels turned off for the test).
namespace {
void expect_own_sgemm_independent_of_threads(bool avx512) {
  const bool was_avx512 = cpu::set_cpu_avx512_kernels_enabled_for_testing(avx512);
  const int threads = get_num_threads();
  Generator g(72);
  for (const auto& [m, n, k] : {std::array<int64_t, 3>{300, 200, 500}, {40, 700, 129}, {33, 33, 33}}) {
    SCOPED_TRACE(::testing::Message() << m << "x" << n << "x" << k);
    const Tensor a = randn({m, k}, kF32, &g), b = randn({n, k}, kF32, &g);  // linear's layout: B read transposed
    auto product = [&, m = m, n = n, k = k](int nthreads, int preference) {
      const int was = cpu::set_sgemm_preference_for_testing(preference);
      set_num_threads(nthreads);
      std::vector<float> c(static_cast<size_t>(m * n));
      cpu::gemm<float>(false, true, m, n, k, 1.f, a.data<float>(), k, b.data<float>(), k, 0.f, c.data(), n);
      cpu::set_sgemm_preference_for_testing(was);
      return c;
    };
    const int was = cpu::set_sgemm_preference_for_testing(1);
    const bool chosen = cpu::sgemm_kernel_for(m, n, k) == (avx512 ? cpu::Sgemm::Avx512 : cpu::Sgemm::Avx2);
    cpu::set_sgemm_preference_for_testing(0);
    const bool blas = cpu::sgemm_kernel_for(m, n, k) == cpu::Sgemm::OpenBlas;
    cpu::set_sgemm_preference_for_testing(was);
    EXPECT_TRUE(chosen && blas) << "the testing preference does not choose the kernels";
    const std::vector<float> one = product(1, 1), two = product(2, 1), openblas = product(2, 0);
    set_num_threads(threads);
    EXPECT_EQ(one, two);
    double worst = 0;
    for (size_t i = 0; i < one.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(one[i]) - openblas[i]));
    EXPECT_LT(worst, 1e-5 * static_cast<double>(k)) << "largest difference from OpenBLAS";
  }
  cpu::set_cpu_avx512_kernels_enabled_for_testing(was_avx512);
}
}  // namespace

TEST(Gemm, Avx512KernelIsTheSameOnOneOrTwoThreadsAndAgreesWithOpenBlas) {
  if (!cpu::sgemm_avx512_available()) GTEST_SKIP() << "this CPU (or build) has no AVX-512 kernels";
  expect_own_sgemm_independent_of_threads(true);
}

TEST(Gemm, Avx2KernelIsTheSameOnOneOrTwoThreadsAndAgreesWithOpenBlas) {
  if (!cpu::sgemm_avx2_available()) GTEST_SKIP() << "this CPU (or build) has no AVX2 and FMA";
  expect_own_sgemm_independent_of_threads(false);
}
