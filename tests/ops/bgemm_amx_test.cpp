// The bf16 GEMMs (NOTE [AMX bf16 GEMM], NOTE [AVX512-BF16 GEMM]) against f64 sums of the same
// bf16 values, and bf16 matmul and linear with them against the f32 path: every kernel this CPU
// has; on a CPU with neither the tests skip, saying so.
#include "test_util.h"

#include <array>
#include <cmath>
#include <cstdlib>

#include "core/half.h"
#include "ops/cpu/bgemm_amx.h"
#include "ops/cpu/linalg.h"

using namespace trident;
using namespace trident::testing;

namespace {

const char* name(cpu::Bf16Gemm k) { return k == cpu::Bf16Gemm::Amx ? "AMX" : k == cpu::Bf16Gemm::Avx512Bf16 ? "AVX512-BF16" : "none"; }

std::vector<uint16_t> random_bf16(int64_t count, Generator* g) {
  const std::vector<float> v = randn({count}, kF32, g).to_vector<float>();
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = detail::f32_to_bf16_bits(v[i]);
  return out;
}
double value(uint16_t b) { return detail::bf16_bits_to_f32(b); }

struct Case {
  int64_t m, n, k;
};

// Every transpose combination of each case, spare columns in every operand (C's must stay as
// they were), NaN in C (it must not be read), with and without a bias: the f32 result within the
// bound of f32 sums of k exact products, and the bf16 result that f32 result rounded once.
// only_layout: that transpose/bias combination alone; row_step: every row_step-th row of C
// checked (and the last), for large cases.
void expect_matches_f64(cpu::Bf16Gemm kernel, const std::vector<Case>& cases, uint64_t seed, int only_layout = -1,
                        int64_t row_step = 1) {
  Generator g(seed);
  for (const Case& cs : cases) {
    for (int t = 0; t < 8; ++t) {
      if (only_layout >= 0 && t != only_layout) continue;
      const bool ta = t & 1, tb = t & 2, with_bias = t & 4;
      SCOPED_TRACE(::testing::Message() << cs.m << "x" << cs.n << "x" << cs.k << " ta " << ta << " tb " << tb << " bias "
                                        << with_bias);
      const int64_t ar = ta ? cs.k : cs.m, ac = ta ? cs.m : cs.k, br = tb ? cs.n : cs.k, bc = tb ? cs.k : cs.n;
      const int64_t lda = ac + 3, ldb = bc + 5, ldc = cs.n + 7;
      const std::vector<uint16_t> a = random_bf16(ar * lda, &g), b = random_bf16(br * ldb, &g);
      const std::vector<float> bias = randn({cs.n}, kF32, &g).to_vector<float>();
      std::vector<float> c(static_cast<size_t>(cs.m * ldc), std::nanf(""));
      std::vector<uint16_t> c16(static_cast<size_t>(cs.m * ldc), 0x7fc1);
      const float* bp = with_bias ? bias.data() : nullptr;
      cpu::gemm_bf16(kernel, ta, tb, cs.m, cs.n, cs.k, a.data(), lda, b.data(), ldb, bp, c.data(), ldc);
      cpu::gemm_bf16(kernel, ta, tb, cs.m, cs.n, cs.k, a.data(), lda, b.data(), ldb, bp, c16.data(), ldc);
      int bad = 0;
      for (int64_t i = 0; i < cs.m && bad < 5; ++i) {
        if (i % row_step != 0 && i + 1 != cs.m) continue;
        for (int64_t j = 0; j < ldc && bad < 5; ++j) {
          const auto at = static_cast<size_t>(i * ldc + j);
          if (j >= cs.n) {
            if (!std::isnan(c[at]) || c16[at] != 0x7fc1) ++bad, ADD_FAILURE() << "wrote outside C at (" << i << ", " << j << ")";
            continue;
          }
          double s = with_bias ? bias[static_cast<size_t>(j)] : 0.0, mag = std::fabs(s);
          for (int64_t p = 0; p < cs.k; ++p) {
            const double x = value(a[static_cast<size_t>(ta ? p * lda + i : i * lda + p)]);
            const double y = value(b[static_cast<size_t>(tb ? j * ldb + p : p * ldb + j)]);
            s += x * y;
            mag += std::fabs(x * y);
          }
          // Each product is exact in f32; k + 1 additions in f32 round by at most 2^-24 each.
          const double tol = 6e-8 * (static_cast<double>(cs.k) + 2) * mag;
          if (!(std::fabs(c[at] - s) <= tol))
            ++bad, ADD_FAILURE() << "C(" << i << ", " << j << ") = " << c[at] << ", want " << s << " (tolerance " << tol << ")";
          if (c16[at] != detail::f32_to_bf16_bits(c[at]))
            ++bad, ADD_FAILURE() << "bf16 C(" << i << ", " << j << ") = " << value(c16[at]) << " is not the f32 result "
                                 << c[at] << " rounded";
        }
      }
    }
  }
}

}  // namespace

TEST(Bf16Gemm, MatchesF64OnEveryLayoutAndEdge) {
  if (bf16_kernels().empty()) GTEST_SKIP() << kNoBf16Kernel;
  for (const cpu::Bf16Gemm kernel : bf16_kernels()) {
    SCOPED_TRACE(name(kernel));
    // Tails in every dimension (16-row halves, 32-wide blocks, 32-long k steps, pairs of k), one
    // and several column blocks (k = 300, padded to 320: 1,632 columns per block of packed B, so
    // 3,300 are three), groups of four column blocks and a partial group, several k steps of 256
    // (partial sums kept between them, the last step shorter), a large k (a packed row block of
    // A and a 32-column block of B larger than L2).
    expect_matches_f64(kernel,
                       {{1, 1, 1},      {1, 5, 2},       {16, 16, 32},    {17, 33, 31},   {32, 32, 64},   {33, 65, 97},
                        {100, 3, 300},  {5, 300, 77},    {64, 3300, 300}, {33, 200, 1500}, {40, 40, 4097}, {3, 70, 9000}},
                       81);
    expect_matches_f64(kernel, {{70, 64, 40000}}, 85, /*only_layout=*/6, /*row_step=*/7);
  }
}

TEST(Bf16Gemm, DoesNotDependOnTheThreads) {
  if (bf16_kernels().empty()) GTEST_SKIP() << kNoBf16Kernel;
  const int threads = get_num_threads();
  Generator g(82);
  for (const cpu::Bf16Gemm kernel : bf16_kernels()) {
    for (const auto& [m, n, k] : {std::array<int64_t, 3>{300, 200, 500}, {40, 700, 129}, {33, 33, 5000}}) {
      SCOPED_TRACE(::testing::Message() << name(kernel) << " " << m << "x" << n << "x" << k);
      const std::vector<uint16_t> a = random_bf16(m * k, &g), b = random_bf16(n * k, &g);
      auto product = [&, m = m, n = n, k = k](int nthreads) {
        set_num_threads(nthreads);
        std::vector<float> c(static_cast<size_t>(m * n));
        cpu::gemm_bf16(kernel, false, true, m, n, k, a.data(), k, b.data(), k, nullptr, c.data(), n);
        return c;
      };
      const std::vector<float> one = product(1), two = product(2);
      set_num_threads(threads);
      EXPECT_EQ(one, two);
    }
  }
}

// A B packed once (PackedBf16B) gives the products gemm_bf16 gives, bit for bit (the same packing
// and sums): both transposes of B at packing, both of A, f32 C written and accumulated, bf16 C,
// tails in every dimension; the pack reused for a second B of another shape; B that do not pack
// as one block are refused, and so are products before any pack.
TEST(Bf16Gemm, PackedBGivesTheSameProducts) {
  if (bf16_kernels().empty()) GTEST_SKIP() << kNoBf16Kernel;
  Generator g(86);
  for (const cpu::Bf16Gemm kernel : bf16_kernels()) {
    cpu::PackedBf16B packed;
    for (const Case& cs : std::vector<Case>{{1, 1, 1}, {17, 33, 31}, {128, 512, 256}, {70, 256, 1024}, {5, 40, 2048}}) {
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        SCOPED_TRACE(::testing::Message() << name(kernel) << " " << cs.m << "x" << cs.n << "x" << cs.k << " ta " << ta << " tb " << tb);
        ASSERT_TRUE(cpu::bf16_b_packs_whole(cs.n, cs.k));
        const int64_t lda = (ta ? cs.m : cs.k) + 3, ldb = (tb ? cs.k : cs.n) + 5, ldc = cs.n + 7;
        const std::vector<uint16_t> a = random_bf16((ta ? cs.k : cs.m) * lda, &g), b = random_bf16((tb ? cs.n : cs.k) * ldb, &g);
        packed.pack(tb, cs.n, cs.k, b.data(), ldb);
        EXPECT_EQ(packed.n(), cs.n);
        EXPECT_EQ(packed.k(), cs.k);
        std::vector<float> want(static_cast<size_t>(cs.m * ldc), 0.5f), got = want;
        std::vector<uint16_t> want16(static_cast<size_t>(cs.m * ldc), 0x7fc1), got16 = want16;
        cpu::gemm_bf16(kernel, ta, tb, cs.m, cs.n, cs.k, a.data(), lda, b.data(), ldb, nullptr, want.data(), ldc);
        cpu::gemm_bf16_packed(kernel, ta, cs.m, a.data(), lda, packed, got.data(), ldc);
        EXPECT_EQ(got, want);
        cpu::gemm_bf16(kernel, ta, tb, cs.m, cs.n, cs.k, a.data(), lda, b.data(), ldb, nullptr, want.data(), ldc, true);
        cpu::gemm_bf16_packed(kernel, ta, cs.m, a.data(), lda, packed, got.data(), ldc, true);
        EXPECT_EQ(got, want);
        cpu::gemm_bf16(kernel, ta, tb, cs.m, cs.n, cs.k, a.data(), lda, b.data(), ldb, nullptr, want16.data(), ldc);
        cpu::gemm_bf16_packed(kernel, ta, cs.m, a.data(), lda, packed, got16.data(), ldc);
        EXPECT_EQ(got16, want16);
      }
    }
    // k beyond one block of k, or more columns than one block of packed B holds at this k.
    EXPECT_FALSE(cpu::bf16_b_packs_whole(64, 2049));
    EXPECT_FALSE(cpu::bf16_b_packs_whole(768, 1024));
    EXPECT_FALSE(cpu::bf16_b_packs_whole(0, 16));
    const std::vector<uint16_t> b = random_bf16(768 * 1024, &g);
    expect_error([&] { packed.pack(false, 768, 1024, b.data(), 768); }, {"PackedBf16B", "1024 x 768", "one block"});
    cpu::PackedBf16B empty;
    float c = 0;
    expect_error([&] { cpu::gemm_bf16_packed(kernel, false, 1, b.data(), 1, empty, &c, 1); }, {"gemm_bf16_packed", "not packed"});
  }
}

// The ops: bf16 matmul (2-D, batched, folded batches, broadcast) and linear (with and without
// bias, 3-D input) on AMX against the f32 path on the same bf16 values: each element within one
// rounding to bf16 (half a unit in the last place, at most 2^-8 of the value) plus the f32 sums'
// bound, and on AMX exactly what the GEMM gives.
TEST(Bf16Gemm, MatmulAndLinearAgreeWithTheF32Path) {
  if (bf16_kernels().empty()) GTEST_SKIP() << kNoBf16Kernel;
  Generator g(83);
  const auto bf = [&](Shape s) { return randn(std::move(s), kF32, &g).to(kBF16); };
  cpu::Bf16Gemm kernel = cpu::Bf16Gemm::None;
  const auto check = [&](const char* what, const std::function<Tensor()>& f, const Tensor& mag) {
    const cpu::Bf16Gemm was = cpu::set_bf16_gemm_kernel_for_testing(cpu::Bf16Gemm::None);
    const Tensor ref = f();
    cpu::set_bf16_gemm_kernel_for_testing(kernel);
    const Tensor got = f();
    cpu::set_bf16_gemm_kernel_for_testing(was);
    ASSERT_EQ(got.dtype(), kBF16) << what;
    ASSERT_EQ(got.sizes(), ref.sizes()) << what;
    const std::vector<double> r = ref.to_vector<double>(), v = got.to_vector<double>(), m = mag.to_vector<double>();
    int bad = 0;
    for (size_t i = 0; i < r.size() && bad < 5; ++i) {
      const double tol = std::ldexp(std::fabs(r[i]), -7) + 1e-6 * m[i];
      if (!(std::fabs(v[i] - r[i]) <= tol))
        ++bad, ADD_FAILURE() << name(kernel) << " " << what << " element " << i << ": " << v[i] << ", f32 path " << r[i];
    }
  };
  for (const cpu::Bf16Gemm k : bf16_kernels()) {
  kernel = k;
  const Tensor a = bf({70, 96}), b = bf({96, 50}), a3 = bf({3, 40, 96}), b3 = bf({3, 96, 20});
  const auto absm = [](const Tensor& x, const Tensor& y) { return matmul(abs(x.to(kF32)), abs(y.to(kF32))); };
  check("mm", [&] { return matmul(a, b); }, absm(a, b));
  check("mm, transposed operands", [&] { return matmul(t(b), t(a)); }, absm(t(b), t(a)));
  check("bmm", [&] { return matmul(a3, b3); }, absm(a3, b3));
  check("batch against one matrix (folded rows)", [&] { return matmul(a3, b); }, absm(a3, b));
  check("broadcast batch", [&] { return matmul(a3, narrow(b3, 0, 0, 1)); }, absm(a3, narrow(b3, 0, 0, 1)));
  const Tensor x = bf({2, 35, 96}), w = bf({50, 96}), bias = bf({50});
  check("linear", [&] { return linear(x, w, Tensor()); }, absm(x, t(w)));
  check("linear with bias", [&] { return linear(x, w, bias); }, add(absm(x, t(w)), abs(bias.to(kF32))));
  }
}

// Under autocast a linear layer's forward and backward run in bf16 (on AMX here): the gradients
// reach the f32 parameters. Against f64 from the same bf16-rounded inputs, the output differs by
// its rounding to bf16 (2^-9 relative) and the f32 sums; the gradients of sum(y^2) by the
// roundings of y, of its gradient 2y and of the product's result: within 2^-7 of the sums of
// the absolute terms.
TEST(Bf16Gemm, AutocastLinearTrainsThroughIt) {
  if (cpu::bf16_gemm_kernel() == cpu::Bf16Gemm::None) GTEST_SKIP() << kNoBf16Kernel;
  Generator g(84);
  const Tensor x = randn({64, 128}, kF32, &g);
  const Tensor w = mul(randn({96, 128}, kF32, &g), 0.1).set_requires_grad(), b = randn({96}, kF32, &g).set_requires_grad();
  Tensor y;
  {
    autocast::Guard guard(kBF16);
    y = linear(x, w, b);
  }
  EXPECT_EQ(y.dtype(), kBF16);
  sum(mul(y.to(kF32), y.to(kF32))).backward();
  const Tensor xd = x.to(kBF16).to(kF64), wd = w.detach().to(kBF16).to(kF64).set_requires_grad();
  const Tensor bd = b.detach().to(kBF16).to(kF64).set_requires_grad();
  const Tensor yd = linear(xd, wd, bd);
  sum(mul(yd, yd)).backward();
  const auto within = [](const char* what, const Tensor& got, const Tensor& want, const Tensor& mag) {
    const std::vector<double> v = got.to_vector<double>(), r = want.to_vector<double>(), m = mag.to_vector<double>();
    int bad = 0;
    for (size_t i = 0; i < v.size() && bad < 5; ++i)
      if (!(std::fabs(v[i] - r[i]) <= std::ldexp(m[i], -7))) ++bad, ADD_FAILURE() << what << " element " << i << ": " << v[i] << ", want " << r[i];
  };
  const Tensor ay = abs(yd.detach());
  within("y", y, yd, add(matmul(abs(xd), t(abs(wd.detach()))), abs(bd.detach())));
  within("the weight's gradient", w.grad(), wd.grad(), mul(matmul(t(ay), abs(xd)), 2.0));
  within("the bias's gradient", b.grad(), bd.grad(), mul(sum(ay, {0}), 2.0));
}

TEST(Bf16Gemm, ABadEnvironmentValueIsReportedByEveryBf16Product) {
  const char* env = std::getenv("TRIDENT_CPU_BF16_GEMM");
  if (env == nullptr || std::string(env) != "on") GTEST_SKIP() << "needs TRIDENT_CPU_BF16_GEMM=on (ctest ops.bf16_gemm_bad_value)";
  const Tensor a = ones({4, 4}).to(kBF16);
  for (int i = 0; i < 2; ++i) {
    try {
      Tensor y = matmul(a, a);
      ADD_FAILURE() << "no error for TRIDENT_CPU_BF16_GEMM=on";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("TRIDENT_CPU_BF16_GEMM=on: expected auto, amx, avx512bf16 or off"), std::string::npos)
          << e.what();
    }
  }
}

// TRIDENT_CPU_BF16_GEMM=off (ctest ops.bf16_gemm_off): bf16 products take the f32 conversion.
TEST(Bf16Gemm, TheEnvironmentTurnsThemOff) {
  const char* env = std::getenv("TRIDENT_CPU_BF16_GEMM");
  if (env == nullptr || std::string(env) != "off") GTEST_SKIP() << "needs TRIDENT_CPU_BF16_GEMM=off (ctest ops.bf16_gemm_off)";
  EXPECT_EQ(cpu::bf16_gemm_kernel(), cpu::Bf16Gemm::None);
}
