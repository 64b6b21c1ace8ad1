#include "ops/cpu/conv.h"

#include <cblas.h>

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/window.h"

namespace trident::cpu {

// NOTE [Conv2d algorithms]
// - Depthwise (groups == C, one input channel per group, O = C x multiplier): each output
//   plane is a weighted sum of kH x kW shifted copies of one input plane. im2col would build a
//   [kH kW, OH OW] matrix per channel only to multiply it by a 1 x kH kW row; the direct loops
//   instead sweep an output row once per tap (y_row[ow] += w * x_row[ow * sw + off] over the
//   valid ow), which is unit-stride and vectorizes when sw == 1. Threads take whole planes.
// - Pointwise (1x1, stride 1, no padding): the input of sample n, group g *is* its im2col
//   matrix [C/g, H W], so forward and both backward passes are one GEMM each, no copies.
// - General: per (sample, group) unit, im2col into a [C/g kH kW, OH OW] workspace and GEMM
//   with the [O/g, C/g kH kW] weight; backward input is the transposed GEMM then col2im (the
//   adjoint scatter), backward weight is gy @ col^T accumulated over the batch.
// GEMMs run in the tensor's type (f32 or f64), so f32 accumulates in f32 like every BLAS-based
// convolution (PyTorch's and cuDNN's included); sums over the batch in the weight gradient
// accumulate in f32 through GEMM's beta = 1. The depthwise weight and bias gradients, which
// sum over N OH OW terms with no GEMM, add f32 row sums into f64 accumulators so that long
// batches do not drift.
//
// NOTE [Conv2d threads]
// OpenBLAS threads each GEMM itself (the pthread build Trident links: its own pool, sized by
// set_num_threads, NOTE [Threads]). Calling a GEMM that OpenBLAS would thread from inside a
// parallel_for would put threads x threads workers on the cores, so the GEMM paths choose:
// - parallel over (sample, group) units with parallel_for, each thread with its own im2col
//   workspace and single-threaded GEMMs, when each GEMM is so small that OpenBLAS runs it on
//   the calling thread anyway (m n k <= 65536 x 4, the SMP_THRESHOLD_MIN x
//   GEMM_MULTITHREAD_THRESHOLD rule of OpenBLAS's interface/gemm.c), or when the OpenBLAS in
//   use is sequential or OpenMP-based (which stays single-threaded inside a parallel region)
//   and there are at least as many units as threads;
// - otherwise units run one after another, OpenBLAS threads the GEMM, and only im2col and
//   col2im (memory-bound copies) are split across threads between the GEMMs.
// The direct depthwise kernels make no BLAS calls and always parallelize over planes.

namespace {

constexpr double kOpenBlasSingleThreadMnk = 65536.0 * 4.0;

bool parallel_over_units(int64_t units, int64_t m, int64_t n, int64_t k) {
  const int threads = get_num_threads();
  if (threads <= 1 || units <= 1) return false;
  const double mnk = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (mnk <= kOpenBlasSingleThreadMnk) return true;
  static const bool blas_threads_itself = openblas_get_parallel() == 1;  // 0 sequential, 1 pthreads, 2 OpenMP
  return !blas_threads_itself && units >= threads;
}

// A scratch buffer from the CPU allocator (so it shows in memory statistics), uninitialized.
template <typename T>
Tensor workspace(int64_t n) {
  return empty({std::max<int64_t>(n, 1)}, dtype_of<T>);
}

// ---- im2col and its adjoint --------------------------------------------------------------

// col[(c, kh, kw), (oh, ow)] = x[c, oh sh + kh dh - ph, ow sw + kw dw - pw], 0 in the padding;
// x holds `channels` planes of H x W.
template <typename T>
void im2col(const T* x, int64_t channels, const Conv2dGeometry& g, T* col, bool parallel) {
  const int64_t khw = g.kH * g.kW, P = g.OH * g.OW, rows = channels * khw;
  auto body = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r / khw, kh = (r % khw) / g.kW, kw = r % g.kW;
      const T* plane = x + c * g.H * g.W;
      T* dst = col + r * P;
      const int64_t off = kw * g.dw - g.pw;
      const ValidRange rw = valid_range(off, g.sw, g.W, g.OW);
      for (int64_t oh = 0; oh < g.OH; ++oh, dst += g.OW) {
        const int64_t ih = oh * g.sh + kh * g.dh - g.ph;
        if (ih < 0 || ih >= g.H) {
          std::fill_n(dst, g.OW, T(0));
          continue;
        }
        const T* src = plane + ih * g.W;
        std::fill_n(dst, rw.lo, T(0));
        if (g.sw == 1) {
          for (int64_t ow = rw.lo; ow < rw.hi; ++ow) dst[ow] = src[ow + off];
        } else {
          for (int64_t ow = rw.lo; ow < rw.hi; ++ow) dst[ow] = src[ow * g.sw + off];
        }
        std::fill(dst + rw.hi, dst + g.OW, T(0));
      }
    }
  };
  if (parallel) {
    parallel_for(0, rows, std::max<int64_t>(1, 16384 / P), body);
  } else {
    body(0, rows);
  }
}

// x[c, ih, iw] += col[(c, kh, kw), (oh, ow)] for every tap that reads (ih, iw): the adjoint of
// im2col, so backward input = col2im(W^T gy). x must hold zeros (or what to add to).
template <typename T>
void col2im(const T* col, int64_t channels, const Conv2dGeometry& g, T* x, bool parallel) {
  const int64_t khw = g.kH * g.kW, P = g.OH * g.OW;
  // Threads take whole channels: the taps of one channel all write into its plane.
  auto body = [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      T* plane = x + c * g.H * g.W;
      for (int64_t kh = 0; kh < g.kH; ++kh) {
        for (int64_t kw = 0; kw < g.kW; ++kw) {
          const T* src = col + (c * khw + kh * g.kW + kw) * P;
          const int64_t off = kw * g.dw - g.pw;
          const ValidRange rw = valid_range(off, g.sw, g.W, g.OW);
          for (int64_t oh = 0; oh < g.OH; ++oh) {
            const int64_t ih = oh * g.sh + kh * g.dh - g.ph;
            if (ih < 0 || ih >= g.H) continue;
            T* dst = plane + ih * g.W;
            const T* s = src + oh * g.OW;
            if (g.sw == 1) {
              for (int64_t ow = rw.lo; ow < rw.hi; ++ow) dst[ow + off] += s[ow];
            } else {
              for (int64_t ow = rw.lo; ow < rw.hi; ++ow) dst[ow * g.sw + off] += s[ow];
            }
          }
        }
      }
    }
  };
  if (parallel) {
    parallel_for(0, channels, std::max<int64_t>(1, 16384 / (khw * P)), body);
  } else {
    body(0, channels);
  }
}

// Runs unit(u, workspace, inner_parallel) for u in [0, units), either spread over threads
// (each with its own workspace of ws_elems) or in order with inner parallelism (NOTE [Conv2d
// threads]). `chunk_done(begin, workspace...)` style reductions are handled by the callers.
template <typename T, typename F>
void run_units(int64_t units, int64_t m, int64_t n, int64_t k, int64_t ws_elems, const F& unit) {
  if (parallel_over_units(units, m, n, k)) {
    parallel_for(0, units, 1, [&](int64_t b, int64_t e) {
      Tensor ws = workspace<T>(ws_elems);
      for (int64_t u = b; u < e; ++u) unit(u, ws.data<T>(), false);
    });
  } else {
    Tensor ws = workspace<T>(ws_elems);
    for (int64_t u = 0; u < units; ++u) unit(u, ws.data<T>(), true);
  }
}

// ---- GEMM-based convolution: forward, backward input, backward weight ---------------------

template <typename T>
void forward_gemm(const T* x, const T* w, const T* bias, T* y, const Conv2dGeometry& g) {
  const int64_t Cg = g.in_per_group(), Og = g.out_per_group(), K = Cg * g.kH * g.kW, P = g.OH * g.OW;
  const int64_t HW = g.H * g.W;
  const bool direct = g.pointwise();
  run_units<T>(g.N * g.groups, Og, P, K, direct ? 0 : K * P, [&](int64_t u, T* col, bool inner_parallel) {
    const int64_t n = u / g.groups, gi = u % g.groups;
    const T* xg = x + (n * g.C + gi * Cg) * HW;
    T* yg = y + (n * g.O + gi * Og) * P;
    const T* b = xg;
    if (!direct) {
      im2col(xg, Cg, g, col, inner_parallel);
      b = col;
    }
    T beta = T(0);
    if (bias) {
      for (int64_t o = 0; o < Og; ++o) std::fill_n(yg + o * P, P, bias[gi * Og + o]);
      beta = T(1);
    }
    gemm<T>(false, false, Og, P, K, T(1), w + gi * Og * K, K, b, P, beta, yg, P);
  });
}

template <typename T>
void backward_input_gemm(const T* gy, const T* w, T* gx, const Conv2dGeometry& g) {
  const int64_t Cg = g.in_per_group(), Og = g.out_per_group(), K = Cg * g.kH * g.kW, P = g.OH * g.OW;
  const int64_t HW = g.H * g.W;
  const bool direct = g.pointwise();
  run_units<T>(g.N * g.groups, K, P, Og, direct ? 0 : K * P, [&](int64_t u, T* col, bool inner_parallel) {
    const int64_t n = u / g.groups, gi = u % g.groups;
    const T* gyg = gy + (n * g.O + gi * Og) * P;
    T* gxg = gx + (n * g.C + gi * Cg) * HW;
    if (direct) {  // K == Cg and P == HW: gx_g = W_g^T gy_g straight into the output
      gemm<T>(true, false, K, P, Og, T(1), w + gi * Og * K, K, gyg, P, T(0), gxg, P);
      return;
    }
    gemm<T>(true, false, K, P, Og, T(1), w + gi * Og * K, K, gyg, P, T(0), col, P);
    std::fill_n(gxg, Cg * HW, T(0));
    col2im(col, Cg, g, gxg, inner_parallel);
  });
}

template <typename T>
void backward_weight_gemm(const T* gy, const T* x, T* gw, const Conv2dGeometry& g) {
  const int64_t Cg = g.in_per_group(), Og = g.out_per_group(), K = Cg * g.kH * g.kW, P = g.OH * g.OW;
  const int64_t HW = g.H * g.W, units = g.N * g.groups;
  const bool direct = g.pointwise();
  // gw_g += gy_g [Og, P] @ col^T [P, K], into `acc` ([O, K], the whole weight gradient).
  auto unit = [&](int64_t u, T* col, T* acc, bool inner_parallel) {
    const int64_t n = u / g.groups, gi = u % g.groups;
    const T* xg = x + (n * g.C + gi * Cg) * HW;
    const T* b = xg;
    if (!direct) {
      im2col(xg, Cg, g, col, inner_parallel);
      b = col;
    }
    gemm<T>(false, true, Og, K, P, T(1), gy + (n * g.O + gi * Og) * P, P, b, P, T(1), acc + gi * Og * K, K);
  };
  const int64_t ws_elems = direct ? 0 : K * P, gw_elems = g.O * K;
  std::fill_n(gw, gw_elems, T(0));
  if (parallel_over_units(units, Og, K, P)) {
    // Each thread sums its units into a private gradient; the partial sums are added in the
    // order of their first unit, so a result does not depend on thread timing.
    std::mutex mu;
    std::vector<std::pair<int64_t, Tensor>> partials;
    parallel_for(0, units, 1, [&](int64_t b, int64_t e) {
      Tensor ws = workspace<T>(ws_elems);
      Tensor acc = zeros({gw_elems}, dtype_of<T>);
      for (int64_t u = b; u < e; ++u) unit(u, ws.data<T>(), acc.data<T>(), false);
      std::lock_guard<std::mutex> lock(mu);
      partials.emplace_back(b, acc);
    });
    std::sort(partials.begin(), partials.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [first, acc] : partials) {
      const T* a = acc.template data<T>();
      for (int64_t i = 0; i < gw_elems; ++i) gw[i] += a[i];
    }
  } else {
    Tensor ws = workspace<T>(ws_elems);
    for (int64_t u = 0; u < units; ++u) unit(u, ws.data<T>(), gw, true);
  }
}

// ---- depthwise: direct loops ---------------------------------------------------------------

// Per kernel column kw: the input column offset kw dw - pw and the valid output columns.
struct ColumnTaps {
  std::vector<int64_t> off;
  std::vector<ValidRange> range;
  explicit ColumnTaps(const Conv2dGeometry& g) {
    for (int64_t kw = 0; kw < g.kW; ++kw) {
      off.push_back(kw * g.dw - g.pw);
      range.push_back(valid_range(off.back(), g.sw, g.W, g.OW));
    }
  }
};

template <typename T>
void forward_depthwise(const T* x, const T* w, const T* bias, T* y, const Conv2dGeometry& g) {
  const int64_t mult = g.O / g.C, khw = g.kH * g.kW, HW = g.H * g.W, P = g.OH * g.OW;
  const ColumnTaps taps(g);
  parallel_for(0, g.N * g.O, std::max<int64_t>(1, 32768 / (P * khw)), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t n = p / g.O, o = p % g.O;
      const T* xp = x + (n * g.C + o / mult) * HW;
      const T* wp = w + o * khw;
      T* yp = y + p * P;
      const T b = bias ? bias[o] : T(0);
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        T* yrow = yp + oh * g.OW;
        std::fill_n(yrow, g.OW, b);
        for (int64_t kh = 0; kh < g.kH; ++kh) {
          const int64_t ih = oh * g.sh + kh * g.dh - g.ph;
          if (ih < 0 || ih >= g.H) continue;
          const T* xrow = xp + ih * g.W;
          for (int64_t kw = 0; kw < g.kW; ++kw) {
            const T wv = wp[kh * g.kW + kw];
            const int64_t off = taps.off[kw], lo = taps.range[kw].lo, hi = taps.range[kw].hi;
            if (g.sw == 1) {
              for (int64_t ow = lo; ow < hi; ++ow) yrow[ow] += wv * xrow[ow + off];
            } else {
              for (int64_t ow = lo; ow < hi; ++ow) yrow[ow] += wv * xrow[ow * g.sw + off];
            }
          }
        }
      }
    }
  });
}

template <typename T>
void backward_input_depthwise(const T* gy, const T* w, T* gx, const Conv2dGeometry& g) {
  const int64_t mult = g.O / g.C, khw = g.kH * g.kW, HW = g.H * g.W, P = g.OH * g.OW;
  const ColumnTaps taps(g);
  // Threads own input planes: plane (n, c) gathers from output planes (n, c mult + j).
  parallel_for(0, g.N * g.C, std::max<int64_t>(1, 32768 / (mult * P * khw)), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t n = p / g.C, c = p % g.C;
      T* gxp = gx + p * HW;
      std::fill_n(gxp, HW, T(0));
      for (int64_t j = 0; j < mult; ++j) {
        const int64_t o = c * mult + j;
        const T* gyp = gy + (n * g.O + o) * P;
        const T* wp = w + o * khw;
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          const T* gyrow = gyp + oh * g.OW;
          for (int64_t kh = 0; kh < g.kH; ++kh) {
            const int64_t ih = oh * g.sh + kh * g.dh - g.ph;
            if (ih < 0 || ih >= g.H) continue;
            T* gxrow = gxp + ih * g.W;
            for (int64_t kw = 0; kw < g.kW; ++kw) {
              const T wv = wp[kh * g.kW + kw];
              const int64_t off = taps.off[kw], lo = taps.range[kw].lo, hi = taps.range[kw].hi;
              if (g.sw == 1) {
                for (int64_t ow = lo; ow < hi; ++ow) gxrow[ow + off] += wv * gyrow[ow];
              } else {
                for (int64_t ow = lo; ow < hi; ++ow) gxrow[ow * g.sw + off] += wv * gyrow[ow];
              }
            }
          }
        }
      }
    }
  });
}

template <typename T>
void backward_weight_depthwise(const T* gy, const T* x, T* gw, const Conv2dGeometry& g) {
  using A = acc_t<T>;  // f64: each tap sums N OH OW products (NOTE [Conv2d algorithms])
  const int64_t mult = g.O / g.C, khw = g.kH * g.kW, HW = g.H * g.W, P = g.OH * g.OW;
  const ColumnTaps taps(g);
  parallel_for(0, g.O, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, g.N * P * khw)), [&](int64_t o0, int64_t o1) {
    std::vector<A> acc(static_cast<size_t>(khw));
    for (int64_t o = o0; o < o1; ++o) {
      std::fill(acc.begin(), acc.end(), A(0));
      const int64_t c = o / mult;
      for (int64_t n = 0; n < g.N; ++n) {
        const T* gyp = gy + (n * g.O + o) * P;
        const T* xp = x + (n * g.C + c) * HW;
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          const T* gyrow = gyp + oh * g.OW;
          for (int64_t kh = 0; kh < g.kH; ++kh) {
            const int64_t ih = oh * g.sh + kh * g.dh - g.ph;
            if (ih < 0 || ih >= g.H) continue;
            const T* xrow = xp + ih * g.W;
            for (int64_t kw = 0; kw < g.kW; ++kw) {
              const int64_t off = taps.off[kw], lo = taps.range[kw].lo, hi = taps.range[kw].hi, s = g.sw;
              T sum = T(0);
#pragma omp simd reduction(+ : sum)
              for (int64_t ow = lo; ow < hi; ++ow) sum += gyrow[ow] * xrow[ow * s + off];
              acc[static_cast<size_t>(kh * g.kW + kw)] += static_cast<A>(sum);
            }
          }
        }
      }
      for (int64_t t = 0; t < khw; ++t) gw[o * khw + t] = static_cast<T>(acc[static_cast<size_t>(t)]);
    }
  });
}

template <typename T>
void backward_bias(const T* gy, T* gb, int64_t N, int64_t O, int64_t P) {
  using A = acc_t<T>;  // f64: N OH OW terms per channel
  parallel_for(0, O, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, N * P)), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      A s = A(0);
      for (int64_t n = 0; n < N; ++n) {
        const T* row = gy + (n * O + o) * P;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < P; ++i) s += static_cast<A>(row[i]);
      }
      gb[o] = static_cast<T>(s);
    }
  });
}

// Reduced floats are computed in f32 and rounded once at the end.
Tensor upcast(const Tensor& t) { return t.defined() && is_reduced_float(t.dtype()) ? t.to(DType::F32) : t; }

}  // namespace

Tensor conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dGeometry& g) {
  const DType dt = input.dtype();
  if (is_reduced_float(dt)) return conv2d_forward(upcast(input), upcast(weight), upcast(bias), g).to(dt);
  const Tensor x = input.contiguous(), w = weight.contiguous(), b = bias.defined() ? bias.contiguous() : Tensor();
  Tensor y = empty({g.N, g.O, g.OH, g.OW}, dt);
  if (y.numel() == 0) return y;
  TRIDENT_DISPATCH_F32_F64(dt, "conv2d", [&] {
    const scalar_t* bp = b.defined() ? b.data<scalar_t>() : nullptr;
    scalar_t* yp = y.data<scalar_t>();
    if (g.in_per_group() == 0) {  // no input channels: the bias alone
      for (int64_t p = 0; p < g.N * g.O; ++p) std::fill_n(yp + p * g.OH * g.OW, g.OH * g.OW, bp ? bp[p % g.O] : scalar_t(0));
    } else if (g.depthwise()) {
      forward_depthwise(x.data<scalar_t>(), w.data<scalar_t>(), bp, yp, g);
    } else {
      forward_gemm(x.data<scalar_t>(), w.data<scalar_t>(), bp, yp, g);
    }
  });
  return y;
}

Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Conv2dGeometry& g) {
  const DType dt = weight.dtype();
  if (is_reduced_float(dt)) return conv2d_backward_input(upcast(grad_out), upcast(weight), g).to(dt);
  const Tensor gy = grad_out.contiguous(), w = weight.contiguous();
  Tensor gx = empty({g.N, g.C, g.H, g.W}, dt);
  if (gx.numel() == 0) return gx;
  TRIDENT_DISPATCH_F32_F64(dt, "conv2d_backward_input", [&] {
    scalar_t* gxp = gx.data<scalar_t>();
    if (g.O == 0) {
      std::fill_n(gxp, gx.numel(), scalar_t(0));
    } else if (g.depthwise()) {
      backward_input_depthwise(gy.data<scalar_t>(), w.data<scalar_t>(), gxp, g);
    } else {
      backward_input_gemm(gy.data<scalar_t>(), w.data<scalar_t>(), gxp, g);
    }
  });
  return gx;
}

Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& input, const Conv2dGeometry& g) {
  const DType dt = input.dtype();
  if (is_reduced_float(dt)) return conv2d_backward_weight(upcast(grad_out), upcast(input), g).to(dt);
  const Tensor gy = grad_out.contiguous(), x = input.contiguous();
  Tensor gw = empty({g.O, g.in_per_group(), g.kH, g.kW}, dt);
  if (gw.numel() == 0) return gw;
  TRIDENT_DISPATCH_F32_F64(dt, "conv2d_backward_weight", [&] {
    scalar_t* gwp = gw.data<scalar_t>();
    if (g.N == 0) {
      std::fill_n(gwp, gw.numel(), scalar_t(0));
    } else if (g.depthwise()) {
      backward_weight_depthwise(gy.data<scalar_t>(), x.data<scalar_t>(), gwp, g);
    } else {
      backward_weight_gemm(gy.data<scalar_t>(), x.data<scalar_t>(), gwp, g);
    }
  });
  return gw;
}

Tensor conv2d_backward_bias(const Tensor& grad_out) {
  const DType dt = grad_out.dtype();
  if (is_reduced_float(dt)) return conv2d_backward_bias(upcast(grad_out)).to(dt);
  const Tensor gy = grad_out.contiguous();
  const int64_t N = gy.size(0), O = gy.size(1), P = gy.size(2) * gy.size(3);
  Tensor gb = empty({O}, dt);
  TRIDENT_DISPATCH_F32_F64(dt, "conv2d_backward_bias", [&] { backward_bias(gy.data<scalar_t>(), gb.data<scalar_t>(), N, O, P); });
  return gb;
}

}  // namespace trident::cpu
