// bf16 attention on the CPU's bf16 GEMM kernels (NOTE [bf16 attention on the CPU]): the kernels
// against the CPU kernels in f64 on the same bf16 values, over the cases of the CUDA suite (masks,
// dropout, causal with Tq != Tk, rows that see no key, padded rows, shared k and v, odd head
// dims), on every kernel the CPU has and on 1 and 3 threads; then scaled_dot_product_attention
// taking them for bf16 tensors and under autocast. On a CPU with neither AMX nor AVX512-BF16 they
// skip, saying so.
#include <cmath>
#include <vector>

#include "attention_cases.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/bgemm_amx.h"
#include "test_util.h"

using namespace trident;
using namespace trident::testing;

namespace {

// lse is f32 (as on CUDA) from f32 sums of at most 128 exact products and an f32 logarithm.
constexpr double kLseTolerance = 1e-6;
// dQ, dK and dmask by relative error: dS = P (dP - Delta) carries the rounding of O (through
// Delta) and of scale dS, the result its own: three roundings of 2^-9, with room for the
// cancellation in dP - Delta (measured on these cases: 2.2e-3 to 3.8e-3; the CUDA suite allows
// bf16 3e-2).
constexpr double kGradTolerance = 1.0 / 128;

// The results that are one rounding of an f32 sum of terms which were themselves rounded to bf16
// once (O = sum_j P_j V_j, dV = sum_r P_rj dO_r, P rounded): each element within 2^-8 (twice
// bf16's unit roundoff 2^-9; the f32 sums and exponentials add about 1e-5 of it) of the
// magnitude of its terms plus that of the result.
::testing::AssertionResult within_two_roundings(const Tensor& got, const Tensor& ref, const Tensor& magnitude) {
  constexpr double kUBF16 = 1.0 / 256;
  if (got.sizes() != ref.sizes()) return ::testing::AssertionFailure() << "shapes differ";
  const std::vector<double> g = got.to_vector<double>(), r = ref.to_vector<double>(), m = magnitude.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    const double tol = kUBF16 * (m[i] + std::fabs(r[i])) + 1e-30;
    if (!(std::fabs(g[i] - r[i]) <= tol))
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << r[i] << " (tolerance " << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

const std::vector<AttentionCase> kCases = {
    {"tiny_d32", 3, 17, 17, 32, 32},
    {"one_query", 2, 1, 200, 64, 64},
    {"causal_d64_t200", 2, 200, 200, 64, 64, true},
    {"padding_d64_t150", 3, 150, 150, 64, 64, false, MaskKind::Padding},  // head 0 sees no key: zero rows
    {"causal_fewer_queries_d80", 2, 130, 200, 80, 80, true},
    {"causal_more_queries_d128", 2, 200, 70, 128, 128, true},
    {"additive_dmask_d128", 2, 100, 150, 128, 128, false, MaskKind::Additive, 0.0, 0, true},
    {"additive_broadcast_causal_d64", 3, 77, 77, 64, 64, true, MaskKind::AdditiveBroadcast},
    {"dropout_causal_d64", 2, 200, 200, 64, 64, true, MaskKind::None, 0.1},
    {"dropout_padding_d48", 3, 130, 120, 48, 48, false, MaskKind::Padding, 0.1},
    {"dropout_additive_dmask_d32", 2, 65, 66, 32, 32, false, MaskKind::Additive, 0.1, 0, true},
    {"strided_dv_differs", 2, 100, 90, 64, 32, false, MaskKind::None, 0.0, 5},
    {"dv_wider_than_d", 2, 70, 70, 32, 128, true},
    {"odd_head_dims", 2, 33, 31, 5, 7},  // head dims that are not whole 32-value steps of the kernels
    {"shared_kv_d64", 3, 70, 90, 64, 64, true, MaskKind::None, 0.0, 0, false, true},
    {"five_keys_d64", 2, 150, 5, 64, 64, false, MaskKind::AdditiveBroadcast},
};

// The case's bf16 inputs through the bf16 kernels, against the f64 kernels on the same values:
// O and dV element by element within two roundings (the magnitudes: the reference on |v| and
// |dout|, whose O and dV are sum_j P_j |V_j| and sum_r P_rj |dO_r|); lse within f32's error; dQ,
// dK and dmask (through dS = P (dP - Delta), with Delta from the rounded O, and scale dS rounded)
// by relative error within kGradTolerance.
void check_case(const AttentionCase& c, uint64_t seed) {
  const AttentionInputs in = draw_attention_inputs(c, kBF16, seed);
  const AttentionReference ref = attention_reference(c, in);
  AttentionInputs abs_in = in;
  abs_in.v = abs(in.v);
  abs_in.dout = abs(in.dout);
  const AttentionReference mag = attention_reference(c, abs_in);

  const Tensor q = attention_view(c, in.q, c.D), k = attention_view(c, in.k, c.D), v = attention_view(c, in.v, c.Dv);
  const Tensor dout = attention_view(c, in.dout, c.Dv), mask = attention_mask_view(c, in.mask);
  Tensor lse;
  const Tensor out = cpu::attention_forward(q, k, v, mask, in.params, lse);
  ASSERT_EQ(out.dtype(), kBF16);
  ASSERT_EQ(lse.dtype(), kF32);
  EXPECT_TRUE(within_two_roundings(out, ref.out, mag.out)) << "out";
  EXPECT_LE(relative_error(lse, ref.lse), kLseTolerance) << "lse";

  const cpu::AttentionGrads g = cpu::attention_backward(dout, q, k, v, mask, out, lse, in.params, c.want_dmask);
  ASSERT_EQ(g.dq.dtype(), kBF16);
  EXPECT_TRUE(within_two_roundings(g.dv, ref.grads.dv, mag.grads.dv)) << "dv";
  const double tol = kGradTolerance;
  EXPECT_LE(relative_error(g.dq, ref.grads.dq), tol) << "dq";
  EXPECT_LE(relative_error(g.dk, ref.grads.dk), tol) << "dk";
  ASSERT_EQ(g.dmask.defined(), c.want_dmask);
  if (c.want_dmask) {
    EXPECT_LE(relative_error(g.dmask, ref.grads.dmask), tol) << "dmask";
  }
}

// Runs f(kernel) on every bf16 kernel the CPU has, that kernel chosen for the process.
template <typename F>
void on_every_kernel(const F& f) {
  for (const cpu::Bf16Gemm kernel : bf16_kernels()) {
    SCOPED_TRACE(kernel == cpu::Bf16Gemm::Amx ? "AMX" : "AVX512-BF16");
    const cpu::Bf16Gemm before = cpu::set_bf16_gemm_kernel_for_testing(kernel);
    f(kernel);
    cpu::set_bf16_gemm_kernel_for_testing(before);
  }
}

// Every output of the kernels for one case, as floats.
std::vector<std::vector<float>> kernel_results(const AttentionCase& c, uint64_t seed) {
  const AttentionInputs in = draw_attention_inputs(c, kBF16, seed);
  const Tensor q = attention_view(c, in.q, c.D), k = attention_view(c, in.k, c.D), v = attention_view(c, in.v, c.Dv);
  const Tensor mask = attention_mask_view(c, in.mask);
  Tensor lse;
  const Tensor out = cpu::attention_forward(q, k, v, mask, in.params, lse);
  const cpu::AttentionGrads g =
      cpu::attention_backward(attention_view(c, in.dout, c.Dv), q, k, v, mask, out, lse, in.params, c.want_dmask);
  std::vector<std::vector<float>> r = {out.to_vector<float>(), lse.to_vector<float>(), g.dq.to_vector<float>(),
                                       g.dk.to_vector<float>(), g.dv.to_vector<float>()};
  if (c.want_dmask) r.push_back(g.dmask.to_vector<float>());
  return r;
}

}  // namespace

TEST(AttentionBf16, MatchesTheF64KernelsOnTheSameValues) {
  if (bf16_kernels().empty()) GTEST_SKIP() << kNoBf16Kernel;
  const int threads_before = get_num_threads();
  on_every_kernel([&](cpu::Bf16Gemm) {
    for (int threads : {1, 3}) {
      set_num_threads(threads);
      uint64_t seed = 9100;
      for (const AttentionCase& c : kCases) {
        SCOPED_TRACE(c.name + ", " + std::to_string(threads) + " threads");
        check_case(c, seed++);
      }
    }
  });
  set_num_threads(threads_before);
}

TEST(AttentionBf16, DoesNotDependOnTheThreads) {
  if (bf16_kernels().empty()) GTEST_SKIP() << kNoBf16Kernel;
  const int threads_before = get_num_threads();
  on_every_kernel([&](cpu::Bf16Gemm) {
    uint64_t seed = 9200;
    for (const AttentionCase& c : kCases) {
      SCOPED_TRACE(c.name);
      set_num_threads(1);
      const auto one = kernel_results(c, seed);
      set_num_threads(3);
      const auto three = kernel_results(c, seed);
      ++seed;
      ASSERT_EQ(one.size(), three.size());
      for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i], three[i]) << "result " << i;
    }
  });
  set_num_threads(threads_before);
}

TEST(AttentionBf16, ScaledDotProductAttentionTakesTheKernelsForBf16) {
  // bf16 leaves through the op and autograd: the kernels' own results, bit for bit (so no f32
  // copies in between), a bf16 additive mask's gradient included; and under autocast, f32 inputs
  // come out as the kernels' bf16 output.
  if (bf16_kernels().empty()) GTEST_SKIP() << kNoBf16Kernel;
  on_every_kernel([&](cpu::Bf16Gemm) {
    Generator g(9300);
    const Tensor q = randn({2, 3, 70, 64}, kF32, &g).to(kBF16), k = randn({2, 3, 90, 64}, kF32, &g).to(kBF16),
                 v = randn({2, 3, 90, 32}, kF32, &g).to(kBF16), m = randn({70, 90}, kF32, &g).to(kBF16);
    Tensor ql = q.clone().set_requires_grad(), kl = k.clone().set_requires_grad(), vl = v.clone().set_requires_grad(),
           ml = m.clone().set_requires_grad();
    AttentionOptions o;
    o.attn_mask = ml;
    Tensor out = scaled_dot_product_attention(ql, kl, vl, o);
    ASSERT_EQ(out.dtype(), kBF16);
    const Tensor gy = randn(out.sizes(), kF32, &g).to(kBF16);
    out.backward(gy);

    cpu::AttentionParams p;
    p.scale = 1.0 / 8.0;
    const Tensor mb = expand(m, {6, 70, 90});
    Tensor lse;
    const Tensor want = cpu::attention_forward(reshape(q, {6, 70, 64}), reshape(k, {6, 90, 64}), reshape(v, {6, 90, 32}), mb, p, lse);
    const cpu::AttentionGrads gw = cpu::attention_backward(reshape(gy, {6, 70, 32}), reshape(q, {6, 70, 64}), reshape(k, {6, 90, 64}),
                                                           reshape(v, {6, 90, 32}), mb, want, lse, p, true);
    EXPECT_EQ(out.to_vector<float>(), want.to_vector<float>());
    EXPECT_EQ(ql.grad().dtype(), kBF16);
    EXPECT_EQ(ql.grad().to_vector<float>(), gw.dq.to_vector<float>());
    EXPECT_EQ(kl.grad().to_vector<float>(), gw.dk.to_vector<float>());
    EXPECT_EQ(vl.grad().to_vector<float>(), gw.dv.to_vector<float>());
    EXPECT_EQ(ml.grad().dtype(), kBF16);
    EXPECT_EQ(ml.grad().to_vector<float>(), sum(gw.dmask.to(kF64), {0}).to(kBF16).to_vector<float>());

    autocast::Guard on(kBF16);
    const Tensor auto_out = scaled_dot_product_attention(q.to(kF32), k.to(kF32), v.to(kF32));
    Tensor lse2;
    const Tensor auto_want =
        cpu::attention_forward(reshape(q, {6, 70, 64}), reshape(k, {6, 90, 64}), reshape(v, {6, 90, 32}), Tensor(), p, lse2);
    EXPECT_EQ(auto_out.dtype(), kBF16);
    EXPECT_EQ(auto_out.to_vector<float>(), auto_want.to_vector<float>());
  });
}

TEST(AttentionBf16, TheKernelsNameWhatTheyCannotTake) {
  // An additive mask of another dtype (the op checks it first; the kernels do not misread it),
  // and no bf16 GEMM kernel chosen.
  if (bf16_kernels().empty()) GTEST_SKIP() << kNoBf16Kernel;
  const Tensor q = zeros({2, 4, 8}, kBF16);
  Tensor lse;
  expect_error([&] { cpu::attention_forward(q, q, q, zeros({2, 4, 4}, kF32), cpu::AttentionParams{}, lse); },
               {"mask must be bool or bf16", "f32"});
  const cpu::Bf16Gemm before = cpu::set_bf16_gemm_kernel_for_testing(cpu::Bf16Gemm::None);
  expect_error([&] { cpu::attention_forward(q, q, q, Tensor(), cpu::AttentionParams{}, lse); }, {"needs a bf16 GEMM kernel"});
  cpu::set_bf16_gemm_kernel_for_testing(before);
}
