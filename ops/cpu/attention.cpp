#include "ops/cpu/attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/attention_internal.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/isa.h"
#include "ops/cpu/rows.h"
#include "ops/math/softmax.h"

namespace trident::cpu {
using namespace attention_detail;
namespace {

// NOTE [Attention exp rows]: the exponentials of the scores are most of the CPU attention's
// arithmetic after the GEMMs (one per score, forward and again in backward); they go through
// the vectorized f32 exp of softmax (NOTE [Softmax exp]) in kernels compiled per ISA (NOTE
// [ISA clones], NOTE [AVX-512 kernels]), rows summed as NOTE [Row accumulation] says. f64
// takes std::exp.

// Rows of S [rows][kn] in place: e^(s - m) with m the row's maximum; m and the sum of the
// row's exponentials to m[r] and l[r]. A row whose maximum is -inf (it sees no key) becomes
// zeros with l[r] = 0.
template <typename T>
inline void exp_rows(T* S, int64_t rows, int64_t kn, T* m, T* l) {
  for (int64_t r = 0; r < rows; ++r) {
    T* s = S + r * kn;
    const T mx = row_max(s, kn);
    m[r] = mx;
    if (mx == -std::numeric_limits<T>::infinity()) {
      std::fill(s, s + kn, T(0));
      l[r] = T(0);
      continue;
    }
    l[r] = static_cast<T>(row_sum<T>(kn, [&](int64_t j) {
      const T e = math::softmax_exp(static_cast<T>(s[j] - mx));
      s[j] = e;
      return e;
    }));
  }
}

// Rows of S in place: e^(s - L[r]) (probabilities from the saved log-sum-exp), zeros where
// L[r] = -inf.
template <typename T>
inline void exp_minus_rows(T* S, int64_t rows, int64_t kn, const T* L) {
  for (int64_t r = 0; r < rows; ++r) {
    T* s = S + r * kn;
    const T lr = L[r];
    if (lr == -std::numeric_limits<T>::infinity()) {
      std::fill(s, s + kn, T(0));
      continue;
    }
#pragma omp simd
    for (int64_t j = 0; j < kn; ++j) s[j] = math::softmax_exp(static_cast<T>(s[j] - lr));
  }
}

}  // namespace

TRIDENT_CPU_KERNEL(attention_exp_rows_f32, (float* S, int64_t rows, int64_t kn, float* m, float* l),
                   { exp_rows<float>(S, rows, kn, m, l); })
TRIDENT_CPU_KERNEL(attention_exp_minus_rows_f32, (float* S, int64_t rows, int64_t kn, const float* L),
                   { exp_minus_rows<float>(S, rows, kn, L); })

namespace attention_detail {

void attention_exp_rows(float* S, int64_t rows, int64_t kn, float* m, float* l) {
  TRIDENT_CPU_PICK(attention_exp_rows_f32)(S, rows, kn, m, l);
}
void attention_exp_rows(double* S, int64_t rows, int64_t kn, double* m, double* l) { exp_rows(S, rows, kn, m, l); }
void attention_exp_minus_rows(float* S, int64_t rows, int64_t kn, const float* L) {
  TRIDENT_CPU_PICK(attention_exp_minus_rows_f32)(S, rows, kn, L);
}
void attention_exp_minus_rows(double* S, int64_t rows, int64_t kn, const double* L) { exp_minus_rows(S, rows, kn, L); }

}  // namespace attention_detail

namespace {

// Scores of query rows [i0, i1) of batch-head b against keys [0, kn): S = scale q k^T + mask,
// -inf where masked or (causal) in the future.
template <typename T>
void block_scores(const Mat3<T>& q, const Mat3<T>& k, const MaskReader<T>& mask, const AttentionParams& p, int64_t b,
                  int64_t i0, int64_t i1, int64_t kn, int64_t d, T* S) {
  gemm<T>(false, true, i1 - i0, kn, d, static_cast<T>(p.scale), q.row(b, i0), q.sr, k.row(b, 0), k.sr, T(0), S, kn);
  for (int64_t r = i0; r < i1; ++r) {
    T* s = S + (r - i0) * kn;
    mask.apply(b, r, s, kn);
    if (p.causal)
      for (int64_t j = r + 1; j < kn; ++j) s[j] = -std::numeric_limits<T>::infinity();
  }
}

template <typename T>
Tensor forward_typed(const Tensor& qt, const Tensor& kt, const Tensor& vt, const Tensor& maskt, const AttentionParams& p,
                     Tensor& lse_t) {
  const int64_t BH = batch_heads(qt), Tq = qt.size(-2), Tk = kt.size(-2), D = qt.size(-1), Dv = vt.size(-1);
  Tensor out = result_like(qt, Tq, Dv, qt.dtype(), false);
  lse_t = empty({BH, Tq}, qt.dtype());
  if (out.numel() == 0 && lse_t.numel() == 0) return out;
  const Mat3<T> q = mat3<T>(qt), k = mat3<T>(kt), v = mat3<T>(vt), o = mat3<T>(out);
  const MaskReader<T> mask(maskt);
  T* lse = lse_t.data<T>();
  const int64_t nblk = (Tq + kBlock - 1) / kBlock;
  const T keep_scale = p.dropout_p > 0 ? static_cast<T>(1.0 / (1.0 - p.dropout_p)) : T(1);
  for_tasks(BH * nblk, [&](int64_t task) {
    const int64_t b = task / nblk, i0 = (task % nblk) * kBlock, i1 = std::min(Tq, i0 + kBlock);
    const int64_t kn = p.causal ? std::min(Tk, i1) : Tk;  // causal: later keys are never seen
    T* orows = o.row(b, i0);
    if (kn == 0) {
      for (int64_t r = i0; r < i1; ++r) {
        std::fill(o.row(b, r), o.row(b, r) + Dv, T(0));
        lse[b * Tq + r] = -std::numeric_limits<T>::infinity();
      }
      return;
    }
    T* const S = scratch<T>().get(0, (i1 - i0) * kn);
    T* const mx = scratch<T>().get(1, i1 - i0);
    T* const sum = scratch<T>().get(2, i1 - i0);
    block_scores(q, k, mask, p, b, i0, i1, kn, D, S);
    attention_exp_rows(S, i1 - i0, kn, mx, sum);
    DropoutRow drop(p);
    for (int64_t r = i0; r < i1; ++r) {
      T* s = S + (r - i0) * kn;
      const T m = mx[r - i0], l = sum[r - i0];
      if (m == -std::numeric_limits<T>::infinity()) {  // sees no key: zero output (the row is zeros)
        lse[b * Tq + r] = m;
        continue;
      }
      lse[b * Tq + r] = m + std::log(l);
      const T inv = T(1) / l;
      if (p.dropout_p > 0) {
        const uint64_t base = static_cast<uint64_t>((b * Tq + r) * Tk);
        for (int64_t j = 0; j < kn; ++j) s[j] = drop.keep(base + static_cast<uint64_t>(j)) ? s[j] * inv * keep_scale : T(0);
      } else {
        for (int64_t j = 0; j < kn; ++j) s[j] *= inv;
      }
    }
    gemm<T>(false, false, i1 - i0, Dv, kn, T(1), S, kn, v.row(b, 0), v.sr, T(0), orows, o.sr);
  });
  return out;
}

template <typename T>
AttentionGrads backward_typed(const Tensor& dout_t, const Tensor& qt, const Tensor& kt, const Tensor& vt,
                              const Tensor& maskt, const Tensor& out_t, const Tensor& lse_t, const AttentionParams& p,
                              bool want_dmask) {
  const int64_t BH = batch_heads(qt), Tq = qt.size(-2), Tk = kt.size(-2), D = qt.size(-1), Dv = vt.size(-1);
  AttentionGrads g;
  g.dq = result_like(qt, Tq, D, qt.dtype(), true);
  g.dk = result_like(kt, Tk, D, qt.dtype(), true);
  g.dv = result_like(vt, Tk, Dv, qt.dtype(), true);
  if (want_dmask) g.dmask = zeros({BH, Tq, Tk}, qt.dtype());
  if (BH == 0 || Tq == 0 || Tk == 0) return g;
  const Tensor dout_c = unit_inner(dout_t), out_c = unit_inner(out_t), lse_c = lse_t.contiguous();
  const Mat3<T> q = mat3<T>(qt), k = mat3<T>(kt), v = mat3<T>(vt);
  const Mat3<T> dO = mat3<T>(dout_c), O = mat3<T>(out_c), dq = mat3<T>(g.dq), dk = mat3<T>(g.dk), dv = mat3<T>(g.dv);
  const MaskReader<T> mask(maskt);
  const T* lse = lse_c.data<T>();
  T* dm = want_dmask ? g.dmask.data<T>() : nullptr;
  const T keep_scale = p.dropout_p > 0 ? static_cast<T>(1.0 / (1.0 - p.dropout_p)) : T(1);
  const T scale = static_cast<T>(p.scale);
  // One task per batch-head: dk and dv sum over all query blocks of that head.
  for_tasks(BH, [&](int64_t b) {
    T* const P = scratch<T>().get(0, kBlock * Tk);
    T* const dP = scratch<T>().get(1, kBlock * Tk);
    T* const Dvec = scratch<T>().get(2, kBlock);
    T* const Pd = p.dropout_p > 0 ? scratch<T>().get(3, kBlock * Tk) : nullptr;
    DropoutRow drop(p);
    for (int64_t i0 = 0; i0 < Tq; i0 += kBlock) {
      const int64_t i1 = std::min(Tq, i0 + kBlock), rows = i1 - i0;
      const int64_t kn = p.causal ? std::min(Tk, i1) : Tk;
      if (kn == 0) continue;
      const T* dOb = dO.row(b, i0);
      row_dots(dOb, dO.sr, O.row(b, i0), O.sr, rows, Dv, Dvec);
      // Probabilities again, from the saved log-sum-exp.
      block_scores(q, k, mask, p, b, i0, i1, kn, D, P);
      attention_exp_minus_rows(P, rows, kn, lse + b * Tq + i0);
      // dP_drop = dO V^T.
      gemm<T>(false, true, rows, kn, Dv, T(1), dOb, dO.sr, v.row(b, 0), v.sr, T(0), dP, kn);
      // One pass over the keep mask: dP = dP_drop * keep / (1 - p), and the dropped
      // probabilities P_drop (for dV) beside them.
      if (p.dropout_p > 0) dropout_backward_rows(drop, b * Tq + i0, rows, kn, Tk, keep_scale, P, dP, Pd);
      // dV += P_drop^T dO.
      gemm<T>(true, false, kn, Dv, rows, T(1), p.dropout_p > 0 ? Pd : P, kn, dOb, dO.sr, T(1), dv.row(b, 0), dv.sr);
      // dS = P * (dP - Dvec), in P's place.
      for (int64_t r = 0; r < rows; ++r) {
        T* s = P + r * kn;
        const T* d = dP + r * kn;
        const T dv_r = Dvec[r];
        for (int64_t j = 0; j < kn; ++j) s[j] = s[j] * (d[j] - dv_r);
        if (dm) std::copy(s, s + kn, dm + (b * Tq + i0 + r) * Tk);
      }
      // dQ = scale dS K;  dK += scale dS^T Q.
      gemm<T>(false, false, rows, D, kn, scale, P, kn, k.row(b, 0), k.sr, T(0), dq.row(b, i0), dq.sr);
      gemm<T>(true, false, kn, D, rows, scale, P, kn, q.row(b, i0), q.sr, T(1), dk.row(b, 0), dk.sr);
    }
  });
  return g;
}

}  // namespace

Tensor attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const AttentionParams& p,
                         Tensor& lse) {
  if (q.dtype() == DType::BF16) return attention_forward_bf16(q, k, v, mask, p, lse);
  return TRIDENT_DISPATCH_F32_F64(q.dtype(), "scaled_dot_product_attention",
                                  [&] { return forward_typed<scalar_t>(q, k, v, mask, p, lse); });
}

AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                  const Tensor& out, const Tensor& lse, const AttentionParams& p, bool want_dmask) {
  if (q.dtype() == DType::BF16) return attention_backward_bf16(dout, q, k, v, mask, out, lse, p, want_dmask);
  return TRIDENT_DISPATCH_F32_F64(q.dtype(), "scaled_dot_product_attention backward", [&] {
    return backward_typed<scalar_t>(dout, q, k, v, mask, out, lse, p, want_dmask);
  });
}

}  // namespace trident::cpu
