// The CUDA fused-attention kernels run on the CPU by the SIMT emulator (NOTE [Kernels on the CPU
// emulator] in tests/simt/simt.h), against the CPU kernels in f64 on the same (rounded) inputs:
// out, lse, dq, dk, dv (and dmask), with tests/cuda/attention_test.cpp's tolerances. Two sets:
//   - the tensor-core kernels (ops/cuda/attention_mma_*.cu: f16/bf16, head dims 64 and 128,
//     mma.sync), which no GPU has run yet: lengths that are not multiples of the 64-row tile,
//     Tq != Tk both ways, causal, additive, broadcast and padding masks, dropout with the CPU's
//     keep mask, dmask, padded rows, k and v shared by every head;
//   - the f32 FMA kernels (attention_forward.cu, attention_backward.cu), which passed these
//     comparisons on an H200: here they check the emulator.
// Each launch runs twice, its threads in forward and in reverse order, and the two must give the
// same bits (a race between threads would not). Outputs start as NaN, as the CUDA suites poison
// their allocations, so an element no thread writes fails.
#include "tests/simt/simt.h"  // first: it defines what the kernels below take from nvcc

#include "ops/cuda/attention_backward.cu"
#include "ops/cuda/attention_forward.cu"
#include "ops/cuda/attention_mma_backward.cu"
#include "ops/cuda/attention_mma_forward.cu"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attention_cases.h"
#include "ops/cpu/attention.h"
#include "simt/simt_test_util.h"
#include "test_util.h"

using namespace trident;
using namespace trident::simt_testing;
namespace attn = trident::cuda::attn;

namespace {

constexpr double kLseTolerance = 2e-5;

using Case = trident::testing::AttentionCase;
using trident::testing::MaskKind;

struct Outputs {
  Tensor out, lse, dq, dk, dv, dmask;
};

// What cuda::attention_forward and cuda::attention_backward launch, with the emulator in place
// of the GPU: the same kernels, grids, blocks and shared-memory sizes.
template <typename T, int kMaxD>
Outputs run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& mask,
            const cpu::AttentionParams& ap, bool want_dmask, bool tensor_cores, simt::Order order) {
  const int64_t BH = q.size(0), Tq = q.size(1), Tk = k.size(1), D = q.size(2), Dv = v.size(2);
  const DType dt = q.dtype();
  const attn::Params p = attn::params(q, k, v, ap);
  const attn::MaskDesc md = attn::mask_desc(mask);
  Outputs o{nans({BH, Tq, Dv}, dt), nans({BH, Tq}, kF32), nans({BH, Tq, D}, dt), nans({BH, Tk, D}, dt),
            nans({BH, Tk, Dv}, dt), want_dmask ? zeros({BH, Tq, Tk}, dt) : Tensor()};
  const unsigned q_blocks = static_cast<unsigned>(attn::grid_blocks(BH, (Tq + attn::kTile - 1) / attn::kTile));
  const unsigned k_blocks = static_cast<unsigned>(attn::grid_blocks(BH, (Tk + attn::kTile - 1) / attn::kTile));
  Tensor keep[5];
  const attn::Operand<T> qo = attn::operand<T>(q, keep[0]), ko = attn::operand<T>(k, keep[1]),
                         vo = attn::operand<T>(v, keep[2]), go = attn::operand<T>(dout, keep[3]);
  if (std::is_same_v<T, float>) {
    EXPECT_FALSE(tensor_cores);
  }
  if (tensor_cores) {  // what attention_mma_supported asks of the operands (and the backward pass of dout)
    EXPECT_TRUE(attn::aligned16(q) && attn::aligned16(k) && attn::aligned16(v) && attn::aligned16(dout));
  }
  auto* out = ptr<T>(o.out);
  auto* lse = ptr<float>(o.lse);
  if (tensor_cores) {
    if constexpr (!std::is_same_v<T, float>) {
      const auto qr = attn::raw_operand(q), kr = attn::raw_operand(k), vr = attn::raw_operand(v);
      simt::launch({dim3(static_cast<unsigned>(attn::mma_forward_blocks(BH, Tq))), dim3(attn::kFwdThreads),
                    attn::mma_forward_smem<kMaxD>(), order},
                   [&] { attn::mma_forward_kernel<T, kMaxD>(qr, kr, vr, md, p, ptr<uint16_t>(o.out), lse); });
    }
  } else {
    simt::launch({dim3(q_blocks), dim3(attn::kThreads), attn::forward_smem(p), order},
                 [&] { attn::forward_kernel<T, kMaxD>(qo, ko, vo, md, p, out, lse); });
  }

  // Backward: delta, then dK and dV by key tiles, dQ by query tiles.
  Tensor oo_keep;
  const attn::Operand<T> oo = attn::operand<T>(o.out, oo_keep);
  const Tensor delta = nans({BH, Tq}, kF32);
  const unsigned delta_blocks = static_cast<unsigned>((BH * Tq + attn::kThreads / 32 - 1) / (attn::kThreads / 32));
  simt::launch({dim3(delta_blocks), dim3(attn::kThreads), 0, order},
               [&] { attn::delta_kernel<T>(go, oo, ptr<float>(delta), BH, Tq, static_cast<int>(Dv)); });
  const float* lp = ptr<float>(o.lse);
  const float* dp = ptr<float>(delta);
  T* dmask = want_dmask ? ptr<T>(o.dmask) : nullptr;
  if (tensor_cores) {
    if constexpr (!std::is_same_v<T, float>) {
      const auto qr = attn::raw_operand(q), kr = attn::raw_operand(k), vr = attn::raw_operand(v),
                 gr = attn::raw_operand(dout);
      simt::launch({dim3(k_blocks), dim3(attn::kMmaThreads), attn::mma_dkdv_smem<kMaxD>(), order}, [&] {
        attn::mma_dkdv_kernel<T, kMaxD>(qr, kr, vr, gr, md, p, lp, dp, ptr<uint16_t>(o.dk), ptr<uint16_t>(o.dv));
      });
      simt::launch({dim3(q_blocks), dim3(attn::kMmaThreads), attn::mma_dq_smem<kMaxD>(), order}, [&] {
        attn::mma_dq_kernel<T, kMaxD>(qr, kr, vr, gr, md, p, lp, dp, ptr<uint16_t>(o.dq),
                                       reinterpret_cast<uint16_t*>(dmask));
      });
    }
  } else {
    const size_t smem = attn::backward_smem(p);
    simt::launch({dim3(k_blocks), dim3(attn::kThreads), smem, order},
                 [&] { attn::dkdv_kernel<T, kMaxD>(qo, ko, vo, go, md, p, lp, dp, ptr<T>(o.dk), ptr<T>(o.dv)); });
    simt::launch({dim3(q_blocks), dim3(attn::kThreads), smem, order},
                 [&] { attn::dq_kernel<T, kMaxD>(qo, ko, vo, go, md, p, lp, dp, ptr<T>(o.dq), dmask); });
  }
  return o;
}

template <typename T>
Outputs run_dispatch(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& mask,
                     const cpu::AttentionParams& ap, bool want_dmask, bool tensor_cores, simt::Order order) {
  if (std::max(q.size(2), v.size(2)) <= 64) return run<T, 64>(q, k, v, dout, mask, ap, want_dmask, tensor_cores, order);
  return run<T, 128>(q, k, v, dout, mask, ap, want_dmask, tensor_cores, order);
}

void check_case(const Case& c, DType dt, bool tensor_cores, uint64_t seed) {
  SCOPED_TRACE(c.name + " " + std::string(dtype_name(dt)) + (tensor_cores ? " tensor cores" : " FMA"));
  const trident::testing::AttentionInputs in = trident::testing::draw_attention_inputs(c, dt, seed);
  const trident::testing::AttentionReference ref = trident::testing::attention_reference(c, in);
  const cpu::AttentionParams& p = in.params;
  const Tensor q = trident::testing::attention_view(c, in.q, c.D), k = trident::testing::attention_view(c, in.k, c.D),
               v = trident::testing::attention_view(c, in.v, c.Dv), dout = trident::testing::attention_view(c, in.dout, c.Dv);
  const Tensor mask = trident::testing::attention_mask_view(c, in.mask);
  const Tensor& out_ref = ref.out;
  const Tensor& lse_ref = ref.lse;
  const cpu::AttentionGrads& g_ref = ref.grads;

  Outputs got[2];
  for (int r = 0; r < 2; ++r) {
    const simt::Order order = r == 0 ? simt::Order::Forward : simt::Order::Reverse;
    switch (dt) {
      case DType::F32: got[r] = run_dispatch<float>(q, k, v, dout, mask, p, c.want_dmask, tensor_cores, order); break;
      case DType::F16: got[r] = run_dispatch<Half>(q, k, v, dout, mask, p, c.want_dmask, tensor_cores, order); break;
      case DType::BF16:
        got[r] = run_dispatch<BFloat16>(q, k, v, dout, mask, p, c.want_dmask, tensor_cores, order);
        break;
      default: FAIL() << "dtype " << dt;
    }
  }
  const Outputs& o = got[0];
  EXPECT_LE(relative_error(o.out, out_ref), tolerance(dt, false)) << "out";
  EXPECT_LE(relative_error(o.lse, lse_ref), kLseTolerance) << "lse";
  EXPECT_LE(relative_error(o.dq, g_ref.dq), tolerance(dt, true)) << "dq";
  EXPECT_LE(relative_error(o.dk, g_ref.dk), tolerance(dt, true)) << "dk";
  EXPECT_LE(relative_error(o.dv, g_ref.dv), tolerance(dt, true)) << "dv";
  if (c.want_dmask) {
    EXPECT_LE(relative_error(o.dmask, g_ref.dmask), tolerance(dt, true)) << "dmask";
  }
  const char* names[] = {"out", "lse", "dq", "dk", "dv", "dmask"};
  const Tensor Outputs::*fields[] = {&Outputs::out, &Outputs::lse, &Outputs::dq,
                                      &Outputs::dk,  &Outputs::dv,  &Outputs::dmask};
  for (int i = 0; i < 6; ++i)
    EXPECT_TRUE(same_bits(got[0].*fields[i], got[1].*fields[i])) << names[i] << " depends on the order the threads run in";
}

TEST(SimtAttentionTensorCores, MatchTheCpuInF64) {
  // (name, BH, Tq, Tk, D, Dv, causal, mask, dropout, pad, dmask, shared kv); each in f16 and bf16.
  const std::vector<Case> cases = {
      {"causal_d64_t200", 2, 200, 200, 64, 64, true},
      {"padding_d128_t130", 2, 130, 130, 128, 128, false, MaskKind::Padding},
      {"additive_dmask_d128", 2, 100, 150, 128, 128, false, MaskKind::Additive, 0.0, 0, true},
      {"additive_broadcast_causal_d64", 3, 77, 77, 64, 64, true, MaskKind::AdditiveBroadcast},
      {"dropout_causal_d64", 2, 130, 130, 64, 64, true, MaskKind::None, 0.1},
      {"strided_aligned_d64", 3, 100, 130, 64, 64, false, MaskKind::Additive, 0.0, 8},
      {"causal_fewer_queries_d64", 2, 130, 200, 64, 64, true},
      {"causal_more_queries_d128", 2, 200, 70, 128, 128, true},
      {"dropout_additive_dmask_causal_d128", 2, 140, 100, 128, 128, true, MaskKind::Additive, 0.1, 0, true},
      {"five_keys_d128", 2, 150, 5, 128, 128, false, MaskKind::AdditiveBroadcast},
      {"shared_kv_d64", 3, 70, 90, 64, 64, true, MaskKind::None, 0.0, 0, false, true},
      // Whole key tiles without a mask: the forward pass's tiles without per-element checks.
      {"unmasked_d128_k192", 2, 96, 192, 128, 128},
      {"unmasked_dropout_d64_k256", 1, 130, 256, 64, 64, false, MaskKind::None, 0.1},
  };
  uint64_t seed = 100;
  for (const Case& c : cases)
    for (DType dt : {DType::F16, DType::BF16}) check_case(c, dt, true, seed++);
}

TEST(SimtAttentionFma, MatchTheCpuInF64) {
  const std::vector<Case> cases = {
      {"tiny_d32", 3, 17, 17, 32, 32},
      {"causal_d64_t130", 2, 130, 130, 64, 64, true},
      {"dropout_additive_dmask_d32", 2, 65, 66, 32, 32, false, MaskKind::Additive, 0.1, 0, true},
      {"strided_dv_differs", 2, 100, 90, 64, 32, false, MaskKind::None, 0.0, 5},
      {"dv_wider_than_d_padding", 2, 70, 70, 32, 128, false, MaskKind::Padding},
  };
  uint64_t seed = 200;
  for (const Case& c : cases) check_case(c, DType::F32, false, seed++);
  check_case(cases[1], DType::BF16, false, seed++);
}

}  // namespace
