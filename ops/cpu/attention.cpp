#include "ops/cpu/attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/isa.h"
#include "ops/cpu/rows.h"
#include "ops/math/softmax.h"

namespace trident::cpu {
namespace {

constexpr int64_t kBlock = 64;  // query rows per task: 64 x Tk scores stay in cache-sized buffers

// A [BH, rows, cols] operand with unit inner stride.
template <typename T>
struct Mat3 {
  T* p;
  int64_t sb, sr;
  T* row(int64_t b, int64_t r) const { return p + b * sb + r * sr; }
};

template <typename T>
Mat3<T> mat3(const Tensor& t) {
  TRIDENT_ASSERT(t.dim() == 3 && (t.stride(2) == 1 || t.size(2) <= 1), "attention operand ", t.sizes(), " strides ", t.strides());
  return {static_cast<T*>(t.data_ptr()), t.stride(0), std::max<int64_t>(t.stride(1), t.size(2))};
}

// Reads the mask, broadcast to [lead..., Tq, Tk] (stride 0 on broadcast dims), for batch-head b.
template <typename T>
struct MaskReader {
  bool present = false, is_bool = false;
  const char* base = nullptr;
  Shape lead_sizes, lead_strides;
  int64_t sr = 0, sc = 0, elem = 0;

  explicit MaskReader(const Tensor& m) {
    if (!m.defined()) return;
    present = true;
    is_bool = m.dtype() == DType::Bool;
    base = static_cast<const char*>(m.data_ptr());
    elem = static_cast<int64_t>(m.element_size());
    lead_sizes.assign(m.sizes().begin(), m.sizes().end() - 2);
    lead_strides.assign(m.strides().begin(), m.strides().end() - 2);
    sr = m.stride(-2);
    sc = m.stride(-1);
  }
  const char* head(int64_t b) const {
    int64_t off = 0;
    for (size_t d = lead_sizes.size(); d-- > 0;) {
      off += (b % lead_sizes[d]) * lead_strides[d];
      b /= lead_sizes[d];
    }
    return base + off * elem;
  }
  // Adds row r's mask to scores s[0, n): -inf where a bool mask is false.
  void apply(int64_t b, int64_t r, T* s, int64_t n) const {
    if (!present) return;
    if (is_bool) {
      const bool* mp = reinterpret_cast<const bool*>(head(b)) + r * sr;
      for (int64_t j = 0; j < n; ++j)
        if (!mp[j * sc]) s[j] = -std::numeric_limits<T>::infinity();
    } else {
      const T* mp = reinterpret_cast<const T*>(head(b)) + r * sr;
      for (int64_t j = 0; j < n; ++j) s[j] += mp[j * sc];
    }
  }
};

// Dropout keep decisions along a row; caches the Philox block shared by 4 neighbours.
struct DropoutRow {
  const AttentionParams& p;
  uint64_t cached_block = UINT64_MAX;
  uint32_t out[4] = {0, 0, 0, 0};
  explicit DropoutRow(const AttentionParams& params) : p(params) {}
  bool keep(uint64_t idx) {
    const uint64_t blk = idx / 4;
    if (blk != cached_block) {
      philox::block(p.rng.seed, p.rng.offset, blk, out);
      cached_block = blk;
    }
    return philox::uniform_f32(out[idx % 4]) >= static_cast<float>(p.dropout_p);
  }
};

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

namespace {

inline void attention_exp_rows(float* S, int64_t rows, int64_t kn, float* m, float* l) {
  TRIDENT_CPU_PICK(attention_exp_rows_f32)(S, rows, kn, m, l);
}
inline void attention_exp_rows(double* S, int64_t rows, int64_t kn, double* m, double* l) { exp_rows(S, rows, kn, m, l); }
inline void attention_exp_minus_rows(float* S, int64_t rows, int64_t kn, const float* L) {
  TRIDENT_CPU_PICK(attention_exp_minus_rows_f32)(S, rows, kn, L);
}
inline void attention_exp_minus_rows(double* S, int64_t rows, int64_t kn, const double* L) { exp_minus_rows(S, rows, kn, L); }

// Runs f(t) for every task: in parallel (each GEMM on its thread) when there are enough of
// them, one after another (each GEMM split across the threads) otherwise (NOTE [Threads]).
template <typename F>
void for_tasks(int64_t n, const F& f) {
  if (n >= 2 * get_num_threads()) {
    parallel_for(0, n, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t t = b0; t < b1; ++t) f(t);
    });
  } else {
    for (int64_t t = 0; t < n; ++t) f(t);
  }
}

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
  const int64_t BH = qt.size(0), Tq = qt.size(1), Tk = kt.size(1), D = qt.size(2), Dv = vt.size(2);
  Tensor out = empty({BH, Tq, Dv}, qt.dtype());
  lse_t = empty({BH, Tq}, qt.dtype());
  if (out.numel() == 0 && lse_t.numel() == 0) return out;
  const Mat3<T> q = mat3<T>(qt), k = mat3<T>(kt), v = mat3<T>(vt);
  const MaskReader<T> mask(maskt);
  T* o = out.data<T>();
  T* lse = lse_t.data<T>();
  const int64_t nblk = (Tq + kBlock - 1) / kBlock;
  const T keep_scale = p.dropout_p > 0 ? static_cast<T>(1.0 / (1.0 - p.dropout_p)) : T(1);
  for_tasks(BH * nblk, [&](int64_t task) {
    const int64_t b = task / nblk, i0 = (task % nblk) * kBlock, i1 = std::min(Tq, i0 + kBlock);
    const int64_t kn = p.causal ? std::min(Tk, i1) : Tk;  // causal: later keys are never seen
    T* orows = o + (b * Tq + i0) * Dv;
    if (kn == 0) {
      std::fill(orows, orows + (i1 - i0) * Dv, T(0));
      for (int64_t r = i0; r < i1; ++r) lse[b * Tq + r] = -std::numeric_limits<T>::infinity();
      return;
    }
    std::vector<T> S(static_cast<size_t>((i1 - i0) * kn)), mx(static_cast<size_t>(i1 - i0)), sum(static_cast<size_t>(i1 - i0));
    block_scores(q, k, mask, p, b, i0, i1, kn, D, S.data());
    attention_exp_rows(S.data(), i1 - i0, kn, mx.data(), sum.data());
    DropoutRow drop(p);
    for (int64_t r = i0; r < i1; ++r) {
      T* s = S.data() + (r - i0) * kn;
      const T m = mx[static_cast<size_t>(r - i0)], l = sum[static_cast<size_t>(r - i0)];
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
    gemm<T>(false, false, i1 - i0, Dv, kn, T(1), S.data(), kn, v.row(b, 0), v.sr, T(0), orows, Dv);
  });
  return out;
}

template <typename T>
AttentionGrads backward_typed(const Tensor& dout_t, const Tensor& qt, const Tensor& kt, const Tensor& vt,
                              const Tensor& maskt, const Tensor& out_t, const Tensor& lse_t, const AttentionParams& p,
                              bool want_dmask) {
  const int64_t BH = qt.size(0), Tq = qt.size(1), Tk = kt.size(1), D = qt.size(2), Dv = vt.size(2);
  AttentionGrads g;
  g.dq = zeros({BH, Tq, D}, qt.dtype());
  g.dk = zeros({BH, Tk, D}, qt.dtype());
  g.dv = zeros({BH, Tk, Dv}, qt.dtype());
  if (want_dmask) g.dmask = zeros({BH, Tq, Tk}, qt.dtype());
  if (BH == 0 || Tq == 0 || Tk == 0) return g;
  const Tensor dout_c = dout_t.contiguous();
  const Mat3<T> q = mat3<T>(qt), k = mat3<T>(kt), v = mat3<T>(vt);
  const MaskReader<T> mask(maskt);
  const T* dO = dout_c.data<T>();
  const T* O = out_t.data<T>();
  const T* lse = lse_t.data<T>();
  T* dq = g.dq.data<T>();
  T* dk = g.dk.data<T>();
  T* dv = g.dv.data<T>();
  T* dm = want_dmask ? g.dmask.data<T>() : nullptr;
  const T keep_scale = p.dropout_p > 0 ? static_cast<T>(1.0 / (1.0 - p.dropout_p)) : T(1);
  const T scale = static_cast<T>(p.scale);
  // One task per batch-head: dk and dv sum over all query blocks of that head.
  for_tasks(BH, [&](int64_t b) {
    std::vector<T> P(static_cast<size_t>(kBlock * Tk)), dP(static_cast<size_t>(kBlock * Tk)), Dvec(kBlock);
    std::vector<T> Pd(p.dropout_p > 0 ? static_cast<size_t>(kBlock * Tk) : 0);
    DropoutRow drop(p);
    for (int64_t i0 = 0; i0 < Tq; i0 += kBlock) {
      const int64_t i1 = std::min(Tq, i0 + kBlock), rows = i1 - i0;
      const int64_t kn = p.causal ? std::min(Tk, i1) : Tk;
      if (kn == 0) continue;
      const T* dOb = dO + (b * Tq + i0) * Dv;
      // Dvec_r = dO_r . O_r  (= sum_j P_drop[r, j] dP_drop[r, j]).
      for (int64_t r = 0; r < rows; ++r) {
        T acc = 0;
        const T* a = dOb + r * Dv;
        const T* c = O + (b * Tq + i0 + r) * Dv;
        for (int64_t d = 0; d < Dv; ++d) acc += a[d] * c[d];
        Dvec[static_cast<size_t>(r)] = acc;
      }
      // Probabilities again, from the saved log-sum-exp.
      block_scores(q, k, mask, p, b, i0, i1, kn, D, P.data());
      attention_exp_minus_rows(P.data(), rows, kn, lse + b * Tq + i0);
      // dP_drop = dO V^T.
      gemm<T>(false, true, rows, kn, Dv, T(1), dOb, Dv, v.row(b, 0), v.sr, T(0), dP.data(), kn);
      if (p.dropout_p > 0) {
        // One pass over the keep mask: dP = dP_drop * keep / (1 - p), and the dropped
        // probabilities P_drop (for dV) beside them.
        for (int64_t r = 0; r < rows; ++r) {
          const uint64_t base = static_cast<uint64_t>((b * Tq + i0 + r) * Tk);
          const T* s = P.data() + r * kn;
          T* d = dP.data() + r * kn;
          T* pd = Pd.data() + r * kn;
          for (int64_t j = 0; j < kn; ++j) {
            const bool keep = drop.keep(base + static_cast<uint64_t>(j));
            d[j] = keep ? d[j] * keep_scale : T(0);
            pd[j] = keep ? s[j] * keep_scale : T(0);
          }
        }
      }
      // dV += P_drop^T dO.
      gemm<T>(true, false, kn, Dv, rows, T(1), p.dropout_p > 0 ? Pd.data() : P.data(), kn, dOb, Dv, T(1), dv + b * Tk * Dv,
              Dv);
      // dS = P * (dP - Dvec), in P's place.
      for (int64_t r = 0; r < rows; ++r) {
        T* s = P.data() + r * kn;
        const T* d = dP.data() + r * kn;
        const T dv_r = Dvec[static_cast<size_t>(r)];
        for (int64_t j = 0; j < kn; ++j) s[j] = s[j] * (d[j] - dv_r);
        if (dm) std::copy(s, s + kn, dm + (b * Tq + i0 + r) * Tk);
      }
      // dQ = scale dS K;  dK += scale dS^T Q.
      gemm<T>(false, false, rows, D, kn, scale, P.data(), kn, k.row(b, 0), k.sr, T(0), dq + (b * Tq + i0) * D, D);
      gemm<T>(true, false, kn, D, rows, scale, P.data(), kn, q.row(b, i0), q.sr, T(1), dk + b * Tk * D, D);
    }
  });
  return g;
}

}  // namespace

Tensor attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const AttentionParams& p,
                         Tensor& lse) {
  return TRIDENT_DISPATCH_F32_F64(q.dtype(), "scaled_dot_product_attention",
                                  [&] { return forward_typed<scalar_t>(q, k, v, mask, p, lse); });
}

AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                  const Tensor& out, const Tensor& lse, const AttentionParams& p, bool want_dmask) {
  return TRIDENT_DISPATCH_F32_F64(q.dtype(), "scaled_dot_product_attention backward", [&] {
    return backward_typed<scalar_t>(dout, q, k, v, mask, out, lse, p, want_dmask);
  });
}

}  // namespace trident::cpu
