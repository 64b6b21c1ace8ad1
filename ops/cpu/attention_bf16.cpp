// NOTE [bf16 attention on the CPU]: with a bf16 GEMM kernel (NOTE [AMX bf16 GEMM], NOTE
// [AVX512-BF16 GEMM]), bf16 query, key and value are read as they are, in the blocks of the f32
// kernels (64 query rows against all keys a row may see), and every product runs on gemm_bf16:
// exact products of bf16 values, f32 sums. What is not a product stays in f32: the scores (scaled,
// masked), their exponentials, the log-sum-exp (an f32 tensor, as on CUDA) and, in backward, dP,
// Delta = rowsum(dO O) and dS = P (dP - Delta). Where a product needs its f32 operand as bf16, the
// operand is rounded once, as flash attention does on GPUs: the exponentials E = e^(s - m) (after
// dropout) for O = (E V) / l, the probabilities P for dV = P^T dO, and scale dS for dQ = scale dS
// K and dK = scale dS^T Q. O is divided by the row's sum l in f32 and rounded once, dQ rounded
// once from its f32 sums; dK and dV sum over the query blocks in f32 and are rounded at the end.
// So a bf16 attention on the CPU differs from the f32 computation it replaces (operands widened,
// f32 kernels, results rounded) by the rounding of E, P and dS, about 2^-9 of each: the
// arithmetic of the CUDA tensor-core kernels (NOTE [Tensor-core attention]), and no f32 copies
// of q, k, v and their gradients. Without a kernel (TRIDENT_CPU_BF16_GEMM=off, or neither AMX
// nor AVX512-BF16) and for f16, ops/attention.cpp widens to f32.
// Every task's sums run in a fixed order: the results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/copy.h"
#include "core/factory.h"
#include "core/half.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/attention_internal.h"
#include "ops/cpu/bgemm_amx.h"

namespace trident::cpu {
using namespace attention_detail;
namespace {

const uint16_t* bits(const BFloat16* p) { return reinterpret_cast<const uint16_t*>(p); }
uint16_t* bits(BFloat16* p) { return reinterpret_cast<uint16_t*>(p); }

// The kernel the products run on; checks the mask's dtype (bool, or bf16 like the operands).
Bf16Gemm kernel_for(const char* what, const Tensor& mask) {
  const Bf16Gemm kernel = bf16_gemm_kernel();
  TRIDENT_CHECK(kernel != Bf16Gemm::None, what,
                ": bf16 attention on the CPU needs a bf16 GEMM kernel (AMX or AVX512-BF16); none is in use here");
  TRIDENT_CHECK(!mask.defined() || mask.dtype() == DType::Bool || mask.dtype() == DType::BF16, what,
                ": a bf16 attention's mask must be bool or bf16, got ", mask.dtype());
  return kernel;
}

// Scores of query rows [i0, i1) of batch-head b against keys [0, kn), in f32: S = scale q k^T +
// mask, -inf where masked or (causal) in the future.
void block_scores(Bf16Gemm kernel, const Mat3<BFloat16>& q, const Mat3<BFloat16>& k, const MaskReader<float, BFloat16>& mask,
                  const AttentionParams& p, int64_t b, int64_t i0, int64_t i1, int64_t kn, int64_t d, float* S) {
  const int64_t rows = i1 - i0;
  if (d > 0) {
    gemm_bf16(kernel, false, true, rows, kn, d, bits(q.row(b, i0)), q.sr, bits(k.row(b, 0)), k.sr, nullptr, S, kn);
  } else {
    std::fill(S, S + rows * kn, 0.0f);
  }
  const float scale = static_cast<float>(p.scale);
  for (int64_t r = i0; r < i1; ++r) {
    float* s = S + (r - i0) * kn;
    for (int64_t j = 0; j < kn; ++j) s[j] *= scale;
    mask.apply(b, r, s, kn);
    if (p.causal)
      for (int64_t j = r + 1; j < kn; ++j) s[j] = -std::numeric_limits<float>::infinity();
  }
}

}  // namespace

Tensor attention_forward_bf16(const Tensor& qt, const Tensor& kt, const Tensor& vt, const Tensor& maskt,
                              const AttentionParams& p, Tensor& lse_t) {
  const Bf16Gemm kernel = kernel_for("scaled_dot_product_attention", maskt);
  const int64_t BH = batch_heads(qt), Tq = qt.size(-2), Tk = kt.size(-2), D = qt.size(-1), Dv = vt.size(-1);
  Tensor out = result_like(qt, Tq, Dv, DType::BF16, false);
  lse_t = empty({BH, Tq}, DType::F32);
  if (out.numel() == 0 && lse_t.numel() == 0) return out;
  const Mat3<BFloat16> q = mat3<BFloat16>(qt), k = mat3<BFloat16>(kt), v = mat3<BFloat16>(vt), o = mat3<BFloat16>(out);
  const MaskReader<float, BFloat16> mask(maskt);
  float* lse = lse_t.data<float>();
  const int64_t nblk = (Tq + kBlock - 1) / kBlock;
  const float keep_scale = p.dropout_p > 0 ? static_cast<float>(1.0 / (1.0 - p.dropout_p)) : 1.0f;
  for_tasks(BH * nblk, [&](int64_t task) {
    const int64_t b = task / nblk, i0 = (task % nblk) * kBlock, i1 = std::min(Tq, i0 + kBlock), rows = i1 - i0;
    const int64_t kn = p.causal ? std::min(Tk, i1) : Tk;  // causal: later keys are never seen
    if (kn == 0) {
      for (int64_t r = i0; r < i1; ++r) std::fill(o.row(b, r), o.row(b, r) + Dv, BFloat16(0.0f));
      std::fill(lse + b * Tq + i0, lse + b * Tq + i1, -std::numeric_limits<float>::infinity());
      return;
    }
    float* const S = scratch<float>().get(0, rows * kn);
    float* const O = scratch<float>().get(1, rows * Dv);
    float* const mx = scratch<float>().get(2, rows);
    float* const sum = scratch<float>().get(3, rows);
    BFloat16* const E = scratch<BFloat16>().get(0, rows * kn);
    block_scores(kernel, q, k, mask, p, b, i0, i1, kn, D, S);
    attention_exp_rows(S, rows, kn, mx, sum);
    // The exponentials e^(s - m) (dropped ones zero, kept ones scaled) rounded to bf16 for E V;
    // each output row is then divided by its sum l (a row that sees no key: zeros) and rounded.
    DropoutRow drop(p);
    for (int64_t r = i0; r < i1; ++r) {
      float* s = S + (r - i0) * kn;
      const float m = mx[r - i0];
      float& l = sum[r - i0];
      if (m == -std::numeric_limits<float>::infinity()) {  // the row is zeros
        lse[b * Tq + r] = m;
        l = 0.0f;
        continue;
      }
      lse[b * Tq + r] = m + std::log(l);
      l = 1.0f / l;
      if (p.dropout_p > 0) {
        const uint64_t base = static_cast<uint64_t>((b * Tq + r) * Tk);
        for (int64_t j = 0; j < kn; ++j) s[j] = drop.keep(base + static_cast<uint64_t>(j)) ? s[j] * keep_scale : 0.0f;
      }
    }
    if (Dv == 0) return;
    convert_f32_to_bf16(S, E, rows * kn);
    gemm_bf16(kernel, false, false, rows, Dv, kn, bits(E), kn, bits(v.row(b, 0)), v.sr, nullptr, O, Dv);
    for (int64_t r = 0; r < rows; ++r) {
      const float inv = sum[r];
      float* orow = O + r * Dv;
      for (int64_t d = 0; d < Dv; ++d) orow[d] *= inv;
    }
    for (int64_t r = 0; r < rows; ++r) convert_f32_to_bf16(O + r * Dv, o.row(b, i0 + r), Dv);
  });
  return out;
}

AttentionGrads attention_backward_bf16(const Tensor& dout_t, const Tensor& qt, const Tensor& kt, const Tensor& vt,
                                       const Tensor& maskt, const Tensor& out_t, const Tensor& lse_t, const AttentionParams& p,
                                       bool want_dmask) {
  const Bf16Gemm kernel = kernel_for("scaled_dot_product_attention backward", maskt);
  const int64_t BH = batch_heads(qt), Tq = qt.size(-2), Tk = kt.size(-2), D = qt.size(-1), Dv = vt.size(-1);
  TRIDENT_CHECK(lse_t.dtype() == DType::F32, "scaled_dot_product_attention backward: bf16 attention's lse must be f32, got ",
                lse_t.dtype());
  AttentionGrads g;
  if (BH == 0 || Tq == 0 || Tk == 0) {
    g.dq = result_like(qt, Tq, D, DType::BF16, true);
    g.dk = result_like(kt, Tk, D, DType::BF16, true);
    g.dv = result_like(vt, Tk, Dv, DType::BF16, true);
    if (want_dmask) g.dmask = zeros({BH, Tq, Tk}, DType::BF16);
    return g;
  }
  // Every query block sees a key (kn >= 1), so every row of dQ is written, and dK and dV whole
  // at the end; dmask's columns past a causal block's keys are not.
  g.dq = result_like(qt, Tq, D, DType::BF16, D == 0);
  g.dk = result_like(kt, Tk, D, DType::BF16, false);
  g.dv = result_like(vt, Tk, Dv, DType::BF16, false);
  if (want_dmask) g.dmask = zeros({BH, Tq, Tk}, DType::BF16);
  const Tensor dout_c = unit_inner(dout_t), out_c = unit_inner(out_t), lse_c = lse_t.contiguous();
  const Mat3<BFloat16> q = mat3<BFloat16>(qt), k = mat3<BFloat16>(kt), v = mat3<BFloat16>(vt);
  const Mat3<BFloat16> dO = mat3<BFloat16>(dout_c), O = mat3<BFloat16>(out_c);
  const Mat3<BFloat16> dq = mat3<BFloat16>(g.dq), dk = mat3<BFloat16>(g.dk), dv = mat3<BFloat16>(g.dv);
  const MaskReader<float, BFloat16> mask(maskt);
  const float* lse = lse_c.data<float>();
  BFloat16* dm = want_dmask ? g.dmask.data<BFloat16>() : nullptr;
  const float keep_scale = p.dropout_p > 0 ? static_cast<float>(1.0 / (1.0 - p.dropout_p)) : 1.0f;
  const float scale = static_cast<float>(p.scale);
  // One task per batch-head: dK and dV sum over all query blocks of that head, in f32.
  for_tasks(BH, [&](int64_t b) {
    float* const P = scratch<float>().get(0, kBlock * Tk);
    float* const dP = scratch<float>().get(1, kBlock * Tk);
    float* const Dvec = scratch<float>().get(2, kBlock);
    float* const dk_sum = scratch<float>().zeros(3, Tk * D);
    float* const dv_sum = scratch<float>().zeros(4, Tk * Dv);
    BFloat16* const Pb = scratch<BFloat16>().get(0, kBlock * Tk);
    DropoutRow drop(p);
    for (int64_t i0 = 0; i0 < Tq; i0 += kBlock) {
      const int64_t i1 = std::min(Tq, i0 + kBlock), rows = i1 - i0;
      const int64_t kn = p.causal ? std::min(Tk, i1) : Tk;
      if (kn == 0) continue;
      const BFloat16* dOb = dO.row(b, i0);
      row_dots(dOb, dO.sr, O.row(b, i0), O.sr, rows, Dv, Dvec);
      // Probabilities again, from the saved log-sum-exp.
      block_scores(kernel, q, k, mask, p, b, i0, i1, kn, D, P);
      attention_exp_minus_rows(P, rows, kn, lse + b * Tq + i0);
      // dP_drop = dO V^T.
      if (Dv > 0) {
        gemm_bf16(kernel, false, true, rows, kn, Dv, bits(dOb), dO.sr, bits(v.row(b, 0)), v.sr, nullptr, dP, kn);
      } else {
        std::fill(dP, dP + rows * kn, 0.0f);
      }
      // P_drop (rounded, for dV) and dP = dP_drop * keep / (1 - p), one pass over the keep mask.
      if (p.dropout_p > 0) {
        dropout_backward_rows(drop, b * Tq + i0, rows, kn, Tk, keep_scale, P, dP, Pb);
      } else {
        convert_f32_to_bf16(P, Pb, rows * kn);
      }
      // dV += P_drop^T dO.
      if (Dv > 0)
        gemm_bf16(kernel, true, false, kn, Dv, rows, bits(Pb), kn, bits(dOb), dO.sr, nullptr, dv_sum, Dv, true);
      // dS = P * (dP - Delta), in P's place; the mask's gradient; then scale dS rounded.
      for (int64_t r = 0; r < rows; ++r) {
        float* s = P + r * kn;
        const float* d = dP + r * kn;
        const float delta = Dvec[r];
        for (int64_t j = 0; j < kn; ++j) s[j] = s[j] * (d[j] - delta);
        if (dm) convert_f32_to_bf16(s, dm + (b * Tq + i0 + r) * Tk, kn);
        for (int64_t j = 0; j < kn; ++j) s[j] *= scale;
      }
      if (D == 0) continue;
      convert_f32_to_bf16(P, Pb, rows * kn);
      // dQ = scale dS K;  dK += scale dS^T Q.
      gemm_bf16(kernel, false, false, rows, D, kn, bits(Pb), kn, bits(k.row(b, 0)), k.sr, nullptr, bits(dq.row(b, i0)), dq.sr);
      gemm_bf16(kernel, true, false, kn, D, rows, bits(Pb), kn, bits(q.row(b, i0)), q.sr, nullptr, dk_sum, D,
                true);
    }
    for (int64_t r = 0; r < Tk; ++r) {
      convert_f32_to_bf16(dk_sum + r * D, dk.row(b, r), D);
      convert_f32_to_bf16(dv_sum + r * Dv, dv.row(b, r), Dv);
    }
  });
  return g;
}

}  // namespace trident::cpu
