// The CUDA fused attention (ops/cuda/attention.h) against the CPU kernels run in f64 on the same
// (rounded) inputs: output, lse, dq, dk, dv (and dmask) for f32, f16 and bf16; head dims 32, 64,
// 80, 128 and unequal q/v dims; lengths that are not multiples of the 64-row tile, Tq != Tk,
// causal, additive and boolean padding masks, dropout with the CPU's keep mask, operands with
// padded rows and k/v shared by every head; then
// scaled_dot_product_attention end to end on CUDA tensors. f16/bf16 with head dims 64 and 128
// take the tensor-core kernels, and run once more with them off. Every device allocation is poisoned
// with NaN, so an output element a kernel forgets to write fails. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "attention_cases.h"
#include "core/cuda/allocator.h"
#include "cuda/cuda_test_util.h"
#include "ops/cpu/attention.h"
#include "ops/cuda/attention.h"
#include "test_util.h"

using namespace trident;

namespace {

const Device kGPU = Device::cuda(0);
using trident::testing::relative_error;

// Tolerances on the relative error against f64. The kernels compute in f32 from the same inputs,
// so f16 and bf16 differ from f64 mostly by the final rounding of each output (2^-11, 2^-8:
// the cross-backend suite's bounds); f32 by f32 sums over up to ~1000 keys or queries, plus the
// cancellation in dP - Delta for the gradients. lse is f32 for every input dtype.
double tolerance(DType dt, bool backward) { return trident::testing::f64_reference_tolerance(dt, backward); }
constexpr double kLseTolerance = 2e-5;

using Case = trident::testing::AttentionCase;
using trident::testing::MaskKind;

std::vector<Case> cases() {
  return {
      {"tiny_d32", 3, 17, 17, 32, 32},
      {"one_query", 2, 1, 200, 64, 64},
      {"causal_d64_t200", 2, 200, 200, 64, 64, true},
      {"causal_d128_t1030", 2, 1030, 1030, 128, 128, true},
      {"padding_d64_t1030", 2, 1030, 1030, 64, 64, false, MaskKind::Padding},
      {"causal_fewer_queries_d80", 2, 130, 200, 80, 80, true},
      {"causal_more_queries_d128", 2, 200, 70, 128, 128, true},
      {"additive_dmask_d128", 2, 100, 150, 128, 128, false, MaskKind::Additive, 0.0, false, true},
      {"additive_broadcast_causal_d64", 3, 77, 77, 64, 64, true, MaskKind::AdditiveBroadcast},
      {"dropout_causal_d64", 2, 200, 200, 64, 64, true, MaskKind::None, 0.1},
      {"dropout_padding_d128", 2, 130, 300, 128, 128, false, MaskKind::Padding, 0.1},
      {"dropout_additive_dmask_d32", 2, 65, 66, 32, 32, false, MaskKind::Additive, 0.1, false, true},
      {"strided_dv_differs", 2, 100, 90, 64, 32, false, MaskKind::None, 0.0, 5},
      {"dv_wider_than_d", 2, 70, 70, 32, 128, true},
      // Cases for the tensor-core kernels' own paths (f16/bf16): rows 8 elements wider stay
      // 16-byte aligned, so the kernels read them through their row strides (dout included);
      // causal with fewer queries than keys (key tiles no query sees); dropout with dmask in the
      // dQ kernel; a single partial key tile; k and v shared by every head (batch stride 0).
      {"strided_aligned_d64", 3, 100, 130, 64, 64, false, MaskKind::Additive, 0.0, 8},
      {"strided_aligned_causal_dropout_d128", 2, 90, 90, 128, 128, true, MaskKind::None, 0.1, 8},
      {"causal_fewer_queries_d64", 2, 130, 200, 64, 64, true},
      {"dropout_additive_dmask_d64", 2, 65, 66, 64, 64, false, MaskKind::Additive, 0.1, 0, true},
      {"dropout_additive_dmask_causal_d128", 2, 140, 100, 128, 128, true, MaskKind::Additive, 0.1, 0, true},
      {"five_keys_d128", 2, 150, 5, 128, 128, false, MaskKind::AdditiveBroadcast},
      {"shared_kv_d64", 3, 70, 90, 64, 64, true, MaskKind::None, 0.0, 0, false, true},
      // Whole key tiles without a mask: the forward kernel's tiles without per-element checks,
      // and double-buffered tiles over several stages in both backward passes.
      {"unmasked_d128_k192", 2, 96, 192, 128, 128},
      {"unmasked_dropout_d64_k256", 1, 130, 256, 64, 64, false, MaskKind::None, 0.1},
  };
}

void check_case(const Case& c, DType dt, uint64_t seed) {
  // Operands as [BH, T, d] views of [BH, T, d + pad] rows when padded (k and v: of one head
  // expanded to all when shared); the same values and layout on both sides.
  const trident::testing::AttentionInputs in = trident::testing::draw_attention_inputs(c, dt, seed);
  const trident::testing::AttentionReference ref = trident::testing::attention_reference(c, in);
  const Tensor& out_ref = ref.out;
  const Tensor& lse_ref = ref.lse;
  const cpu::AttentionGrads& g_ref = ref.grads;
  const cpu::AttentionParams& p = in.params;
  const auto view = [&](const Tensor& base, int64_t d) { return trident::testing::attention_view(c, base, d); };
  const Tensor &qb = in.q, &kb = in.k, &vb = in.v, &doutb = in.dout, &ms = in.mask;
  const Shape scores{c.BH, c.Tq, c.Tk};

  const Tensor qd = view(qb.to(kGPU), c.D), kd = view(kb.to(kGPU), c.D), vd = view(vb.to(kGPU), c.Dv);
  const Tensor doutd = view(doutb.to(kGPU), c.Dv);
  const Tensor md = ms.defined() ? expand(ms.to(kGPU), scores) : Tensor();
  if (c.pad) {
    ASSERT_EQ(qd.stride(1), c.D + c.pad);
    ASSERT_EQ(doutd.stride(1), c.Dv + c.pad);
  }
  if (c.shared_kv) {
    ASSERT_EQ(kd.stride(0), 0);
  }
  Tensor lse;
  const Tensor out = cuda::attention_forward(qd, kd, vd, md, p, lse);
  ASSERT_EQ(out.device(), kGPU);
  ASSERT_EQ(out.sizes(), out_ref.sizes());
  EXPECT_EQ(out.dtype(), dt);
  EXPECT_EQ(lse.dtype(), DType::F32);
  EXPECT_LE(relative_error(out, out_ref), tolerance(dt, false)) << "out";
  EXPECT_LE(relative_error(lse, lse_ref), kLseTolerance) << "lse";

  const cpu::AttentionGrads gd = cuda::attention_backward(doutd, qd, kd, vd, md, out, lse, p, c.want_dmask);
  EXPECT_LE(relative_error(gd.dq, g_ref.dq), tolerance(dt, true)) << "dq";
  EXPECT_LE(relative_error(gd.dk, g_ref.dk), tolerance(dt, true)) << "dk";
  EXPECT_LE(relative_error(gd.dv, g_ref.dv), tolerance(dt, true)) << "dv";
  EXPECT_EQ(gd.dmask.defined(), c.want_dmask);
  if (c.want_dmask) {
    EXPECT_LE(relative_error(gd.dmask, g_ref.dmask), tolerance(dt, true)) << "dmask";
  }
}

class CudaAttention : public trident::testing::PoisonedCuda<::testing::TestWithParam<DType>> {};

TEST_P(CudaAttention, MatchesTheCpuInF64) {
  const DType dt = GetParam();
  uint64_t seed = 500 + static_cast<uint64_t>(dt) * 100;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name + " in " + std::string(dtype_name(dt)));
    try {
      check_case(c, dt, seed++);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw: " << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaAttention, ::testing::Values(DType::F32, DType::F16, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

// The f16/bf16 cases with head dims 64 and 128 above run on the tensor cores (NOTE [Tensor-core
// attention]); the same cases again on the f32 FMA kernels, which f16/bf16 take otherwise.
class TensorCoresOff {
 public:
  TensorCoresOff() : was_(cuda::attention_tensor_cores()) { cuda::set_attention_tensor_cores(false); }
  ~TensorCoresOff() { cuda::set_attention_tensor_cores(was_); }

 private:
  bool was_;
};

class CudaAttentionFma : public trident::testing::PoisonedCuda<::testing::TestWithParam<DType>> {};

TEST_P(CudaAttentionFma, MatchesTheCpuInF64WithTensorCoresOff) {
  const DType dt = GetParam();
  const TensorCoresOff off;
  uint64_t seed = 900 + static_cast<uint64_t>(dt) * 100;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name + " in " + std::string(dtype_name(dt)) + ", tensor cores off");
    try {
      check_case(c, dt, seed++);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw: " << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaAttentionFma, ::testing::Values(DType::F16, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

// Which operands the tensor-core kernels take: the cases above only test them if it is these.
TEST(CudaAttentionTensorCores, TakeF16AndBf16WithHeadDims64And128) {
  TRIDENT_REQUIRE_CUDA();
  const auto t = [](DType dt, int64_t d, int64_t pad = 0) {
    const Tensor base = zeros({2, 70, d + pad}, TensorOptions(dt).device(kGPU));
    return pad ? narrow(base, 2, 0, d) : base;
  };
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  const bool tc = major >= 8;
  for (DType dt : {kBF16, DType::F16}) {
    for (int64_t d : {64, 128}) {
      const Tensor x = t(dt, d);
      EXPECT_EQ(cuda::attention_mma_supported(x, x, x), tc) << dtype_name(dt) << " d " << d;
      EXPECT_EQ(cuda::attention_mma_supported(x, x, t(dt, d, 8)), tc) << "rows of d + 8: still 16-byte aligned";
      EXPECT_FALSE(cuda::attention_mma_supported(x, x, t(dt, d, 5))) << "rows of d + 5 elements: unaligned";
      {
        const TensorCoresOff off;
        EXPECT_FALSE(cuda::attention_mma_supported(x, x, x));
      }
    }
    const Tensor d80 = t(dt, 80), d64 = t(dt, 64), d32 = t(dt, 32);
    EXPECT_FALSE(cuda::attention_mma_supported(d80, d80, d80));
    EXPECT_FALSE(cuda::attention_mma_supported(d64, d64, d32)) << "Dv != D";
  }
  const Tensor f = t(kF32, 64);
  EXPECT_FALSE(cuda::attention_mma_supported(f, f, f));
}

// The backward has no float atomics: two runs give the same bits.
TEST(CudaAttentionDeterminism, BackwardIsBitwiseRepeatable) {
  TRIDENT_REQUIRE_CUDA();
  Generator g(77);
  const auto r = [&](const Shape& s) { return randn(s, kF64, &g).to(kBF16).to(kGPU); };
  const Tensor q = r({4, 300, 64}), k = r({4, 300, 64}), v = r({4, 300, 64}), dout = r({4, 300, 64});
  cpu::AttentionParams p;
  p.scale = 0.125;
  p.causal = true;
  p.dropout_p = 0.1;
  p.rng = {5, 0};
  Tensor lse;
  const Tensor out = cuda::attention_forward(q, k, v, Tensor(), p, lse);
  const cpu::AttentionGrads a = cuda::attention_backward(dout, q, k, v, Tensor(), out, lse, p, false);
  const cpu::AttentionGrads b = cuda::attention_backward(dout, q, k, v, Tensor(), out, lse, p, false);
  EXPECT_EQ(a.dq.to(kCPU).to_vector<float>(), b.dq.to(kCPU).to_vector<float>());
  EXPECT_EQ(a.dk.to(kCPU).to_vector<float>(), b.dk.to(kCPU).to_vector<float>());
  EXPECT_EQ(a.dv.to(kCPU).to_vector<float>(), b.dv.to(kCPU).to_vector<float>());
}

// A gradient of out whose layout the tensor-core loads cannot take (stride 0 everywhere as
// sum(out) gives, stride 0 along the head dim, transposed, rows of an odd width) is copied
// first, so it takes the same kernels as its contiguous copy: the same bits (the backward is
// deterministic; the tensor-core and FMA kernels round differently, so a silent fall back to
// FMA for f16/bf16 shows), and the CPU's gradients within the usual tolerance.
TEST(CudaAttentionStridedDout, TakesTheSameKernelsAsItsContiguousCopy) {
  TRIDENT_REQUIRE_CUDA();
  const int64_t BH = 3, Tq = 100, Tk = 90;
  for (DType dt : {DType::F16, kBF16, kF32}) {
    for (int64_t D : {64, 128}) {
      Generator g(static_cast<uint64_t>(D) + static_cast<uint64_t>(dt));
      const auto r = [&](const Shape& s) { return randn(s, kF64, &g).to(dt); };
      const Tensor q = r({BH, Tq, D}), k = r({BH, Tk, D}), v = r({BH, Tk, D});
      // On the device in their odd layouts (a transfer makes a contiguous copy).
      const Tensor row_scale = r({BH, Tq, 1}).to(kGPU), dout_t = r({BH, D, Tq}).to(kGPU),
                   dout_wide = r({BH, Tq, D + 3}).to(kGPU);
      const std::vector<std::pair<std::string, Tensor>> douts = {
          {"ones expanded", expand(ones({1, 1, 1}, TensorOptions(dt).device(kGPU)), {BH, Tq, D})},
          {"stride 0 along the head dim", expand(row_scale, {BH, Tq, D})},
          {"transposed", transpose(dout_t, 1, 2)},
          {"rows of D + 3", narrow(dout_wide, 2, 0, D)},
      };
      cpu::AttentionParams p;
      p.scale = 1.0 / std::sqrt(static_cast<double>(D));
      p.causal = true;
      Tensor lse_ref;
      const Tensor out_ref = cpu::attention_forward(q.to(kF64), k.to(kF64), v.to(kF64), Tensor(), p, lse_ref);
      const Tensor qd = q.to(kGPU), kd = k.to(kGPU), vd = v.to(kGPU);
      Tensor lse;
      const Tensor out = cuda::attention_forward(qd, kd, vd, Tensor(), p, lse);
      for (const auto& [name, doutd] : douts) {
        SCOPED_TRACE(name + " in " + std::string(dtype_name(dt)) + ", D " + std::to_string(D));
        ASSERT_TRUE(doutd.stride(2) != 1 || doutd.stride(1) == D + 3) << "not the odd layout";
        const cpu::AttentionGrads ref =
            cpu::attention_backward(doutd.to(kCPU).to(kF64), q.to(kF64), k.to(kF64), v.to(kF64), Tensor(), out_ref, lse_ref, p, false);
        const cpu::AttentionGrads got = cuda::attention_backward(doutd, qd, kd, vd, Tensor(), out, lse, p, false);
        const cpu::AttentionGrads same = cuda::attention_backward(doutd.contiguous(), qd, kd, vd, Tensor(), out, lse, p, false);
        EXPECT_LE(relative_error(got.dq, ref.dq), tolerance(dt, true)) << "dq";
        EXPECT_LE(relative_error(got.dk, ref.dk), tolerance(dt, true)) << "dk";
        EXPECT_LE(relative_error(got.dv, ref.dv), tolerance(dt, true)) << "dv";
        EXPECT_EQ(got.dq.to(kCPU).to_vector<float>(), same.dq.to(kCPU).to_vector<float>()) << "dq";
        EXPECT_EQ(got.dk.to(kCPU).to_vector<float>(), same.dk.to(kCPU).to_vector<float>()) << "dk";
        EXPECT_EQ(got.dv.to(kCPU).to_vector<float>(), same.dv.to(kCPU).to_vector<float>()) << "dv";
      }
    }
  }
}

// End to end: sum(out).backward() (its gradient is a ones scalar expanded, stride 0) gives the
// same bits as backward from a contiguous ones gradient, and the CPU's values.
TEST(CudaAttentionStridedDout, SumOfTheOutputMatchesAContiguousGradient) {
  TRIDENT_REQUIRE_CUDA();
  Generator g(4242);
  const int64_t B = 2, H = 3, T = 77, D = 64;
  const Tensor q = randn({B, H, T, D}, kF64, &g).to(kBF16), k = randn({B, H, T, D}, kF64, &g).to(kBF16),
               v = randn({B, H, T, D}, kF64, &g).to(kBF16);
  const auto run = [&](Device dev, DType compute, bool through_sum) {
    const auto leaf = [&](const Tensor& x) { return x.to(compute).to(dev).detach().set_requires_grad(); };
    Tensor qq = leaf(q), kk = leaf(k), vv = leaf(v);
    AttentionOptions o;
    o.is_causal = true;
    const Tensor out = scaled_dot_product_attention(qq, kk, vv, o);
    if (through_sum) {
      sum(out).backward();
    } else {
      out.backward(ones(out.sizes(), TensorOptions(compute).device(dev)));
    }
    return std::vector<Tensor>{qq.grad(), kk.grad(), vv.grad()};
  };
  const std::vector<Tensor> ref = run(kCPU, kF64, true);
  const std::vector<Tensor> got = run(kGPU, kBF16, true);
  const std::vector<Tensor> same = run(kGPU, kBF16, false);
  const char* names[] = {"dq", "dk", "dv"};
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(got[i].defined() && same[i].defined()) << names[i];
    EXPECT_LE(relative_error(got[i], ref[i]), tolerance(kBF16, true)) << names[i];
    EXPECT_EQ(got[i].to(kCPU).to_vector<float>(), same[i].to(kCPU).to_vector<float>()) << names[i];
  }
}

// The public op on CUDA tensors [B, H, T, D]: forward and gradients of q, k, v (and of an
// additive mask that requires grad) against the same op on the CPU, from the same values and
// the same generator state (so dropout drops the same entries).
void check_public_api(DType dt, double dropout, bool bool_mask) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + (bool_mask ? " bool mask" : " additive mask") +
               (dropout > 0 ? " dropout" : ""));
  Generator g(31);
  const int64_t B = 2, H = 3, T = 77, D = 64;
  const Tensor q = randn({B, H, T, D}, kF64, &g).to(dt), k = randn({B, H, T, D}, kF64, &g).to(dt),
               v = randn({B, H, T, D}, kF64, &g).to(dt), w = randn({B, H, T, D}, kF64, &g).to(dt);
  Tensor mask;
  if (bool_mask) {
    std::vector<uint8_t> keep(static_cast<size_t>(B * T), 1);
    for (int64_t j = T - 20; j < T; ++j) keep[static_cast<size_t>(T + j)] = 0;  // batch 1: 20 padded keys
    mask = from_vector<uint8_t>(keep, {B, 1, 1, T}).to(DType::Bool);
  } else {
    mask = mul(randn({1, H, T, T}, kF64, &g), 0.5).to(dt);
  }
  const auto run = [&](Device dev, DType compute) {
    const auto leaf = [&](const Tensor& x) { return x.to(compute).to(dev).detach().set_requires_grad(); };
    Tensor qq = leaf(q), kk = leaf(k), vv = leaf(v);
    Tensor mm = bool_mask ? mask.to(dev) : leaf(mask);
    Generator gen(99);
    AttentionOptions o;
    o.attn_mask = mm;
    o.is_causal = true;
    o.dropout_p = dropout;
    o.generator = &gen;
    const Tensor out = scaled_dot_product_attention(qq, kk, vv, o);
    sum(mul(out, w.to(compute).to(dev))).backward();
    std::vector<Tensor> r{out, qq.grad(), kk.grad(), vv.grad()};
    if (!bool_mask) r.push_back(mm.grad());
    return r;
  };
  // Reference: the CPU op in f64 on the same (rounded) values.
  const std::vector<Tensor> ref = run(kCPU, kF64);
  const std::vector<Tensor> got = run(kGPU, dt);
  ASSERT_EQ(got.size(), ref.size());
  const char* names[] = {"out", "dq", "dk", "dv", "dmask"};
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].defined()) << names[i];
    EXPECT_EQ(got[i].device(), kGPU) << names[i];
    EXPECT_EQ(got[i].dtype(), dt) << names[i];
    EXPECT_EQ(got[i].sizes(), ref[i].sizes()) << names[i];
    EXPECT_LE(relative_error(got[i], ref[i]), tolerance(dt, i > 0)) << names[i];
  }
}

TEST(CudaAttentionPublicApi, MatchesTheCpuOp) {
  TRIDENT_REQUIRE_CUDA();
  for (DType dt : {kF32, kBF16}) {
    check_public_api(dt, 0.0, true);
    check_public_api(dt, 0.1, false);
  }
}

// No GPU needed: the switch starts as TRIDENT_ATTENTION_TENSOR_CORES says (on unless it is "0");
// the ctest cuda.attention_tensor_cores_env runs this test again with the variable set to 0.
TEST(CudaAttentionTensorCores, StartAsTheEnvironmentSays) {
  const char* e = std::getenv("TRIDENT_ATTENTION_TENSOR_CORES");
  EXPECT_EQ(cuda::attention_tensor_cores(), e == nullptr || e[0] != '0') << (e ? e : "(unset)");
}

TEST(CudaAttentionErrors, HeadDimsAbove128AreRefusedByName) {
  TRIDENT_REQUIRE_CUDA();
  const Tensor q = ones({1, 2, 4, 160}, TensorOptions(kBF16).device(kGPU));
  trident::testing::expect_error([&] { scaled_dot_product_attention(q, q, q); }, {"head dims up to 128", "160"});
  const Tensor x = ones({1, 4, 8}, TensorOptions(kF32).device(kGPU));
  trident::testing::expect_error([&] { scaled_dot_product_attention(x.to(kF64), x.to(kF64), x.to(kF64)); }, {"f64"});
}

}  // namespace
