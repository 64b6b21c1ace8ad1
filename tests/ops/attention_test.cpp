#include "test_util.h"

#include <limits>

#include "core/profiler.h"
#include "ops/cpu/bgemm_amx.h"

using namespace trident;
using namespace trident::testing;
using autograd::TensorList;

namespace {

// Direct reference in f64: for each batch-head and query row, scores, masked softmax, optional
// dropout (keep decisions drawn from the same Philox positions the contract promises), times v.
// q [BH, Tq, D], k [BH, Tk, D], v [BH, Tk, Dv]; mask_fn(b, i, j) returns the additive mask.
Tensor reference(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal,
                 const std::function<double(int64_t, int64_t, int64_t)>& mask_fn, double p, PhiloxState rng) {
  const int64_t BH = q.size(0), Tq = q.size(1), Tk = k.size(1), D = q.size(2), Dv = v.size(2);
  const auto qv = q.to(kF64).to_vector<double>(), kv = k.to(kF64).to_vector<double>(), vv = v.to(kF64).to_vector<double>();
  std::vector<double> out(static_cast<size_t>(BH * Tq * Dv), 0.0);
  for (int64_t b = 0; b < BH; ++b)
    for (int64_t i = 0; i < Tq; ++i) {
      std::vector<double> s(static_cast<size_t>(Tk));
      double m = -INFINITY;
      for (int64_t j = 0; j < Tk; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += qv[static_cast<size_t>((b * Tq + i) * D + d)] * kv[static_cast<size_t>((b * Tk + j) * D + d)];
        double val = dot * scale + (mask_fn ? mask_fn(b, i, j) : 0.0);
        if (causal && j > i) val = -INFINITY;
        s[static_cast<size_t>(j)] = val;
        m = std::max(m, val);
      }
      if (m == -INFINITY) continue;  // sees nothing: zero output
      double l = 0;
      for (double& x : s) {
        x = std::exp(x - m);
        l += x;
      }
      for (int64_t j = 0; j < Tk; ++j) {
        double w = s[static_cast<size_t>(j)] / l;
        if (p > 0) {
          const auto idx = static_cast<uint64_t>((b * Tq + i) * Tk + j);
          w = philox::uniform_f32_at(rng.seed, rng.offset, idx) >= static_cast<float>(p) ? w / (1 - p) : 0.0;
        }
        for (int64_t d = 0; d < Dv; ++d)
          out[static_cast<size_t>((b * Tq + i) * Dv + d)] += w * vv[static_cast<size_t>((b * Tk + j) * Dv + d)];
      }
    }
  return from_vector<double>(out, {BH, Tq, Dv});
}

}  // namespace

TEST(Attention, MatchesReferenceWithoutMask) {
  Generator g(1);
  for (auto [Tq, Tk] : {std::pair<int64_t, int64_t>{5, 7}, {70, 70}, {130, 3}}) {
    Tensor q = randn({2, 3, Tq, 8}, kF64, &g), k = randn({2, 3, Tk, 8}, kF64, &g), v = randn({2, 3, Tk, 4}, kF64, &g);
    Tensor out = scaled_dot_product_attention(q, k, v);
    EXPECT_EQ(out.sizes(), (Shape{2, 3, Tq, 4}));
    Tensor ref = reference(reshape(q, {6, Tq, 8}), reshape(k, {6, Tk, 8}), reshape(v, {6, Tk, 4}), 1 / std::sqrt(8.0), false,
                           nullptr, 0, {});
    EXPECT_TRUE(all_close(reshape(out, {6, Tq, 4}), ref, 1e-10, 1e-12)) << Tq << "x" << Tk;
  }
}

TEST(Attention, CausalAndCustomScale) {
  Generator g(2);
  Tensor q = randn({4, 100, 16}, kF64, &g), k = randn({4, 100, 16}, kF64, &g), v = randn({4, 100, 16}, kF64, &g);
  AttentionOptions o;
  o.is_causal = true;
  o.scale = 0.3;
  Tensor out = scaled_dot_product_attention(q, k, v, o);
  EXPECT_TRUE(all_close(out, reference(q, k, v, 0.3, true, nullptr, 0, {}), 1e-10, 1e-12));
  // The first query sees only the first key: its output is v's first row.
  const auto ov = out.to_vector<double>(), vv = v.to_vector<double>();
  for (int d = 0; d < 16; ++d) EXPECT_NEAR(ov[static_cast<size_t>(d)], vv[static_cast<size_t>(d)], 1e-14);
}

TEST(Attention, BooleanPaddingMaskAndAdditiveMask) {
  Generator g(3);
  const int64_t B = 2, H = 2, T = 6, D = 4;
  Tensor q = randn({B, H, T, D}, kF64, &g), k = randn({B, H, T, D}, kF64, &g), v = randn({B, H, T, D}, kF64, &g);
  // Key padding: batch 0 sees all 6 keys, batch 1 only the first 4. Shape [B, 1, 1, T].
  std::vector<bool> keep;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < T; ++j) keep.push_back(b == 0 || j < 4);
  AttentionOptions o;
  o.attn_mask = from_vector<bool>(keep, {B, 1, 1, T});
  Tensor out = scaled_dot_product_attention(q, k, v, o);
  auto pad_mask = [&](int64_t bh, int64_t, int64_t j) { return (bh / H == 1 && j >= 4) ? -INFINITY : 0.0; };
  EXPECT_TRUE(all_close(reshape(out, {B * H, T, D}),
                        reference(reshape(q, {B * H, T, D}), reshape(k, {B * H, T, D}), reshape(v, {B * H, T, D}), 0.5, false,
                                  pad_mask, 0, {}),
                        1e-10, 1e-12));
  // An additive mask [T, T] broadcast over batch and heads.
  Tensor add_mask = randn({T, T}, kF64, &g);
  const auto am = add_mask.to_vector<double>();
  AttentionOptions o2;
  o2.attn_mask = add_mask;
  Tensor out2 = scaled_dot_product_attention(q, k, v, o2);
  auto mask_fn = [&](int64_t, int64_t i, int64_t j) { return am[static_cast<size_t>(i * T + j)]; };
  EXPECT_TRUE(all_close(reshape(out2, {B * H, T, D}),
                        reference(reshape(q, {B * H, T, D}), reshape(k, {B * H, T, D}), reshape(v, {B * H, T, D}), 0.5, false,
                                  mask_fn, 0, {}),
                        1e-10, 1e-12));
}

TEST(Attention, FullyMaskedRowsGiveZeros) {
  Generator g(4);
  Tensor q = randn({1, 3, 4}, kF64, &g).set_requires_grad(), k = randn({1, 3, 4}, kF64, &g).set_requires_grad();
  Tensor v = randn({1, 3, 4}, kF64, &g).set_requires_grad();
  AttentionOptions o;
  o.attn_mask = from_vector<bool>({true, true, true, false, false, false, true, false, true}, {3, 3});
  Tensor out = scaled_dot_product_attention(q, k, v, o);
  const auto ov = out.to_vector<double>();
  for (int d = 0; d < 4; ++d) EXPECT_EQ(ov[static_cast<size_t>(4 + d)], 0.0);
  sum(out).backward();
  for (double x : q.grad().to_vector<double>()) EXPECT_TRUE(std::isfinite(x));
  EXPECT_EQ(q.grad().to_vector<double>()[4], 0.0);
}

TEST(Attention, NonContiguousHeadsSplitFromOneTensor) {
  // The usual layout: [B, T, H, D] transposed to [B, H, T, D] without a copy.
  Generator g(5);
  Tensor x = randn({2, 9, 3, 8}, kF64, &g);
  Tensor q = transpose(x, 1, 2), k = transpose(mul(x, 0.5), 1, 2), v = transpose(add(x, 1.0), 1, 2);
  ASSERT_FALSE(q.is_contiguous());
  EXPECT_TRUE(all_close(scaled_dot_product_attention(q, k, v),
                        scaled_dot_product_attention(contiguous(q), contiguous(k), contiguous(v)), 1e-12, 1e-14));
}

// NOTE [Attention in the heads' layout]: q, k and v split from one [B, T, 3 H D] projection as
// GPT-2 splits them ([B, H, T, D] views whose B and H do not fold) go to the kernels as they are;
// the output comes back in the heads' layout, so the merge reshape(transpose(out, 1, 2)) is a
// view, and the gradients of q, k and v likewise; the values are those of contiguous copies bit
// for bit (the same products and sums), with causal, key-padding, additive and dropout masks,
// in f64 and (with a bf16 GEMM kernel) bf16. No copy_ runs in the forward, the merge or the
// backward to q, k and v.
TEST(Attention, HeadsLayoutInAndOutWithoutCopies) {
  const int64_t B = 2, T = 70, H = 3, D = 8;
  std::vector<DType> dtypes{kF64};
  if (!bf16_kernels().empty()) dtypes.push_back(kBF16);
  for (const DType dt : dtypes) {
    for (int variant = 0; variant < 4; ++variant) {  // plain, causal, key padding (bool), additive + dropout
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " variant " << variant);
      Generator g(60 + variant);
      const Tensor x = randn({B, T, 3 * H * D}, kF32, &g).to(dt);
      const std::vector<Tensor> parts = split(x, H * D, 2);
      auto heads = [&](const Tensor& t) { return transpose(view(t, {B, T, H, D}), 1, 2); };
      const Tensor q = heads(parts[0]).detach().set_requires_grad(), k = heads(parts[1]).detach().set_requires_grad(),
                   v = heads(parts[2]).detach().set_requires_grad();
      ASSERT_FALSE(q.is_contiguous());
      const Tensor qc = q.detach().contiguous().set_requires_grad(), kc = k.detach().contiguous().set_requires_grad(),
                   vc = v.detach().contiguous().set_requires_grad();
      AttentionOptions o;
      o.is_causal = variant == 1;
      if (variant == 2) {
        std::vector<uint8_t> keep(static_cast<size_t>(B * T), 1);
        for (int64_t j = 60; j < T; ++j) keep[static_cast<size_t>(T + j)] = 0;  // the second sequence ends at 60
        o.attn_mask = reshape(from_vector<uint8_t>(keep, {B, T}).to(DType::Bool), {B, 1, 1, T});
      }
      Generator dg(70);
      if (variant == 3) {
        o.attn_mask = randn({T, T}, kF32, &g).to(dt);
        o.dropout_p = 0.2;
        o.generator = &dg;
      }
      const Tensor gy = randn({B, T, H * D}, kF32, &g).to(dt);
      const PhiloxState before = dg.state();
      profiler::start();
      const Tensor out = scaled_dot_product_attention(q, k, v, o);
      const Tensor y = reshape(transpose(out, 1, 2), {B, T, H * D});
      const TensorList gr = autograd::grad({y}, {q, k, v}, {gy});
      const profiler::Report report = profiler::stop();
      for (const profiler::OpTime& op : report.ops) EXPECT_NE(op.name, "copy_") << op.calls << " copies";
      EXPECT_TRUE(transpose(out, 1, 2).is_contiguous());
      for (const Tensor& d : gr) EXPECT_TRUE(transpose(d, 1, 2).is_contiguous());
      dg.set_state(before);
      const Tensor out_c = scaled_dot_product_attention(qc, kc, vc, o);
      const TensorList gc = autograd::grad({reshape(transpose(out_c, 1, 2), {B, T, H * D})}, {qc, kc, vc}, {gy});
      EXPECT_EQ(out.to_vector<double>(), out_c.to_vector<double>());
      for (size_t i = 0; i < 3; ++i) EXPECT_EQ(gr[i].to_vector<double>(), gc[i].to_vector<double>()) << "gradient " << i;
    }
  }
  // f64 gradcheck through the split views (dq, dk, dv in the heads' layout on their way back).
  Tensor xl = rand_leaf({2, 5, 3 * 2 * 3}, 57);
  EXPECT_TRUE(grad_ok(gradcheck(
      [](const TensorList& in) {
        const std::vector<Tensor> parts = split(in[0], 6, 2);
        auto heads = [](const Tensor& t) { return transpose(view(t, {2, 5, 2, 3}), 1, 2); };
        AttentionOptions o;
        o.is_causal = true;
        return reshape(transpose(scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), o), 1, 2),
                       {2, 5, 6});
      },
      {xl})));
}

TEST(Attention, DropoutMatchesTheReferenceAndReplays) {
  Generator g(6);
  Tensor q = randn({2, 20, 8}, kF64, &g), k = randn({2, 20, 8}, kF64, &g), v = randn({2, 20, 8}, kF64, &g);
  Generator dg(99);
  AttentionOptions o;
  o.dropout_p = 0.3;
  o.generator = &dg;
  const PhiloxState before = dg.state();
  Tensor out = scaled_dot_product_attention(q, k, v, o);
  EXPECT_TRUE(all_close(out, reference(q, k, v, 1 / std::sqrt(8.0), false, nullptr, 0.3, before), 1e-10, 1e-12));
  Tensor again = scaled_dot_product_attention(q, k, v, o);
  EXPECT_FALSE(all_close(out, again, 1e-6)) << "the generator moved on";
  dg.set_state(before);
  EXPECT_TRUE(all_close(scaled_dot_product_attention(q, k, v, o), out, 0, 0)) << "restored state replays";
}

TEST(Attention, HalfPrecisionComputesInF32) {
  // Without a bf16 GEMM kernel (NOTE [bf16 attention on the CPU]; tests/ops/attention_bf16_test.cpp
  // has the kernels), and for f16 always.
  const cpu::Bf16Gemm before = cpu::set_bf16_gemm_kernel_for_testing(cpu::Bf16Gemm::None);
  Generator g(7);
  Tensor q = randn({2, 5, 8}, kF32, &g), k = randn({2, 5, 8}, kF32, &g), v = randn({2, 5, 8}, kF32, &g);
  Tensor out = scaled_dot_product_attention(q.to(kBF16), k.to(kBF16), v.to(kBF16));
  EXPECT_EQ(out.dtype(), kBF16);
  Tensor ref = scaled_dot_product_attention(q.to(kBF16).to(kF32), k.to(kBF16).to(kF32), v.to(kBF16).to(kF32)).to(kBF16);
  EXPECT_EQ(out.to_vector<float>(), ref.to_vector<float>());
  cpu::set_bf16_gemm_kernel_for_testing(before);
  Tensor out16 = scaled_dot_product_attention(q.to(DType::F16), k.to(DType::F16), v.to(DType::F16));
  EXPECT_EQ(out16.dtype(), DType::F16);
  Tensor ref16 =
      scaled_dot_product_attention(q.to(DType::F16).to(kF32), k.to(DType::F16).to(kF32), v.to(DType::F16).to(kF32)).to(DType::F16);
  EXPECT_EQ(out16.to_vector<float>(), ref16.to_vector<float>());
}

TEST(Attention, ErrorsNameTheShapes) {
  const auto msg = error_message;
  const std::string m1 = msg([] { scaled_dot_product_attention(zeros({2, 4, 8}), zeros({2, 4, 6}), zeros({2, 4, 8})); });
  EXPECT_NE(m1.find("[2, 4, 6]"), std::string::npos) << m1;
  const std::string m2 = msg([] { scaled_dot_product_attention(zeros({2, 4, 8}), zeros({3, 4, 8}), zeros({3, 4, 8})); });
  EXPECT_NE(m2.find("[3, 4, 8]"), std::string::npos) << m2;
  AttentionOptions o;
  o.attn_mask = zeros({5, 5}, kBool);
  const std::string m3 = msg([&] { scaled_dot_product_attention(zeros({2, 4, 8}), zeros({2, 4, 8}), zeros({2, 4, 8}), o); });
  EXPECT_NE(m3.find("[5, 5]"), std::string::npos) << m3;
  o.attn_mask = zeros({4, 4}, kF64);
  EXPECT_THROW(scaled_dot_product_attention(zeros({2, 4, 8}), zeros({2, 4, 8}), zeros({2, 4, 8}), o), Error);
  AttentionOptions d;
  d.dropout_p = 1.0;
  EXPECT_THROW(scaled_dot_product_attention(zeros({2, 4, 8}), zeros({2, 4, 8}), zeros({2, 4, 8}), d), Error);
}

TEST(AttentionGradcheck, QueryKeyValueAndMask) {
  uint64_t seed = 40;
  for (bool causal : {false, true}) {
    Tensor q = rand_leaf({2, 5, 3}, seed++), k = rand_leaf({2, 4, 3}, seed++), v = rand_leaf({2, 4, 2}, seed++);
    if (causal) {
      k = rand_leaf({2, 5, 3}, seed++);
      v = rand_leaf({2, 5, 2}, seed++);
    }
    AttentionOptions o;
    o.is_causal = causal;
    EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& x) { return scaled_dot_product_attention(x[0], x[1], x[2], o); },
                                  {q, k, v})))
        << "causal " << causal;
  }
  // An additive mask that broadcasts over the batch, with its own gradient.
  Tensor q = rand_leaf({2, 4, 3}, 50), k = rand_leaf({2, 4, 3}, 51), v = rand_leaf({2, 4, 3}, 52), m = rand_leaf({4, 4}, 53);
  EXPECT_TRUE(grad_ok(gradcheck(
      [](const TensorList& x) {
        AttentionOptions o;
        o.attn_mask = x[3];
        return scaled_dot_product_attention(x[0], x[1], x[2], o);
      },
      {q, k, v, m})));
  // Dropout: the same generator state on every call, so the mask is fixed.
  EXPECT_TRUE(grad_ok(gradcheck(
      [](const TensorList& x) {
        Generator dg(7);
        AttentionOptions o;
        o.dropout_p = 0.25;
        o.generator = &dg;
        return scaled_dot_product_attention(x[0], x[1], x[2], o);
      },
      {q, k, v})));
  // Non-contiguous inputs and more query rows than one block (64).
  Tensor ql = rand_leaf_transposed({3, 70, 1}, 54), kl = rand_leaf({1, 6, 3}, 55), vl = rand_leaf({1, 6, 2}, 56);
  Tensor q3 = permute(ql, {2, 1, 0}).detach().set_requires_grad();
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); },
                                {q3, kl, vl})));
}
