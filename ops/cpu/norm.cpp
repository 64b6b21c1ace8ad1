#include "ops/cpu/norm.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include "core/copy.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/arith.h"
#include "ops/cpu/isa.h"
#include "ops/cpu/rows.h"
#include "ops/math/norm.h"

namespace trident::cpu {
namespace {

DType compute_dtype(DType t) { return is_reduced_float(t) ? DType::F32 : t; }

// Contiguous, in the compute dtype; an absent weight (bias) becomes ones (zeros) of `n` so the
// row loops need no branches.
Tensor compute_form(const Tensor& t, DType cd) { return t.to(cd).contiguous(); }

// Whether t, [n, channels, spatial...], is laid out as images of `channels` contiguous planes of
// `spatial` elements one after another (the image stride aside): t without its first dim is
// contiguous.
bool planes_in_order(const Tensor& t, int64_t n, int64_t channels, int64_t spatial) {
  if (t.dim() < 2 || t.size(0) != n || t.numel() != n * channels * spatial) return false;
  int64_t expected = 1;
  for (int64_t d = t.dim() - 1; d >= 1; --d) {
    if (t.size(d) != 1 && t.stride(d) != expected) return false;
    expected *= t.size(d);
  }
  return expected == channels * spatial && (n == 1 || t.stride(0) >= channels * spatial);
}
Tensor param_or(const Tensor& t, int64_t n, double fill, DType cd) {
  return t.defined() ? compute_form(t, cd) : full({n}, fill, cd);
}

// ============================================================================================
// Layer norm: one row of `cols` elements per (mean, rstd).
// ============================================================================================
template <typename C>
struct LnParams {
  const C* x = nullptr;
  const C* w = nullptr;
  const C* b = nullptr;
  const C* g = nullptr;  // backward
  C* y = nullptr;        // forward output / backward dx (null when dx is not wanted)
  C* mean = nullptr;  // forward outputs
  C* rstd = nullptr;
  const C* saved_mean = nullptr;  // backward inputs
  const C* saved_rstd = nullptr;
  int64_t cols = 0;
  C eps = 0;
};

// Forward of one row: mean, then the variance around it (two sweeps over a row in cache, more
// accurate than one-pass moments), then the normalized, scaled row.
template <typename C>
inline void ln_forward_row(const LnParams<C>& p, int64_t i) {
  const int64_t n = p.cols;
  const C* x = p.x + i * n;
  C* y = p.y + i * n;
  const C mu = static_cast<C>(row_sum<C>(n, [&](int64_t j) { return x[j]; }) / static_cast<double>(n));
  const double v = row_sum<C>(n, [&](int64_t j) {
    const C d = x[j] - mu;
    return d * d;
  });
  const C r = static_cast<C>(math::norm_rstd(v / static_cast<double>(n), static_cast<double>(p.eps)));
  const C* w = p.w;
  const C* b = p.b;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) y[j] = math::layer_norm_value(x[j], mu, r, w[j], b[j]);
  p.mean[i] = mu;
  p.rstd[i] = r;
}

// Backward of rows [rb, re): dx per row; dw and db accumulated into the f64 partials of this
// chunk. Per-element work is one fused sweep (xhat once, then dx, dw and db); dw and db first
// collect kRowBlock rows in the compute type, then flush to f64 (the blocking of NOTE [Row
// accumulation], across rows: the sweep keeps full vector width).
constexpr int64_t kRowBlock = 32;

template <typename C>
inline void ln_backward_rows(const LnParams<C>& p, int64_t rb, int64_t re, double* dw, double* db) {
  const int64_t n = p.cols;
  const C* w = p.w;
  const C inv_n = static_cast<C>(1.0 / static_cast<double>(n));
  std::vector<C> fdw(static_cast<size_t>(n), C(0)), fdb(static_cast<size_t>(n), C(0));
  C* pw = fdw.data();
  C* pb = fdb.data();
  for (int64_t i = rb; i < re; ++i) {
    const C* x = p.x + i * n;
    const C* g = p.g + i * n;
    const C mu = p.saved_mean[i], r = p.saved_rstd[i];
    C a = 0, c = 0;
    if (p.y != nullptr) {
      double sa = 0, sc = 0;
      row_sum2<C>(n, [&](int64_t j) { return g[j] * w[j]; },
                  [&](int64_t j) { return g[j] * w[j] * ((x[j] - mu) * r); }, sa, sc);
      a = static_cast<C>(sa) * inv_n;
      c = static_cast<C>(sc) * inv_n;
    }
    C* dx = p.y != nullptr ? p.y + i * n : nullptr;
    if (dx != nullptr) {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) {
        const C xhat = (x[j] - mu) * r;
        dx[j] = math::layer_norm_grad(g[j] * w[j], xhat, r, a, c);
        pw[j] += g[j] * xhat;
        pb[j] += g[j];
      }
    } else {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) {
        pw[j] += g[j] * ((x[j] - mu) * r);
        pb[j] += g[j];
      }
    }
    if ((i - rb) % kRowBlock == kRowBlock - 1 || i == re - 1) {
      for (int64_t j = 0; j < n; ++j) {
        if (dw != nullptr) dw[j] += static_cast<double>(pw[j]);
        if (db != nullptr) db[j] += static_cast<double>(pb[j]);
        pw[j] = pb[j] = C(0);
      }
    }
  }
}

}  // namespace

// The f32 row loops, compiled for AVX2+FMA and for baseline x86-64 (NOTE [ISA clones]), and for
// AVX-512 (NOTE [AVX-512 kernels]).
TRIDENT_CPU_KERNEL(layer_norm_rows_f32, (const LnParams<float>& p, int64_t b, int64_t e), {
  for (int64_t i = b; i < e; ++i) ln_forward_row(p, i);
})
TRIDENT_CPU_KERNEL(layer_norm_backward_rows_f32, (const LnParams<float>& p, int64_t rb, int64_t re, double* dw, double* db),
                   { ln_backward_rows(p, rb, re, dw, db); })

namespace {
inline void ln_forward_range(const LnParams<float>& p, int64_t b, int64_t e) { TRIDENT_CPU_PICK(layer_norm_rows_f32)(p, b, e); }
inline void ln_forward_range(const LnParams<double>& p, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) ln_forward_row(p, i);
}
inline void ln_backward_range(const LnParams<float>& p, int64_t b, int64_t e, double* dw, double* db) {
  TRIDENT_CPU_PICK(layer_norm_backward_rows_f32)(p, b, e, dw, db);
}
inline void ln_backward_range(const LnParams<double>& p, int64_t b, int64_t e, double* dw, double* db) {
  ln_backward_rows(p, b, e, dw, db);
}
}  // namespace

LayerNormForward layer_norm(const Tensor& x_in, int64_t rows, int64_t cols, const Tensor& weight, const Tensor& bias,
                            double eps) {
  const DType cd = compute_dtype(x_in.dtype());
  const Tensor x = compute_form(x_in, cd);
  const Tensor w = param_or(weight, cols, 1.0, cd), b = param_or(bias, cols, 0.0, cd);
  LayerNormForward out;
  out.y = empty(x.sizes(), cd);
  out.mean = empty({rows}, cd);
  out.rstd = empty({rows}, cd);
  if (rows == 0) return out;
  if (cols == 0) {  // no elements to normalize over: statistics are NaN, as 0 / 0 in PyTorch
    fill_(out.mean, std::nan(""));
    fill_(out.rstd, std::nan(""));
    return out;
  }
  TRIDENT_DISPATCH_F32_F64(cd, "layer_norm", [&] {
    using C = scalar_t;
    LnParams<C> p;
    p.x = x.data<C>();
    p.w = w.data<C>();
    p.b = b.data<C>();
    p.y = out.y.data<C>();
    p.mean = out.mean.data<C>();
    p.rstd = out.rstd.data<C>();
    p.cols = cols;
    p.eps = static_cast<C>(eps);
    parallel_for(0, rows, rows_grain(cols), [&](int64_t b0, int64_t e0) { ln_forward_range(p, b0, e0); });
  });
  return out;
}

// The sum first (the add kernel: rounded to x's dtype), then layer norm of it: the result of
// add then layer_norm, exactly. On the CPU the fusion is only the op's single autograd node; the
// pass it saves is a GPU's (ops/cuda/norm.cu).
AddLayerNormForward add_layer_norm(const Tensor& x, const Tensor& residual, int64_t rows, int64_t cols,
                                   const Tensor& weight, const Tensor& bias, double eps) {
  Tensor sum = binary(BinaryOp::Add, x, residual);
  LayerNormForward f = layer_norm(sum, rows, cols, weight, bias, eps);
  return {sum, f.y, f.mean, f.rstd};
}

NormGrads layer_norm_backward(const Tensor& g_in, const Tensor& x_in, const Tensor& mean, const Tensor& rstd,
                              const Tensor& weight, int64_t rows, int64_t cols, bool need_dx, bool need_dw,
                              bool need_db) {
  const DType cd = compute_dtype(x_in.dtype());
  const Tensor x = compute_form(x_in, cd), g = compute_form(g_in, cd);
  const Tensor w = param_or(weight, cols, 1.0, cd);
  NormGrads r;
  if (need_dx) r.dx = empty(x.sizes(), cd);
  // dw and db: rows are split into a fixed number of chunks (not one per thread), each with
  // its own f64 partial sums, added in chunk order: the result does not depend on the thread
  // count. The chunk count bounds the partials' memory to 2^22 doubles.
  const int64_t chunks =
      std::max<int64_t>(1, std::min<int64_t>({rows, 64, std::max<int64_t>(1, (int64_t{1} << 22) / std::max<int64_t>(cols, 1))}));
  // The partials come from the caching allocator and each chunk zeroes its own on its thread: a
  // std::vector here was two fresh, zeroed 384 KiB blocks per call at GPT-2's width, page faults
  // and a memset on one thread while the other waited (about 5% of a [4096, 768] forward +
  // backward).
  const Tensor pdw_t = need_dw ? empty({chunks, cols}, DType::F64) : Tensor();
  const Tensor pdb_t = need_db ? empty({chunks, cols}, DType::F64) : Tensor();
  double* pdw = need_dw ? pdw_t.data<double>() : nullptr;
  double* pdb = need_db ? pdb_t.data<double>() : nullptr;
  if (rows > 0 && cols > 0) {
    TRIDENT_DISPATCH_F32_F64(cd, "layer_norm_backward", [&] {
      using C = scalar_t;
      LnParams<C> p;
      p.x = x.data<C>();
      p.g = g.data<C>();
      p.w = w.data<C>();
      p.y = need_dx ? r.dx.data<C>() : nullptr;
      const Tensor mc = mean.contiguous(), rc = rstd.contiguous();
      p.saved_mean = mc.data<C>();
      p.saved_rstd = rc.data<C>();
      p.cols = cols;
      parallel_for(0, chunks, 1, [&](int64_t kb, int64_t ke) {
        for (int64_t k = kb; k < ke; ++k) {
          const int64_t rb = rows * k / chunks, re = rows * (k + 1) / chunks;
          double* kdw = need_dw ? pdw + k * cols : nullptr;
          double* kdb = need_db ? pdb + k * cols : nullptr;
          if (kdw != nullptr) std::fill_n(kdw, cols, 0.0);
          if (kdb != nullptr) std::fill_n(kdb, cols, 0.0);
          ln_backward_range(p, rb, re, kdw, kdb);
        }
      });
    });
  }
  // The chunks' partials added in chunk order (the same sums on any thread count), columns in
  // parallel.
  auto reduce_partials = [&](const double* part) {
    Tensor acc = empty({cols}, DType::F64);
    double* a = acc.data<double>();
    parallel_for(0, cols, 1024, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) a[j] = 0.0;
      for (int64_t k = 0; k < chunks && rows > 0; ++k)
        for (int64_t j = j0; j < j1; ++j) a[j] += part[k * cols + j];
    });
    return acc.to(cd);
  };
  if (need_dw) r.dw = reduce_partials(pdw);
  if (need_db) r.db = reduce_partials(pdb);
  if (need_dx && cols == 0) r.dx = empty(x.sizes(), cd);
  return r;
}

// ============================================================================================
// Batch norm: channel c owns the n planes x[i, c, :] of `spatial` contiguous elements.
// Statistics are parallel over channels (each channel summed by one thread, in a fixed order:
// planes with NOTE [Row accumulation]'s blocked f32 sums, added across planes in f64); the
// element-wise passes are parallel over the n * channels planes.
// ============================================================================================
namespace {

// The per-plane sums of the statistics and their gradients are functions of their own: inlined
// into the channel loops below, GCC left their f32 loops scalar (latency-bound, one element per
// 4 cycles; batch norm's backward took 10% of an AmoebaNet training step that way).
template <typename C>
__attribute__((noinline)) double plane_sum(const C* x, int64_t n) {
  return row_sum<C>(n, [x](int64_t j) { return x[j]; });
}
template <typename C>
__attribute__((noinline)) double plane_squared_deviation_sum(const C* x, C mu, int64_t n) {
  return row_sum<C>(n, [x, mu](int64_t j) {
    const C d = x[j] - mu;
    return d * d;
  });
}
// s1 = sum g, s2 = sum g (x - mu) rs over one plane of n elements.
template <typename C>
__attribute__((noinline)) void plane_grad_sums(const C* g, const C* x, C mu, C rs, int64_t n, double& s1, double& s2) {
  row_sum2<C>(n, [g](int64_t j) { return g[j]; }, [g, x, mu, rs](int64_t j) { return g[j] * ((x[j] - mu) * rs); }, s1, s2);
}

// A plane of x stored as S, as C values for the sums above: the plane itself when S is C; a bf16
// plane converted into buf (exactly), so that the sums run the very code, in the very order, of
// an f32 input (NOTE [bf16 batch norm]).
template <typename C, typename S>
const C* plane_values(const S* x, int64_t n, std::vector<C>& buf) {
  if constexpr (std::is_same_v<S, C>) {
    return x;
  } else {
    buf.resize(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) buf[static_cast<size_t>(j)] = static_cast<C>(x[j]);
    return buf.data();
  }
}

// sums[c - c0] += f(plane (i, c), c) for the channels [c0, c1) of every image i, in image order:
// each image's planes of those channels are one contiguous run (channel by channel, the reads
// jumped an image ahead every plane: a plane of a 28 x 28 map is 3 KB).
template <typename S, typename F>
void channel_sums(const S* x, int64_t n, int64_t channels, int64_t spatial, int64_t c0, int64_t c1, double* sums, const F& f) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = c0; c < c1; ++c) sums[c - c0] += f(x + (i * channels + c) * spatial, c);
}

template <typename F>
void for_planes(int64_t n, int64_t channels, int64_t spatial, const F& f) {
  parallel_for(0, n * channels, rows_grain(spatial), [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) f(k, k % channels);
  });
}

// NOTE [bf16 batch norm]: a bf16 input is read as it is (each element's exact f32 value) rather
// than through an f32 copy, and its input gradient is written in bf16 directly, rounded once
// from the same f32 value the copy's route would round: the same numbers without the two
// input-sized copies. autocast's batch norm on the CPU (NOTE [Autocast]) uses it to keep a bf16
// convolution output as it is (f32 out, as the policy says).
template <typename C, typename S>
void batch_norm_forward_typed(const S* xp, BatchNormForward& out, const Tensor& running_mean, const Tensor& running_var,
                              const Tensor& w, const Tensor& b, int64_t n, int64_t channels, int64_t spatial, bool training,
                              double eps) {
  const int64_t m = n * spatial;
  C* mean = out.mean.data<C>();
  C* rstd = out.rstd.data<C>();
  if (training) {
    C* var = out.var.data<C>();
    parallel_for(0, channels, std::max<int64_t>(1, 32768 / std::max<int64_t>(m, 1)), [&](int64_t cb, int64_t ce) {
      std::vector<double> sums(static_cast<size_t>(ce - cb), 0.0);
      std::vector<C> buf;
      channel_sums(xp, n, channels, spatial, cb, ce, sums.data(),
                   [spatial, &buf](const S* pl, int64_t) { return plane_sum<C>(plane_values(pl, spatial, buf), spatial); });
      for (int64_t c = cb; c < ce; ++c) mean[c] = static_cast<C>(sums[static_cast<size_t>(c - cb)] / static_cast<double>(m));
      std::fill(sums.begin(), sums.end(), 0.0);
      channel_sums(xp, n, channels, spatial, cb, ce, sums.data(),
                   [spatial, mean, &buf](const S* pl, int64_t c) {
                     return plane_squared_deviation_sum<C>(plane_values(pl, spatial, buf), mean[c], spatial);
                   });
      for (int64_t c = cb; c < ce; ++c) {
        const double v = sums[static_cast<size_t>(c - cb)] / static_cast<double>(m);
        var[c] = static_cast<C>(v);
        rstd[c] = static_cast<C>(math::norm_rstd(v, eps));
      }
    });
  } else {
    const Tensor rm = running_mean.to(DType::F64).contiguous(), rv = running_var.to(DType::F64).contiguous();
    const double* rmp = rm.data<double>();
    const double* rvp = rv.data<double>();
    for (int64_t c = 0; c < channels; ++c) {
      mean[c] = static_cast<C>(rmp[c]);
      rstd[c] = static_cast<C>(math::norm_rstd(rvp[c], eps));
    }
  }
  const C* wp = w.data<C>();
  const C* bp = b.data<C>();
  C* yp = out.y.data<C>();
  for_planes(n, channels, spatial, [&](int64_t k, int64_t c) {
    const S* xs = xp + k * spatial;
    C* ys = yp + k * spatial;
    const C mu = mean[c], scale = rstd[c] * wp[c], shift = bp[c];
#pragma omp simd
    for (int64_t j = 0; j < spatial; ++j) ys[j] = math::batch_norm_value(static_cast<C>(xs[j]), mu, scale, shift);
  });
}

}  // namespace

BatchNormForward batch_norm(const Tensor& x_in, int64_t n, int64_t channels, int64_t spatial, const Tensor& running_mean,
                            const Tensor& running_var, const Tensor& weight, const Tensor& bias, bool training,
                            double eps) {
  const DType cd = compute_dtype(x_in.dtype());
  const bool bf16_in = x_in.dtype() == DType::BF16;  // read as it is (NOTE [bf16 batch norm])
  const Tensor x = bf16_in ? x_in.contiguous() : compute_form(x_in, cd);
  const Tensor w = param_or(weight, channels, 1.0, cd), b = param_or(bias, channels, 0.0, cd);
  BatchNormForward out;
  out.y = empty(x.sizes(), cd);
  out.mean = empty({channels}, cd);
  out.rstd = empty({channels}, cd);
  if (training) out.var = empty({channels}, cd);
  TRIDENT_DISPATCH_F32_F64(cd, "batch_norm", [&] {
    using C = scalar_t;
    if constexpr (std::is_same_v<C, float>) {
      if (bf16_in)
        return batch_norm_forward_typed<C>(x.data<BFloat16>(), out, running_mean, running_var, w, b, n, channels, spatial,
                                           training, eps);
    }
    batch_norm_forward_typed<C>(x.data<C>(), out, running_mean, running_var, w, b, n, channels, spatial, training, eps);
  });
  return out;
}

namespace {
// dx (stored as S) and the per-channel sums of the backward pass, x stored as S.
// g's images are gstride elements apart (NOTE [Batch norm gradients of channel slices]).
template <typename C, typename S>
void batch_norm_backward_typed(const C* gp, int64_t gstride, const S* xp, const C* wp, const C* mp, const C* rp, S* dx, int64_t n,
                               int64_t channels, int64_t spatial, bool training, std::vector<double>& sg,
                               std::vector<double>& sgx) {
  const int64_t m = n * spatial;
  // Per channel: sum g and sum g * xhat (db and dw, and the training dx's coefficients).
  parallel_for(0, channels, std::max<int64_t>(1, 32768 / std::max<int64_t>(m, 1)), [&](int64_t cb, int64_t ce) {
    std::vector<C> buf;
    // Image by image, as channel_sums (the two sums of a plane at once).
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = cb; c < ce; ++c) {
        const int64_t off = (i * channels + c) * spatial;
        double s1 = 0, s2 = 0;
        plane_grad_sums<C>(gp + i * gstride + c * spatial, plane_values(xp + off, spatial, buf), mp[c], rp[c], spatial, s1, s2);
        sg[static_cast<size_t>(c)] += s1;
        sgx[static_cast<size_t>(c)] += s2;
      }
  });
  if (dx == nullptr) return;
  std::vector<C> A(static_cast<size_t>(channels)), B(static_cast<size_t>(channels)), D(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    const double wr = static_cast<double>(wp[c]) * static_cast<double>(rp[c]);
    const size_t cs = static_cast<size_t>(c);
    A[cs] = static_cast<C>(wr);
    B[cs] = training ? static_cast<C>(-wr * static_cast<double>(rp[c]) / static_cast<double>(m) * sgx[cs]) : C(0);
    D[cs] = training ? static_cast<C>(-wr / static_cast<double>(m) * sg[cs]) : C(0);
  }
  for_planes(n, channels, spatial, [&](int64_t k, int64_t c) {
    const int64_t off = k * spatial;
    const C* gs = gp + (k / channels) * gstride + c * spatial;
    const size_t cs = static_cast<size_t>(c);
    const C a = A[cs], bb = B[cs], d = D[cs], mu = mp[c];
    if constexpr (std::is_same_v<S, C>) {
#pragma omp simd
      for (int64_t j = 0; j < spatial; ++j) dx[off + j] = math::batch_norm_grad(gs[j], xp[off + j], mu, a, bb, d);
    } else {  // bf16: a run of f32 values, then rounded eight lanes at a time
      C run[256];
      for (int64_t j0 = 0; j0 < spatial; j0 += 256) {
        const int64_t len = std::min<int64_t>(256, spatial - j0);
#pragma omp simd
        for (int64_t j = 0; j < len; ++j)
          run[j] = math::batch_norm_grad(gs[j0 + j], static_cast<C>(xp[off + j0 + j]), mu, a, bb, d);
        convert_f32_to_bf16(run, dx + off + j0, len);
      }
    }
  });
}
}  // namespace

NormGrads batch_norm_backward(const Tensor& g_in, const Tensor& x_in, const Tensor& mean_in, const Tensor& rstd_in,
                              const Tensor& weight, int64_t n, int64_t channels, int64_t spatial, bool training,
                              bool need_dx, bool need_dw, bool need_db) {
  const DType cd = compute_dtype(x_in.dtype());
  const bool bf16_in = x_in.dtype() == DType::BF16;  // NOTE [bf16 batch norm]: dx in bf16 as well
  const Tensor x = bf16_in ? x_in.contiguous() : compute_form(x_in, cd);
  // NOTE [Batch norm gradients of channel slices]: a gradient whose images hold their planes one
  // after another (a channel slice of a larger tensor: what cat's backward hands AmoebaNet's
  // batch norms) is read in place, its images g.stride(0) apart, rather than copied contiguous:
  // those copies were 1.3% of AmoebaNet-D(6, 32)'s training step.
  const bool sliced = g_in.dtype() == cd && planes_in_order(g_in, n, channels, spatial);
  const Tensor g = sliced ? g_in : compute_form(g_in, cd);
  const int64_t gstride = sliced && n > 1 ? g_in.stride(0) : channels * spatial;
  const Tensor w = param_or(weight, channels, 1.0, cd);
  const Tensor mean = compute_form(mean_in, cd), rstd = compute_form(rstd_in, cd);
  NormGrads r;
  if (need_dx) r.dx = empty(x.sizes(), bf16_in ? DType::BF16 : cd);
  std::vector<double> sg(static_cast<size_t>(channels)), sgx(static_cast<size_t>(channels));
  TRIDENT_DISPATCH_F32_F64(cd, "batch_norm_backward", [&] {
    using C = scalar_t;
    const C* gp = g.data<C>();
    const C* wp = w.data<C>();
    const C* mp = mean.data<C>();
    const C* rp = rstd.data<C>();
    bool done = false;
    if constexpr (std::is_same_v<C, float>) {
      if (bf16_in) {
        batch_norm_backward_typed<C>(gp, gstride, x.data<BFloat16>(), wp, mp, rp, need_dx ? r.dx.data<BFloat16>() : nullptr, n, channels,
                                     spatial, training, sg, sgx);
        done = true;
      }
    }
    if (!done)
      batch_norm_backward_typed<C>(gp, gstride, x.data<C>(), wp, mp, rp, need_dx ? r.dx.data<C>() : nullptr, n, channels, spatial,
                                   training, sg, sgx);
  });
  if (need_dw) r.dw = from_vector<double>(sgx, {channels}).to(cd);
  if (need_db) r.db = from_vector<double>(sg, {channels}).to(cd);
  return r;
}

void batch_norm_update_running(const Tensor& running_mean, const Tensor& running_var, const Tensor& mean,
                               const Tensor& var, int64_t m, double momentum) {
  const std::vector<double> bm = mean.to_vector<double>(), bv = var.to_vector<double>();
  std::vector<double> rm = running_mean.to_vector<double>(), rv = running_var.to_vector<double>();
  const double unbias = static_cast<double>(m) / static_cast<double>(m - 1);
  for (size_t c = 0; c < rm.size(); ++c) {
    rm[c] = (1 - momentum) * rm[c] + momentum * bm[c];
    rv[c] = (1 - momentum) * rv[c] + momentum * bv[c] * unbias;
  }
  const Shape cshape = {static_cast<int64_t>(rm.size())};
  copy_(running_mean, from_vector<double>(rm, cshape));
  copy_(running_var, from_vector<double>(rv, cshape));
}

}  // namespace trident::cpu
