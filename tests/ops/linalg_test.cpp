#include "test_util.h"

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
  Generator g(10);
  Tensor a = randn({4, 8}, kF32, &g).to(kBF16), b = randn({8, 3}, kF32, &g).to(kBF16);
  Tensor out = matmul(a, b);
  EXPECT_EQ(out.dtype(), kBF16);
  Tensor ref = matmul(a.to(kF32), b.to(kF32)).to(kBF16);
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
