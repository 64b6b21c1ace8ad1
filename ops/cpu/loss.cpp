#include "ops/cpu/loss.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/copy.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "core/strided.h"
#include "ops/cpu/isa.h"
#include "ops/cpu/loops.h"
#include "ops/cpu/rows.h"
#include "ops/math/loss.h"

namespace trident::cpu {
namespace {

// f16/bf16 are computed in f32 (upcast at the boundary).
Tensor compute_form(const Tensor& t) {
  if (!t.defined()) return t;
  return (is_reduced_float(t.dtype()) ? t.to(DType::F32) : t).contiguous();
}

// ============================================================================================
// Cross-entropy: everything a kernel needs, as raw pointers into contiguous tensors.
// ============================================================================================
template <typename C>
struct CeParams {
  const C* x = nullptr;        // logits [n, classes, inner]
  const int64_t* t = nullptr;  // targets [n, inner]
  const C* w = nullptr;        // class weights [classes], or null for all ones
  int64_t n = 0, classes = 0, inner = 1, ignore = -100;
  C eps = 0;      // label smoothing
  C w_total = 0;  // sum of the class weights (the class count without weights)
  // forward outputs, per position
  C* loss = nullptr;
  C* m = nullptr;
  C* logs = nullptr;
  // backward inputs and output
  const C* saved_m = nullptr;
  const C* saved_logs = nullptr;
  const C* g = nullptr;
  bool g_per_position = false;
  C scale = 1;
  C* gx = nullptr;

  int64_t col_blocks() const { return (inner + kColBlock - 1) / kColBlock; }
  // Parallel tasks: rows when the class dim is innermost, else (row, block of positions).
  int64_t tasks() const { return inner == 1 ? n : n * col_blocks(); }
  C upstream(int64_t pos) const { return (g_per_position ? g[pos] : g[0]) * scale; }
};

// ---- the class dim is innermost: one row of logits per position ----

template <typename C>
inline void ce_forward_row(const CeParams<C>& p, int64_t i) {
  const int64_t t = p.t[i];
  if (t == p.ignore) {
    p.loss[i] = p.m[i] = p.logs[i] = 0;
    return;
  }
  const int64_t nc = p.classes;
  const C* x = p.x + i * nc;
  const C m = row_max(x, nc);
  auto e = [&](int64_t c) { return math::softmax_exp(static_cast<C>(x[c] - m)); };
  double s = 0, smooth = 0;
  if (p.eps == C(0)) {
    s = row_sum<C>(nc, e);
  } else if (p.w == nullptr) {
    row_sum2<C>(nc, e, [&](int64_t c) { return static_cast<C>(m - x[c]); }, s, smooth);
  } else {
    const C* w = p.w;
    row_sum2<C>(nc, e, [&](int64_t c) { return static_cast<C>(w[c] * (m - x[c])); }, s, smooth);
  }
  const C logs = static_cast<C>(std::log(s));
  const C w_t = p.w ? p.w[t] : C(1);
  p.loss[i] = math::cross_entropy_loss<C>(m - x[t], logs, w_t, static_cast<C>(smooth), p.w_total, p.eps,
                                          static_cast<C>(nc));
  p.m[i] = m;
  p.logs[i] = logs;
}

template <typename C>
inline void ce_backward_row(const CeParams<C>& p, int64_t i) {
  const int64_t nc = p.classes;
  C* gx = p.gx + i * nc;
  const int64_t t = p.t[i];
  if (t == p.ignore) {
#pragma omp simd
    for (int64_t c = 0; c < nc; ++c) gx[c] = 0;
    return;
  }
  const C* x = p.x + i * nc;
  const C s = p.upstream(i);
  const C w_t = p.w ? p.w[t] : C(1);
  const C cn = static_cast<C>(nc);
  const C a = s * ((C(1) - p.eps) * w_t + p.eps * p.w_total / cn);
  const C b = s * p.eps / cn;
  const C m = p.saved_m[i], logs = p.saved_logs[i];
  if (p.w == nullptr) {
#pragma omp simd
    for (int64_t c = 0; c < nc; ++c) gx[c] = math::cross_entropy_grad(math::softmax_exp(static_cast<C>((x[c] - m) - logs)), a, b);
  } else {
    const C* w = p.w;
#pragma omp simd
    for (int64_t c = 0; c < nc; ++c)
      gx[c] = math::cross_entropy_grad(math::softmax_exp(static_cast<C>((x[c] - m) - logs)), a, static_cast<C>(b * w[c]));
  }
  gx[t] -= s * (C(1) - p.eps) * w_t;
}

// ---- the class dim has positions after it ([n, C, d1, ...]): blocks of adjacent positions ----
// Walking the classes of a block reads memory row by row and the position loop vectorizes
// (the same layout as softmax's column blocks). Column sums accumulate in f64.

template <typename C>
inline void ce_forward_cols(const CeParams<C>& p, int64_t ni, int64_t j0, int64_t nj) {
  const int64_t D = p.inner, nc = p.classes;
  const C* x = p.x + ni * nc * D + j0;
  C mx[kColBlock];
  double s[kColBlock], sm[kColBlock];
  for (int64_t j = 0; j < nj; ++j) {
    mx[j] = -std::numeric_limits<C>::infinity();
    s[j] = sm[j] = 0;
  }
  for (int64_t c = 0; c < nc; ++c) {
    const C* xr = x + c * D;
#pragma omp simd
    for (int64_t j = 0; j < nj; ++j) mx[j] = xr[j] > mx[j] ? xr[j] : mx[j];
  }
  for (int64_t c = 0; c < nc; ++c) {
    const C* xr = x + c * D;
#pragma omp simd
    for (int64_t j = 0; j < nj; ++j) s[j] += static_cast<double>(math::softmax_exp(static_cast<C>(xr[j] - mx[j])));
    if (p.eps != C(0)) {
      const C wc = p.w ? p.w[c] : C(1);
#pragma omp simd
      for (int64_t j = 0; j < nj; ++j) sm[j] += static_cast<double>(wc * (mx[j] - xr[j]));
    }
  }
  for (int64_t j = 0; j < nj; ++j) {
    const int64_t pos = ni * D + j0 + j;
    const int64_t t = p.t[pos];
    if (t == p.ignore) {
      p.loss[pos] = p.m[pos] = p.logs[pos] = 0;
      continue;
    }
    const C logs = static_cast<C>(std::log(s[j]));
    const C w_t = p.w ? p.w[t] : C(1);
    p.loss[pos] = math::cross_entropy_loss<C>(mx[j] - x[t * D + j], logs, w_t, static_cast<C>(sm[j]), p.w_total, p.eps,
                                              static_cast<C>(nc));
    p.m[pos] = mx[j];
    p.logs[pos] = logs;
  }
}

template <typename C>
inline void ce_backward_cols(const CeParams<C>& p, int64_t ni, int64_t j0, int64_t nj) {
  const int64_t D = p.inner, nc = p.classes;
  const C* x = p.x + ni * nc * D + j0;
  C* gx = p.gx + ni * nc * D + j0;
  C a[kColBlock], b[kColBlock], m[kColBlock], logs[kColBlock];
  bool any_ignored = false;
  const C cn = static_cast<C>(nc);
  for (int64_t j = 0; j < nj; ++j) {
    const int64_t pos = ni * D + j0 + j;
    const int64_t t = p.t[pos];
    if (t == p.ignore) {
      a[j] = b[j] = m[j] = logs[j] = 0;
      any_ignored = true;
      continue;
    }
    const C s = p.upstream(pos);
    const C w_t = p.w ? p.w[t] : C(1);
    a[j] = s * ((C(1) - p.eps) * w_t + p.eps * p.w_total / cn);
    b[j] = s * p.eps / cn;
    m[j] = p.saved_m[pos];
    logs[j] = p.saved_logs[pos];
  }
  for (int64_t c = 0; c < nc; ++c) {
    const C* xr = x + c * D;
    C* gr = gx + c * D;
    const C wc = p.w ? p.w[c] : C(1);
#pragma omp simd
    for (int64_t j = 0; j < nj; ++j)
      gr[j] = math::cross_entropy_grad(math::softmax_exp(static_cast<C>((xr[j] - m[j]) - logs[j])), a[j],
                                       static_cast<C>(b[j] * wc));
  }
  for (int64_t j = 0; j < nj; ++j) {
    const int64_t pos = ni * D + j0 + j;
    const int64_t t = p.t[pos];
    if (t == p.ignore) continue;
    const C w_t = p.w ? p.w[t] : C(1);
    gx[t * D + j] -= p.upstream(pos) * (C(1) - p.eps) * w_t;
  }
  if (any_ignored) {  // exactly 0 there, even where e^x overflowed (0 * inf)
    for (int64_t j = 0; j < nj; ++j) {
      if (p.t[ni * D + j0 + j] != p.ignore) continue;
      for (int64_t c = 0; c < nc; ++c) gx[c * D + j] = 0;
    }
  }
}

template <typename C>
inline void ce_forward_tasks(const CeParams<C>& p, int64_t b, int64_t e) {
  if (p.inner == 1) {
    for (int64_t i = b; i < e; ++i) ce_forward_row(p, i);
    return;
  }
  const int64_t nb = p.col_blocks();
  for (int64_t k = b; k < e; ++k) {
    const int64_t j0 = (k % nb) * kColBlock;
    ce_forward_cols(p, k / nb, j0, std::min(kColBlock, p.inner - j0));
  }
}

template <typename C>
inline void ce_backward_tasks(const CeParams<C>& p, int64_t b, int64_t e) {
  if (p.inner == 1) {
    for (int64_t i = b; i < e; ++i) ce_backward_row(p, i);
    return;
  }
  const int64_t nb = p.col_blocks();
  for (int64_t k = b; k < e; ++k) {
    const int64_t j0 = (k % nb) * kColBlock;
    ce_backward_cols(p, k / nb, j0, std::min(kColBlock, p.inner - j0));
  }
}

}  // namespace

// The f32 kernels, compiled for AVX2+FMA and for baseline x86-64 (NOTE [ISA clones]), and for
// AVX-512 (NOTE [AVX-512 kernels]).
TRIDENT_CPU_KERNEL(cross_entropy_forward_f32, (const CeParams<float>& p, int64_t b, int64_t e), { ce_forward_tasks(p, b, e); })
TRIDENT_CPU_KERNEL(cross_entropy_backward_f32, (const CeParams<float>& p, int64_t b, int64_t e), { ce_backward_tasks(p, b, e); })

namespace {
inline void ce_forward_range(const CeParams<float>& p, int64_t b, int64_t e) { TRIDENT_CPU_PICK(cross_entropy_forward_f32)(p, b, e); }
inline void ce_forward_range(const CeParams<double>& p, int64_t b, int64_t e) { ce_forward_tasks(p, b, e); }
inline void ce_backward_range(const CeParams<float>& p, int64_t b, int64_t e) { TRIDENT_CPU_PICK(cross_entropy_backward_f32)(p, b, e); }
inline void ce_backward_range(const CeParams<double>& p, int64_t b, int64_t e) { ce_backward_tasks(p, b, e); }

template <typename C>
CeParams<C> ce_params(const C* x, const Tensor& t, const Tensor& w, const ClassLossArgs& args) {
  CeParams<C> p;
  p.x = x;
  p.t = t.data<int64_t>();
  p.w = w.defined() ? w.data<C>() : nullptr;
  p.n = args.n;
  p.classes = args.classes;
  p.inner = args.inner;
  p.ignore = args.ignore_index;
  p.eps = static_cast<C>(args.label_smoothing);
  double wt = static_cast<double>(args.classes);
  if (p.w) {
    wt = 0;
    for (int64_t c = 0; c < args.classes; ++c) wt += static_cast<double>(p.w[c]);
  }
  p.w_total = static_cast<C>(wt);
  return p;
}

// Sum of w[t] over positions not ignored, and of the per-position losses, in f64 (serial: a
// pass over n * inner numbers, deterministic for any thread count).
template <typename C>
void totals(const int64_t* t, const C* w, const C* loss, int64_t npos, int64_t ignore, double& loss_sum,
            double& total_weight) {
  loss_sum = 0;
  total_weight = 0;
  for (int64_t i = 0; i < npos; ++i) {
    loss_sum += static_cast<double>(loss[i]);
    if (t[i] != ignore) total_weight += w ? static_cast<double>(w[t[i]]) : 1.0;
  }
}

// NOTE [Half-precision cross-entropy rows]: f16/bf16 logits with the class dim innermost (a
// language model's [positions, vocabulary]) are read as they are: each row converted into an f32
// buffer, run through the f32 row kernel as a one-row problem, and (backward) its f32 gradient
// rounded into the half-precision output row. The numbers are those of upcasting the whole
// tensor first (the same f32 values through the same kernel, rounded once), without the two
// logits-sized f32 copies: autocast's loss on GPT-2's [1024, 50304] bf16 logits went from
// widening them (and rounding the f32 gradient back) to this.
template <typename T>
void half_row_to_f32(const T* x, float* out, int64_t n) {
  for (int64_t c = 0; c < n; ++c) out[c] = static_cast<float>(x[c]);
}

// Row i of p as a one-row problem over the f32 copy `row` of its logits.
inline CeParams<float> one_row(const CeParams<float>& p, int64_t i, const float* row) {
  CeParams<float> q = p;
  q.x = row;
  q.n = 1;
  q.t = p.t + i;
  if (p.loss != nullptr) {  // forward
    q.loss = p.loss + i;
    q.m = p.m + i;
    q.logs = p.logs + i;
  } else {  // backward
    q.saved_m = p.saved_m + i;
    q.saved_logs = p.saved_logs + i;
    if (p.g_per_position) q.g = p.g + i;
  }
  return q;
}

template <typename T>
void ce_forward_half_rows(const CeParams<float>& p, const T* xh, int64_t b, int64_t e) {
  std::vector<float> row(static_cast<size_t>(p.classes));
  for (int64_t i = b; i < e; ++i) {
    half_row_to_f32(xh + i * p.classes, row.data(), p.classes);
    ce_forward_range(one_row(p, i, row.data()), 0, 1);
  }
}

template <typename T>
void ce_backward_half_rows(const CeParams<float>& p, const T* xh, T* gh, int64_t b, int64_t e) {
  std::vector<float> row(static_cast<size_t>(p.classes)), grad(static_cast<size_t>(p.classes));
  for (int64_t i = b; i < e; ++i) {
    half_row_to_f32(xh + i * p.classes, row.data(), p.classes);
    CeParams<float> q = one_row(p, i, row.data());
    q.gx = grad.data();
    ce_backward_range(q, 0, 1);
    T* out = gh + i * p.classes;
    // bf16 eight lanes at a time: GPT-2's [1024, 50304] backward 26.7-29.7 -> 23.6-25.3 ms (alternating runs).
    if constexpr (std::is_same_v<T, BFloat16>) {
      convert_f32_to_bf16(grad.data(), out, p.classes);
    } else {
      for (int64_t c = 0; c < p.classes; ++c) out[c] = T(grad[static_cast<size_t>(c)]);
    }
  }
}

}  // namespace

int64_t first_invalid_target(const Tensor& target, int64_t classes, int64_t ignore_index) {
  // Serial, so the first bad one is the one reported.
  const Tensor tc = target.contiguous();
  const int64_t* tp = tc.data<int64_t>();
  for (int64_t i = 0; i < tc.numel(); ++i) {
    const int64_t t = tp[i];
    if (t != ignore_index && (t < 0 || t >= classes)) return i;
  }
  return -1;
}

CrossEntropyForward cross_entropy_forward(const Tensor& logits_in, const Tensor& target_in, const Tensor& weight_in,
                                          const ClassLossArgs& args) {
  const int64_t npos = args.n * args.inner;
  if (is_reduced_float(logits_in.dtype()) && args.inner == 1 && args.classes > 0) {  // NOTE [Half-precision cross-entropy rows]
    const Tensor xh = logits_in.contiguous(), w = compute_form(weight_in), t = target_in.contiguous();
    CrossEntropyForward out;
    out.loss = empty({npos}, DType::F32);
    out.row_max = empty({npos}, DType::F32);
    out.row_logsum = empty({npos}, DType::F32);
    CeParams<float> p = ce_params<float>(nullptr, t, w, args);
    p.loss = out.loss.data<float>();
    p.m = out.row_max.data<float>();
    p.logs = out.row_logsum.data<float>();
    TRIDENT_DISPATCH_FLOATING(xh.dtype(), "cross_entropy", [&] {
      if constexpr (sizeof(scalar_t) == 2) {
        const auto* x = xh.data<scalar_t>();
        parallel_for(0, args.n, rows_grain(args.classes), [&](int64_t b, int64_t e) { ce_forward_half_rows(p, x, b, e); });
      }
    });
    totals(p.t, p.w, p.loss, npos, p.ignore, out.loss_sum, out.total_weight);
    return out;
  }
  const Tensor x = compute_form(logits_in), w = compute_form(weight_in), t = target_in.contiguous();
  CrossEntropyForward out;
  out.loss = empty({npos}, x.dtype());
  out.row_max = empty({npos}, x.dtype());
  out.row_logsum = empty({npos}, x.dtype());
  TRIDENT_DISPATCH_F32_F64(x.dtype(), "cross_entropy", [&] {
    using C = scalar_t;
    CeParams<C> p = ce_params<C>(x.data<C>(), t, w, args);
    p.loss = out.loss.data<C>();
    p.m = out.row_max.data<C>();
    p.logs = out.row_logsum.data<C>();
    if (args.classes > 0) {
      parallel_for(0, p.tasks(), rows_grain(args.inner == 1 ? args.classes : args.classes * kColBlock),
                   [&](int64_t b, int64_t e) { ce_forward_range(p, b, e); });
    } else {
      for (int64_t i = 0; i < npos; ++i) p.loss[i] = p.m[i] = p.logs[i] = 0;
    }
    totals(p.t, p.w, p.loss, npos, p.ignore, out.loss_sum, out.total_weight);
  });
  return out;
}

Tensor cross_entropy_backward(const Tensor& g_in, double scale, const Tensor& logits_in, const Tensor& target_in,
                              const Tensor& weight_in, const Tensor& row_max, const Tensor& row_logsum,
                              const ClassLossArgs& args) {
  if (is_reduced_float(logits_in.dtype()) && args.inner == 1 && args.classes > 0) {  // NOTE [Half-precision cross-entropy rows]
    const Tensor xh = logits_in.contiguous(), w = compute_form(weight_in), t = target_in.contiguous();
    const Tensor g = g_in.to(DType::F32).contiguous();
    Tensor gx = empty({args.n, args.classes, args.inner}, xh.dtype());
    if (gx.numel() == 0) return gx;
    CeParams<float> p = ce_params<float>(nullptr, t, w, args);
    const Tensor rm = row_max.to(DType::F32).contiguous(), rl = row_logsum.to(DType::F32).contiguous();
    p.saved_m = rm.data<float>();
    p.saved_logs = rl.data<float>();
    p.g = g.data<float>();
    p.g_per_position = g.numel() != 1 || args.n * args.inner == 1;
    p.scale = static_cast<float>(scale);
    TRIDENT_DISPATCH_FLOATING(xh.dtype(), "cross_entropy_backward", [&] {
      if constexpr (sizeof(scalar_t) == 2) {
        const auto* x = xh.data<scalar_t>();
        auto* out = gx.data<scalar_t>();
        parallel_for(0, args.n, rows_grain(args.classes), [&](int64_t b, int64_t e) { ce_backward_half_rows(p, x, out, b, e); });
      }
    });
    return gx;
  }
  const Tensor x = compute_form(logits_in), w = compute_form(weight_in), t = target_in.contiguous();
  const Tensor g = compute_form(g_in.to(x.dtype()));
  Tensor gx = empty({args.n, args.classes, args.inner}, x.dtype());
  if (gx.numel() == 0) return gx;
  TRIDENT_DISPATCH_F32_F64(x.dtype(), "cross_entropy_backward", [&] {
    using C = scalar_t;
    CeParams<C> p = ce_params<C>(x.data<C>(), t, w, args);
    const Tensor rm = row_max.contiguous(), rl = row_logsum.contiguous();
    p.saved_m = rm.data<C>();
    p.saved_logs = rl.data<C>();
    p.g = g.data<C>();
    p.g_per_position = g.numel() != 1 || args.n * args.inner == 1;
    p.scale = static_cast<C>(scale);
    p.gx = gx.data<C>();
    parallel_for(0, p.tasks(), rows_grain(args.inner == 1 ? args.classes : args.classes * kColBlock),
                 [&](int64_t b, int64_t e) { ce_backward_range(p, b, e); });
  });
  return gx;
}

// ============================================================================================
// NLL loss: one gather per position.
// ============================================================================================

NllLossForward nll_loss_forward(const Tensor& lp_in, const Tensor& target_in, const Tensor& weight_in,
                                const ClassLossArgs& args) {
  const Tensor lp = compute_form(lp_in), w = compute_form(weight_in), t = target_in.contiguous();
  const int64_t npos = args.n * args.inner, D = args.inner, nc = args.classes;
  NllLossForward out;
  out.loss = empty({npos}, lp.dtype());
  TRIDENT_DISPATCH_F32_F64(lp.dtype(), "nll_loss", [&] {
    using C = scalar_t;
    const C* x = lp.data<C>();
    const C* wp = w.defined() ? w.data<C>() : nullptr;
    const int64_t* tp = t.data<int64_t>();
    C* loss = out.loss.data<C>();
    for (int64_t pos = 0; pos < npos; ++pos) {
      const int64_t tt = tp[pos];
      if (tt == args.ignore_index) {
        loss[pos] = 0;
        continue;
      }
      const int64_t ni = pos / D, j = pos % D;
      loss[pos] = -(wp ? wp[tt] : C(1)) * x[(ni * nc + tt) * D + j];
    }
    totals(tp, wp, loss, npos, args.ignore_index, out.loss_sum, out.total_weight);
  });
  return out;
}

Tensor nll_loss_backward(const Tensor& g_in, double scale, const Tensor& target_in, const Tensor& weight_in,
                         const ClassLossArgs& args, DType dtype) {
  const DType cd = is_reduced_float(dtype) ? DType::F32 : dtype;
  const Tensor w = compute_form(weight_in), t = target_in.contiguous();
  const Tensor g = compute_form(g_in.to(cd));
  Tensor gx = zeros({args.n, args.classes, args.inner}, cd);
  const int64_t npos = args.n * args.inner, D = args.inner, nc = args.classes;
  TRIDENT_DISPATCH_F32_F64(cd, "nll_loss_backward", [&] {
    using C = scalar_t;
    const C* gp = g.data<C>();
    const C* wp = w.defined() ? w.data<C>() : nullptr;
    const int64_t* tp = t.data<int64_t>();
    C* o = gx.data<C>();
    const bool per_position = g.numel() != 1 || npos == 1;
    for (int64_t pos = 0; pos < npos; ++pos) {
      const int64_t tt = tp[pos];
      if (tt == args.ignore_index) continue;
      const int64_t ni = pos / D, j = pos % D;
      o[(ni * nc + tt) * D + j] = -(wp ? wp[tt] : C(1)) * (per_position ? gp[pos] : gp[0]) * static_cast<C>(scale);
    }
  });
  return gx;
}

// ============================================================================================
// Binary cross-entropy with logits: element-wise, pos_weight broadcast.
// ============================================================================================

namespace {
// pos_weight read with broadcast strides (a one-element tensor of 1 when absent).
Tensor pos_weight_or_one(const Tensor& pw, DType dtype) { return pw.defined() ? compute_form(pw) : ones({}, dtype); }
}  // namespace

Tensor bce_with_logits(const Tensor& x_in, const Tensor& y_in, const Tensor& pw_in) {
  const Tensor x = compute_form(x_in), y = compute_form(y_in);
  const Tensor pw = pos_weight_or_one(pw_in, x.dtype());
  Tensor out = empty(x.sizes(), x.dtype());
  TRIDENT_DISPATCH_F32_F64(x.dtype(), "binary_cross_entropy_with_logits", [&] {
    using C = scalar_t;
    StridedLoop<4> loop(x.sizes(), {out.strides(), x.strides(), y.strides(),
                                    broadcast_strides(pw.sizes(), pw.strides(), x.sizes())});
    C* o = out.data<C>();
    const C* xp = x.data<C>();
    const C* yp = y.data<C>();
    const C* wp = pw.data<C>();
    loop.run([&](const std::array<int64_t, 4>& off, int64_t n, const std::array<int64_t, 4>& st) {
      for (int64_t i = 0; i < n; ++i)
        o[off[0] + i * st[0]] =
            math::bce_with_logits(xp[off[1] + i * st[1]], yp[off[2] + i * st[2]], wp[off[3] + i * st[3]]);
    });
  });
  return out;
}

std::pair<Tensor, Tensor> bce_with_logits_backward(const Tensor& g_in, double scale, const Tensor& x_in,
                                                   const Tensor& y_in, const Tensor& pw_in, bool need_x, bool need_y) {
  const Tensor x = compute_form(x_in), y = compute_form(y_in);
  const Tensor pw = pos_weight_or_one(pw_in, x.dtype());
  const Tensor g = compute_form(g_in.to(x.dtype()));
  std::pair<Tensor, Tensor> r;
  TRIDENT_DISPATCH_F32_F64(x.dtype(), "binary_cross_entropy_with_logits_backward", [&] {
    using C = scalar_t;
    const C* xp = x.data<C>();
    const C* yp = y.data<C>();
    const C* wp = pw.data<C>();
    const C* gp = g.data<C>();
    const C sc = static_cast<C>(scale);
    const Shape pws = broadcast_strides(pw.sizes(), pw.strides(), x.sizes());
    const Shape gs = broadcast_strides(g.sizes(), g.strides(), x.sizes());
    auto run = [&](Tensor& out, auto grad_fn) {
      out = empty(x.sizes(), x.dtype());
      C* o = out.data<C>();
      StridedLoop<5> loop(x.sizes(), {out.strides(), x.strides(), y.strides(), pws, gs});
      loop.run([&](const std::array<int64_t, 5>& off, int64_t n, const std::array<int64_t, 5>& st) {
        for (int64_t i = 0; i < n; ++i)
          o[off[0] + i * st[0]] = grad_fn(gp[off[4] + i * st[4]] * sc, xp[off[1] + i * st[1]], yp[off[2] + i * st[2]],
                                          wp[off[3] + i * st[3]]);
      });
    };
    if (need_x) run(r.first, [](C gg, C xx, C yy, C ww) { return math::bce_with_logits_grad_input(gg, xx, yy, ww); });
    if (need_y) run(r.second, [](C gg, C xx, C yy, C ww) { return math::bce_with_logits_grad_target(gg, xx, yy, ww); });
  });
  return r;
}

// ============================================================================================
// Squared error.
// ============================================================================================

Tensor squared_error(const Tensor& a, const Tensor& b) {
  Tensor out = empty(broadcast_shapes(a.sizes(), b.sizes(), "mse_loss"), a.dtype());
  TRIDENT_DISPATCH_FLOATING(a.dtype(), "mse_loss", [&] {
    binary_loop<scalar_t, scalar_t>(out, a, b, [](auto u, auto v) { return math::squared_error(u, v); });
  });
  return out;
}

namespace {
template <typename C>
double squared_error_sum_contiguous(const C* a, const C* b, int64_t n) {
  // Fixed chunks, summed in order: the same result for any thread count.
  constexpr int64_t kChunk = 1 << 16;
  const int64_t nchunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(nchunks), 0.0);
  parallel_for(0, nchunks, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t k = cb; k < ce; ++k) {
      const int64_t s = k * kChunk, len = std::min(kChunk, n - s);
      partial[static_cast<size_t>(k)] =
          row_sum<C>(len, [&](int64_t i) { return math::squared_error(a[s + i], b[s + i]); });
    }
  });
  double total = 0;
  for (double v : partial) total += v;
  return total;
}
}  // namespace

double squared_error_sum(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = compute_form(a_in), b = compute_form(b_in);
  return TRIDENT_DISPATCH_F32_F64(a.dtype(), "mse_loss", [&] {
    return squared_error_sum_contiguous(a.data<scalar_t>(), b.data<scalar_t>(), a.numel());
  });
}

}  // namespace trident::cpu
