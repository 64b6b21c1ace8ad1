#include "ops/cpu/softmax.h"

#include <cmath>

#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/isa.h"
#include "ops/cpu/rows.h"
#include "ops/math/softmax.h"

namespace trident::cpu {
namespace {

// ---- the softmax dim is innermost (inner == 1): one row at a time, in cache ----
// Forward: max, sum of exponentials (stored on the way for softmax), normalize: three sweeps
// over a row that stays in L1/L2, so memory sees one read and one write per element.

template <typename C>
inline void softmax_row(const C* x, C* y, int64_t n, bool log) {
  const C m = row_max(x, n);
  if (log) {
    const double s = row_sum<C>(n, [&](int64_t i) { return math::softmax_exp(static_cast<C>(x[i] - m)); });
    const C logs = static_cast<C>(std::log(s));
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = math::log_softmax_value(x[i], m, logs);
  } else {
    const double s = row_sum<C>(n, [&](int64_t i) {
      const C e = math::softmax_exp(static_cast<C>(x[i] - m));
      y[i] = e;
      return e;
    });
    const C inv = static_cast<C>(1.0 / s);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
}

// Backward: one reduction (sum(g * y), or sum(g)) and one element-wise sweep.
template <typename C>
inline void softmax_backward_row(const C* g, const C* y, C* gx, int64_t n, bool log) {
  if (log) {
    const C gsum = static_cast<C>(row_sum<C>(n, [&](int64_t i) { return g[i]; }));
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) gx[i] = math::log_softmax_grad(g[i], y[i], gsum);
  } else {
    const C dot = static_cast<C>(row_sum<C>(n, [&](int64_t i) { return g[i] * y[i]; }));
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) gx[i] = math::softmax_grad(g[i], y[i], dot);
  }
}

// ---- the softmax dim has inner elements after it: blocks of adjacent columns ----
// Each of kColBlock adjacent columns (positions along the inner dims) is one softmax of `len`
// elements at stride `inner`; walking the rows of a block reads memory sequentially and the
// column loop vectorizes. Column sums accumulate in f64 (this path is not the hot one; no
// block trick needed).
template <typename C>
inline void softmax_cols(const C* x, C* y, int64_t len, int64_t inner, int64_t nj, bool log) {
  C mx[kColBlock];
  double s[kColBlock];
  for (int64_t j = 0; j < nj; ++j) {
    mx[j] = -std::numeric_limits<C>::infinity();
    s[j] = 0;
  }
  for (int64_t l = 0; l < len; ++l) {
    const C* xr = x + l * inner;
#pragma omp simd
    for (int64_t j = 0; j < nj; ++j) mx[j] = xr[j] > mx[j] ? xr[j] : mx[j];
  }
  for (int64_t l = 0; l < len; ++l) {
    const C* xr = x + l * inner;
    C* yr = y + l * inner;
    if (log) {
#pragma omp simd
      for (int64_t j = 0; j < nj; ++j) s[j] += static_cast<double>(math::softmax_exp(static_cast<C>(xr[j] - mx[j])));
    } else {
#pragma omp simd
      for (int64_t j = 0; j < nj; ++j) {
        const C e = math::softmax_exp(static_cast<C>(xr[j] - mx[j]));
        yr[j] = e;
        s[j] += static_cast<double>(e);
      }
    }
  }
  C f[kColBlock];
  for (int64_t j = 0; j < nj; ++j) f[j] = static_cast<C>(log ? std::log(s[j]) : 1.0 / s[j]);
  for (int64_t l = 0; l < len; ++l) {
    const C* xr = x + l * inner;
    C* yr = y + l * inner;
    if (log) {
#pragma omp simd
      for (int64_t j = 0; j < nj; ++j) yr[j] = math::log_softmax_value(xr[j], mx[j], f[j]);
    } else {
#pragma omp simd
      for (int64_t j = 0; j < nj; ++j) yr[j] *= f[j];
    }
  }
}

template <typename C>
inline void softmax_backward_cols(const C* g, const C* y, C* gx, int64_t len, int64_t inner, int64_t nj, bool log) {
  double s[kColBlock];
  for (int64_t j = 0; j < nj; ++j) s[j] = 0;
  for (int64_t l = 0; l < len; ++l) {
    const C* gr = g + l * inner;
    const C* yr = y + l * inner;
    if (log) {
#pragma omp simd
      for (int64_t j = 0; j < nj; ++j) s[j] += static_cast<double>(gr[j]);
    } else {
#pragma omp simd
      for (int64_t j = 0; j < nj; ++j) s[j] += static_cast<double>(gr[j] * yr[j]);
    }
  }
  C sc[kColBlock];
  for (int64_t j = 0; j < nj; ++j) sc[j] = static_cast<C>(s[j]);
  for (int64_t l = 0; l < len; ++l) {
    const C* gr = g + l * inner;
    const C* yr = y + l * inner;
    C* o = gx + l * inner;
    if (log) {
#pragma omp simd
      for (int64_t j = 0; j < nj; ++j) o[j] = math::log_softmax_grad(gr[j], yr[j], sc[j]);
    } else {
#pragma omp simd
      for (int64_t j = 0; j < nj; ++j) o[j] = math::softmax_grad(gr[j], yr[j], sc[j]);
    }
  }
}

template <typename F>
void for_column_blocks(const RowGeometry& geo, const F& f) {
  const int64_t nb = (geo.inner + kColBlock - 1) / kColBlock;
  parallel_for(0, geo.outer * nb, rows_grain(geo.len * kColBlock), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / nb, j0 = (t % nb) * kColBlock;
      f(o * geo.len * geo.inner + j0, std::min(kColBlock, geo.inner - j0));
    }
  });
}

}  // namespace

// The f32 row loops, compiled for AVX2+FMA and for baseline x86-64 (NOTE [ISA clones]), and
// for AVX-512 (NOTE [AVX-512 kernels]).
TRIDENT_CPU_KERNEL(softmax_rows_f32, (const float* x, float* y, int64_t b, int64_t e, int64_t n, bool log), {
  for (int64_t r = b; r < e; ++r) softmax_row<float>(x + r * n, y + r * n, n, log);
})
TRIDENT_CPU_KERNEL(softmax_backward_rows_f32,
                   (const float* g, const float* y, float* gx, int64_t b, int64_t e, int64_t n, bool log), {
                     for (int64_t r = b; r < e; ++r) softmax_backward_row<float>(g + r * n, y + r * n, gx + r * n, n, log);
                   })
TRIDENT_CPU_KERNEL(softmax_cols_f32, (const float* x, float* y, int64_t len, int64_t inner, int64_t nj, bool log),
                   { softmax_cols<float>(x, y, len, inner, nj, log); })
TRIDENT_CPU_KERNEL(softmax_backward_cols_f32,
                   (const float* g, const float* y, float* gx, int64_t len, int64_t inner, int64_t nj, bool log),
                   { softmax_backward_cols<float>(g, y, gx, len, inner, nj, log); })

namespace {
inline void softmax_block(const float* x, float* y, int64_t len, int64_t inner, int64_t nj, bool log) {
  TRIDENT_CPU_PICK(softmax_cols_f32)(x, y, len, inner, nj, log);
}
inline void softmax_block(const double* x, double* y, int64_t len, int64_t inner, int64_t nj, bool log) {
  softmax_cols<double>(x, y, len, inner, nj, log);
}
inline void softmax_backward_block(const float* g, const float* y, float* gx, int64_t len, int64_t inner, int64_t nj,
                                   bool log) {
  TRIDENT_CPU_PICK(softmax_backward_cols_f32)(g, y, gx, len, inner, nj, log);
}
inline void softmax_backward_block(const double* g, const double* y, double* gx, int64_t len, int64_t inner, int64_t nj,
                                   bool log) {
  softmax_backward_cols<double>(g, y, gx, len, inner, nj, log);
}

// Rows [b, e): f32 goes through the clones, f64 through the plain template.
inline void softmax_rows(const float* x, float* y, int64_t b, int64_t e, int64_t n, bool log) {
  TRIDENT_CPU_PICK(softmax_rows_f32)(x, y, b, e, n, log);
}
inline void softmax_rows(const double* x, double* y, int64_t b, int64_t e, int64_t n, bool log) {
  for (int64_t r = b; r < e; ++r) softmax_row<double>(x + r * n, y + r * n, n, log);
}
inline void softmax_backward_rows(const float* g, const float* y, float* gx, int64_t b, int64_t e, int64_t n, bool log) {
  TRIDENT_CPU_PICK(softmax_backward_rows_f32)(g, y, gx, b, e, n, log);
}
inline void softmax_backward_rows(const double* g, const double* y, double* gx, int64_t b, int64_t e, int64_t n,
                                  bool log) {
  for (int64_t r = b; r < e; ++r) softmax_backward_row<double>(g + r * n, y + r * n, gx + r * n, n, log);
}
}  // namespace

Tensor softmax(const Tensor& x_in, int64_t dim, bool log) {
  // f16/bf16: computed in f32 (upcast at the boundary; NOTE [Accumulation]).
  if (is_reduced_float(x_in.dtype())) return softmax(x_in.to(DType::F32), dim, log).to(x_in.dtype());
  const Tensor x = x_in.contiguous();
  Tensor y = empty(x.sizes(), x.dtype());
  if (y.numel() == 0) return y;
  const RowGeometry geo(x.sizes(), dim);
  TRIDENT_DISPATCH_F32_F64(x.dtype(), "softmax", [&] {
    using C = scalar_t;
    const C* xp = x.data<C>();
    C* yp = y.data<C>();
    if (geo.inner == 1) {
      parallel_for(0, geo.outer, rows_grain(geo.len),
                   [&](int64_t b, int64_t e) { softmax_rows(xp, yp, b, e, geo.len, log); });
    } else {
      for_column_blocks(geo, [&](int64_t base, int64_t nj) { softmax_block(xp + base, yp + base, geo.len, geo.inner, nj, log); });
    }
  });
  return y;
}

Tensor softmax_backward(const Tensor& g_in, const Tensor& y_in, int64_t dim, bool log) {
  if (is_reduced_float(y_in.dtype()))
    return softmax_backward(g_in.to(DType::F32), y_in.to(DType::F32), dim, log).to(y_in.dtype());
  const Tensor g = g_in.contiguous(), y = y_in.contiguous();
  Tensor gx = empty(y.sizes(), y.dtype());
  if (gx.numel() == 0) return gx;
  const RowGeometry geo(y.sizes(), dim);
  TRIDENT_DISPATCH_F32_F64(y.dtype(), "softmax_backward", [&] {
    using C = scalar_t;
    const C* gp = g.data<C>();
    const C* yp = y.data<C>();
    C* op = gx.data<C>();
    if (geo.inner == 1) {
      parallel_for(0, geo.outer, rows_grain(geo.len),
                   [&](int64_t b, int64_t e) { softmax_backward_rows(gp, yp, op, b, e, geo.len, log); });
    } else {
      for_column_blocks(geo, [&](int64_t base, int64_t nj) {
        softmax_backward_block(gp + base, yp + base, op + base, geo.len, geo.inner, nj, log);
      });
    }
  });
  return gx;
}

}  // namespace trident::cpu
