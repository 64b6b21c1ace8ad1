#include "ops/cpu/pool.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/conv_simd.h"
#include "ops/cpu/isa.h"
#include "ops/math/pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace trident::cpu {

// avg_pool2d sweeps an output row once per kernel tap over the outputs whose input column is
// in range: no bounds checks in the inner loops, unit stride when the stride is 1. max_pool2d
// works on stride phases (see its kernel). Threads take whole planes (one (n, c) each), so
// backward scatters never race.

namespace {

Shape with_plane(Shape s, int64_t h, int64_t w) {
  s[s.size() - 2] = h;
  s.back() = w;
  return s;
}

int64_t planes_of(const Shape& s) {
  int64_t n = 1;
  for (size_t d = 0; d + 2 < s.size(); ++d) n *= s[d];
  return n;
}

// Planes per parallel chunk: enough work (about 32k inner iterations) to pay for a thread.
int64_t plane_grain(int64_t work_per_plane) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, work_per_plane)); }

Tensor upcast(const Tensor& t) { return is_reduced_float(t.dtype()) ? t.to(DType::F32) : t; }

// The outputs ow in [0, out) whose input column ow * stride + offset lies in [0, in), as the
// half-open range [lo, hi) (empty when lo == hi). offset may be negative (padding).
struct ValidRange {
  int64_t lo = 0, hi = 0;
};
ValidRange valid_range(int64_t offset, int64_t stride, int64_t in, int64_t out) {
  int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  int64_t hi = in - 1 - offset < 0 ? 0 : (in - 1 - offset) / stride + 1;
  lo = std::min(lo, out);
  hi = std::min(hi, out);
  return {lo, std::max(lo, hi)};
}

// Per kernel column kw: the input column offset kw dw - pw and the outputs it reaches.
struct ColumnTaps {
  std::vector<int64_t> off;
  std::vector<ValidRange> range;
  ColumnTaps(const Pool2dGeometry& g, int64_t dw) {
    for (int64_t kw = 0; kw < g.kW; ++kw) {
      off.push_back(kw * dw - g.pw);
      range.push_back(valid_range(off.back(), g.sw, g.W, g.OW));
    }
  }
};

// NOTE [Max pooling by taps]: max_pool2d, whose indices nobody sees, keeps for its backward each
// output's winning tap number (kh kW + kw, one byte; kNoTap for a window with no input element)
// instead of an i64 flat index: the forward writes 9 bytes per output instead of 16 besides
// reading its input, and the backward reads 1 byte per output instead of 8. The input element
// follows from the output's position and the tap, so the gradients are the same; windows of 255
// taps or more, CUDA tensors and max_pool2d_with_indices keep the indices.
constexpr uint8_t kNoTap = 255;

// The first in-range element of a dilated window starting at `start` (which may be in the
// padding), or -1 when none of its `k` taps is inside [0, in).
int64_t first_valid(int64_t start, int64_t k, int64_t dilation, int64_t in) {
  const int64_t j = start < 0 ? (-start + dilation - 1) / dilation : 0;
  const int64_t i = start + j * dilation;
  return (j < k && i < in) ? i : -1;
}

// ---- max -----------------------------------------------------------------------------------

// Max pooling on stride phases (as NOTE [Depthwise planes] in ops/cpu/conv_depthwise.cpp does
// for convolutions): the plane, padded with -inf far enough for every window (ceil mode may
// run past the padding), is split into sh x sw phases of Hq x Wq, and with outputs at pitch Wq
// each tap (kh, kw) is a fixed offset in one phase. A tap is then one unit-stride pass over
// the plane keeping the running maximum and the number of the tap that set it; the taps run
// in PyTorch's window order (kh, then kw) with a strict >, so the first maximum wins. What the
// pass keeps per output is the winning tap's input offset from the window's corner (int32), so
// the flat input indices at the end are one vectorizable add per output.
// NOTE [Max pooling in registers]: f32 windows a vector of outputs at a time, the running maximum
// and its tap in registers through every tap (one load per tap and output, two stores at the
// end) rather than a pass over the plane per tap that loads and stores both (the 3x3 stride-1
// forward on 32x64x30x30 ran compute-bound at 9 GB/s). The same comparisons in the same order,
// so the same results.
// Outputs [j, flat) one at a time.
inline void max_taps_tail(const float* src, const int64_t* off, const int32_t* ids, int64_t khw, int64_t j, int64_t flat,
                          float* m, int32_t* tp, int32_t none) {
  for (; j < flat; ++j) {
    float best = -std::numeric_limits<float>::infinity();
    int32_t tap = none;
    for (int64_t t = 0; t < khw; ++t) {
      const float v = src[off[t] + j];
      const bool take = v > best || v != v;  // NaN wins, as in PyTorch
      best = take ? v : best;
      tap = take ? ids[t] : tap;
    }
    m[j] = best;
    tp[j] = tap;
  }
}

// 8 lanes (the generic vectors' compares and blends came out lane by lane, 15x slower: intrinsics).
void max_taps_f32(const float* src, const int64_t* off, const int32_t* ids, int64_t khw, int64_t flat, float* m, int32_t* tp,
                  int32_t none) {
  int64_t j = 0;
#if defined(__AVX2__)
  for (; j + 8 <= flat; j += 8) {
    __m256 best = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    __m256 tap = _mm256_castsi256_ps(_mm256_set1_epi32(none));
    for (int64_t t = 0; t < khw; ++t) {
      const __m256 v = _mm256_loadu_ps(src + off[t] + j);
      const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      best = _mm256_blendv_ps(best, v, take);
      tap = _mm256_blendv_ps(tap, _mm256_castsi256_ps(_mm256_set1_epi32(ids[t])), take);
    }
    _mm256_storeu_ps(m + j, best);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(tp + j), _mm256_castps_si256(tap));
  }
#endif
  max_taps_tail(src, off, ids, khw, j, flat, m, tp, none);
}

#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
__attribute__((TRIDENT_TARGET_V4)) void max_taps_f32_avx512(const float* src, const int64_t* off, const int32_t* ids,
                                                           int64_t khw, int64_t flat, float* m, int32_t* tp, int32_t none) {
  int64_t j = 0;
  for (; j + 16 <= flat; j += 16) {
    __m512 best = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    __m512i tap = _mm512_set1_epi32(none);
    for (int64_t t = 0; t < khw; ++t) {
      const __m512 v = _mm512_loadu_ps(src + off[t] + j);
      const __mmask16 take = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      best = _mm512_mask_blend_ps(take, best, v);
      tap = _mm512_mask_blend_epi32(take, tap, _mm512_set1_epi32(ids[t]));
    }
    _mm512_storeu_ps(m + j, best);
    _mm512_storeu_si512(tp + j, tap);
  }
  max_taps_tail(src, off, ids, khw, j, flat, m, tp, none);
}
#endif

// Taps: instead of the flat input indices, each output's winning tap number kh kW + kw as a
// byte (NOTE [Max pooling by taps]).
template <typename T, bool Taps = false>
void max_pool_forward_typed(const T* x, T* y, int64_t* ind, uint8_t* taps, int64_t planes, const Pool2dGeometry& g) {
  const int64_t Hp = std::max(g.H + 2 * g.ph, (g.OH - 1) * g.sh + (g.kH - 1) * g.dh + 1);
  const int64_t Wp = std::max(g.W + 2 * g.pw, (g.OW - 1) * g.sw + (g.kW - 1) * g.dw + 1);
  const int64_t Hq = (Hp + g.sh - 1) / g.sh, Wq = (Wp + g.sw - 1) / g.sw, plane = Hq * Wq;
  const int64_t flat = (g.OH - 1) * Wq + g.OW, khw = g.kH * g.kW, HW = g.H * g.W, P = g.OH * g.OW;
  std::vector<int64_t> tap_off(static_cast<size_t>(khw));
  for (int64_t kh = 0; kh < g.kH; ++kh)
    for (int64_t kw = 0; kw < g.kW; ++kw) {
      const int64_t r = kh * g.dh, c = kw * g.dw;
      tap_off[static_cast<size_t>(kh * g.kW + kw)] = ((r % g.sh) * g.sw + c % g.sw) * plane + (r / g.sh) * Wq + c / g.sw;
    }
  // Tap t's input element relative to its window's corner (hstart, wstart): no division per
  // output (an integer division per element took most of the pass). kNone marks an output no
  // tap has taken (a window of -inf).
  TRIDENT_CHECK((g.kH - 1) * g.dh * g.W + (g.kW - 1) * g.dw < (int64_t{1} << 31), "max_pool2d: a window of kernel ", g.kH, "x",
                g.kW, " (dilation ", g.dh, "x", g.dw, ") spans more than 2^31 elements of a ", g.H, "x", g.W, " plane");
  constexpr int32_t kNone = std::numeric_limits<int32_t>::min();
  std::vector<int32_t> tap_in(static_cast<size_t>(khw));
  for (int64_t t = 0; t < khw; ++t)
    tap_in[static_cast<size_t>(t)] =
        static_cast<int32_t>(Taps ? t : (t / g.kW) * g.dh * g.W + (t % g.kW) * g.dw);
  std::vector<int64_t> iw0(static_cast<size_t>(g.OW));
  for (int64_t ow = 0; ow < g.OW; ++ow) iw0[static_cast<size_t>(ow)] = first_valid(ow * g.sw - g.pw, g.kW, g.dw, g.W);
  const T lowest = -std::numeric_limits<T>::infinity();
  // Where input row h's columns w0, w0 + sw, ... (w0 < sw) start in the phase planes: the same
  // for every plane, so computed once (two integer divisions per row and phase, in the plane
  // loop, were a fifth of a 3x3 stride-2 pass).
  std::vector<int64_t> row_dst(static_cast<size_t>(g.H * g.sw));
  for (int64_t h = 0; h < g.H; ++h)
    for (int64_t w0 = 0; w0 < g.sw; ++w0) {
      const int64_t r = h + g.ph, b = (w0 + g.pw) % g.sw;  // input column w0 lands in phase column b
      row_dst[static_cast<size_t>(h * g.sw + w0)] = ((r % g.sh) * g.sw + b) * plane + (r / g.sh) * Wq + (w0 + g.pw) / g.sw;
    }
  parallel_for(0, planes, plane_grain(P * khw), [&](int64_t p0, int64_t p1) {
    std::vector<T> phased(static_cast<size_t>(g.sh * g.sw * plane)), best(static_cast<size_t>(flat));
    std::vector<int32_t> tap(static_cast<size_t>(flat));
    // The padding: every plane's elements land at the same places, so the rest stays -inf.
    std::fill(phased.begin(), phased.end(), lowest);
    for (int64_t p = p0; p < p1; ++p) {
      const T* xp = x + p * HW;
      for (int64_t h = 0; h < g.H; ++h) {
        const T* row = xp + h * g.W;
        const int64_t* dst = row_dst.data() + h * g.sw;
        if constexpr (std::is_same_v<T, float>) {
          if (g.sw == 2) {  // both column phases in one vectorized pass
            conv_simd::deinterleave2(row, g.W, phased.data() + dst[0], phased.data() + dst[1]);
            continue;
          }
        }
        if (g.sw == 1) {
          std::copy_n(row, g.W, phased.data() + dst[0]);
        } else {
          for (int64_t w0 = 0; w0 < g.sw; ++w0)
            for (int64_t w = w0, i = 0; w < g.W; w += g.sw, ++i) phased[static_cast<size_t>(dst[w0] + i)] = row[w];
        }
      }
      T* m = best.data();
      int32_t* tp = tap.data();
      if constexpr (std::is_same_v<T, float>) {  // NOTE [Max pooling in registers]
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
        if (cpu_avx512_kernels()) {
          max_taps_f32_avx512(phased.data(), tap_off.data(), tap_in.data(), khw, flat, m, tp, kNone);
        } else {
          max_taps_f32(phased.data(), tap_off.data(), tap_in.data(), khw, flat, m, tp, kNone);
        }
#else
        max_taps_f32(phased.data(), tap_off.data(), tap_in.data(), khw, flat, m, tp, kNone);
#endif
      } else {
      std::fill_n(m, flat, lowest);
      std::fill_n(tp, flat, kNone);
      for (int64_t t = 0; t < khw; ++t) {
        const T* src = phased.data() + tap_off[static_cast<size_t>(t)];
        const int32_t tt = tap_in[static_cast<size_t>(t)];
        for (int64_t j = 0; j < flat; ++j) {
          const T v = src[j];
          const bool take = v > m[j] || v != v;  // v != v: NaN wins, as in PyTorch
          m[j] = take ? v : m[j];
          tp[j] = take ? tt : tp[j];
        }
      }
      }
      // Everything the loop reads in locals: through the lambda's captures every store to y or
      // ind would make the compiler load them again (they might alias), which took 40% of the
      // pass (perf, 3x3 stride 1 on 28 x 28 planes).
      const int64_t OW = g.OW, W = g.W, sw = g.sw;
      // Whether any output took no tap (a window of -inf values), looked for once per plane
      // rather than per row (a reduction per 14- or 28-wide row cost a tenth of the pass).
      int untaken_any = 0;
#pragma omp simd reduction(| : untaken_any)
      for (int64_t j = 0; j < flat; ++j) untaken_any |= tp[j] == kNone;
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        T* __restrict yrow = y + p * P + oh * OW;
        const T* mrow = m + oh * Wq;
        const int32_t* trow = tp + oh * Wq;
        const int64_t hstart = oh * g.sh - g.ph, base = hstart * W - g.pw;
        std::copy_n(mrow, OW, yrow);
        if constexpr (Taps) {
          uint8_t* __restrict trow_out = taps + p * P + oh * OW;
#pragma omp simd
          for (int64_t ow = 0; ow < OW; ++ow) trow_out[ow] = static_cast<uint8_t>(trow[ow]);
          if (!untaken_any) continue;
          // A window of -inf values: its first in-range element's tap, or none.
          const int64_t ih0 = first_valid(hstart, g.kH, g.dh, g.H);
          for (int64_t ow = 0; ow < OW; ++ow) {
            if (trow[ow] != kNone) continue;
            const int64_t iw = iw0[static_cast<size_t>(ow)];
            trow_out[ow] = (ih0 >= 0 && iw >= 0)
                               ? static_cast<uint8_t>(((ih0 - hstart) / g.dh) * g.kW + (iw - (ow * g.sw - g.pw)) / g.dw)
                               : kNoTap;
          }
          continue;
        }
        int64_t* __restrict irow = ind + p * P + oh * OW;
#pragma omp simd
        for (int64_t ow = 0; ow < OW; ++ow) irow[ow] = base + ow * sw + trow[ow];
        if (!untaken_any) continue;
        // A window of -inf values (no tap taken) points at its first in-range element.
        const int64_t ih0 = first_valid(hstart, g.kH, g.dh, g.H);
        for (int64_t ow = 0; ow < OW; ++ow) {
          if (trow[ow] != kNone) continue;
          const int64_t iw = iw0[static_cast<size_t>(ow)];
          irow[ow] = (ih0 >= 0 && iw >= 0) ? ih0 * W + iw : -1;
        }
      }
    }
  });
}

// From taps (NOTE [Max pooling by taps]): output (oh, ow)'s tap t is input element
// (oh sh - ph + (t / kW) dh) W + ow sw - pw + (t % kW) dw of its plane.
template <typename T>
void max_pool_backward_taps_typed(const T* gy, const uint8_t* taps, T* gx, int64_t planes, const Pool2dGeometry& g) {
  const int64_t HW = g.H * g.W, P = g.OH * g.OW, khw = g.kH * g.kW;
  std::vector<int64_t> tap_in(static_cast<size_t>(khw));
  for (int64_t t = 0; t < khw; ++t) tap_in[static_cast<size_t>(t)] = (t / g.kW) * g.dh * g.W + (t % g.kW) * g.dw;
  parallel_for(0, planes, plane_grain(P + HW), [&](int64_t p0, int64_t p1) {
    const int64_t* off = tap_in.data();
    const int64_t OH = g.OH, OW = g.OW, W = g.W, sh = g.sh, sw = g.sw, ph = g.ph, pw = g.pw;
    for (int64_t p = p0; p < p1; ++p) {
      T* gxp = gx + p * HW;
      std::fill_n(gxp, HW, T(0));
      const T* gyp = gy + p * P;
      const uint8_t* tp = taps + p * P;
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t base = (oh * sh - ph) * W - pw;
        for (int64_t ow = 0; ow < OW; ++ow) {
          const uint8_t t = tp[oh * OW + ow];
          if (t != kNoTap) gxp[base + ow * sw + off[t]] += gyp[oh * OW + ow];
        }
      }
    }
  });
}

template <typename T>
void max_pool_backward_typed(const T* gy, const int64_t* ind, T* gx, int64_t planes, const Pool2dGeometry& g) {
  const int64_t HW = g.H * g.W, P = g.OH * g.OW;
  parallel_for(0, planes, plane_grain(P + HW), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      T* gxp = gx + p * HW;
      std::fill_n(gxp, HW, T(0));
      const T* gyp = gy + p * P;
      const int64_t* ip = ind + p * P;
      for (int64_t j = 0; j < P; ++j)
        if (ip[j] >= 0) gxp[ip[j]] += gyp[j];
    }
  });
}

// ---- avg -----------------------------------------------------------------------------------

// The divisor of output (oh, ow) from its two 1-D windows; 0 when the window holds no input
// element (then the output is 0 and receives no gradient).
int64_t avg_divisor(const math::AvgWindow& h, const math::AvgWindow& w, bool count_include_pad) {
  if (h.start >= h.end || w.start >= w.end) return 0;
  return count_include_pad ? h.padded * w.padded : (h.end - h.start) * (w.end - w.start);
}

std::vector<math::AvgWindow> avg_column_windows(const Pool2dGeometry& g) {
  std::vector<math::AvgWindow> w;
  for (int64_t ow = 0; ow < g.OW; ++ow) w.push_back(math::avg_pool_window(ow, g.W, g.kW, g.pw, g.sw));
  return w;
}

// The divisor of every output of a row is (its row window's count) x (its column's count), the
// factors of avg_divisor: the columns' once per call, so that the divisions of a row run as one
// vector loop (a branchy divisor per output took as long as the window sums). An empty window
// (factor 0) divides by 1 instead: its sum is 0 in the forward pass, and in the backward pass no
// input element reads its value.
template <typename T>
std::vector<T> avg_column_counts(const std::vector<math::AvgWindow>& cols, bool count_include_pad) {
  std::vector<T> c;
  for (const math::AvgWindow& w : cols) c.push_back(static_cast<T>(avg_divisor({0, 1, 1}, w, count_include_pad)));
  return c;
}
template <typename T>
T avg_row_count(const math::AvgWindow& h, bool count_include_pad) {
  return static_cast<T>(avg_divisor(h, {0, 1, 1}, count_include_pad));
}

// NOTE [Separable average pooling]: a window's sum is the sum over its kW columns of the sums
// over its kH rows. Per output row, the window's input rows are summed into a row buffer with pw
// zeros before it and enough after for every window (ceil mode can run past the padding), then
// each output adds its kW columns of that buffer (with stride sw, from the buffer split into sw
// phases, so every pass is unit-stride): kH + kW passes over a row where adding each of the kH
// kW taps into the output row took kH kW dependent read-modify-write passes (3x3: 6 against 9;
// the two pooling passes were 6% of an AmoebaNet-D(3, 16) step). The backward pass is its
// adjoint: the scaled output gradients spread over a row buffer per output row by the kW
// columns, then each input row the sum of the buffers of the output rows whose windows hold it.
// Sums accumulate in T: at most kH kW terms.
struct AvgRowBuffer {
  int64_t width, phase_width;  // the buffer (pw + W + what the last window needs) and one phase of it
  explicit AvgRowBuffer(const Pool2dGeometry& g)
      : width(std::max(g.W + 2 * g.pw, (g.OW - 1) * g.sw + g.kW)), phase_width((width + g.sw - 1) / g.sw) {}
};

// Every output's divisor (its window's count, at least 1), once for all planes: computed per
// output row in the planes' loops, as max(rows x column count, 1), the divisions stayed scalar.
template <typename T>
std::vector<T> avg_divisors(const Pool2dGeometry& g) {
  const std::vector<T> cols = avg_column_counts<T>(avg_column_windows(g), g.count_include_pad);
  std::vector<T> d(static_cast<size_t>(g.OH * g.OW));
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    const T rows = avg_row_count<T>(math::avg_pool_window(oh, g.H, g.kH, g.ph, g.sh), g.count_include_pad);
    for (int64_t ow = 0; ow < g.OW; ++ow) d[static_cast<size_t>(oh * g.OW + ow)] = std::max(rows * cols[static_cast<size_t>(ow)], T(1));
  }
  return d;
}

template <typename T>
void avg_pool_forward_typed(const T* x, T* y, int64_t planes, const Pool2dGeometry& g) {
  const std::vector<T> divisor = avg_divisors<T>(g);
  const int64_t HW = g.H * g.W, P = g.OH * g.OW, OW = g.OW, W = g.W, sw = g.sw;
  const AvgRowBuffer rb(g);
  parallel_for(0, planes, plane_grain(P * g.kH * g.kW), [&](int64_t p0, int64_t p1) {
    std::vector<T> rows_sum(static_cast<size_t>(rb.width), T(0)), phases(static_cast<size_t>(sw * rb.phase_width), T(0));
    T* rs = rows_sum.data();
    T* ph = phases.data();
    for (int64_t p = p0; p < p1; ++p) {
      const T* xp = x + p * HW;
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        T* __restrict yrow = y + p * P + oh * OW;
        const math::AvgWindow hw = math::avg_pool_window(oh, g.H, g.kH, g.ph, g.sh);
        if (hw.start >= hw.end) {  // no input row: sums of 0
          std::fill_n(yrow, OW, T(0));
          continue;
        }
        T* __restrict r = rs + g.pw;  // [0, pw) and [pw + W, width) stay 0
        std::copy_n(xp + hw.start * W, W, r);
        for (int64_t ih = hw.start + 1; ih < hw.end; ++ih) {
          const T* xrow = xp + ih * W;
          for (int64_t w = 0; w < W; ++w) r[w] += xrow[w];
        }
        const T* src = rs;
        if (sw != 1) {  // phase b of the buffer: ph[b phase_width + i] = rs[i sw + b]
          for (int64_t b = 0; b < sw; ++b)
            for (int64_t i = 0; i * sw + b < rb.width; ++i) ph[b * rb.phase_width + i] = rs[i * sw + b];
          src = ph;
        }
        const auto column = [&](int64_t kw) { return src + (sw == 1 ? kw : (kw % sw) * rb.phase_width + kw / sw); };
        std::copy_n(column(0), OW, yrow);
        for (int64_t kw = 1; kw < g.kW; ++kw) {
          const T* c = column(kw);
          for (int64_t ow = 0; ow < OW; ++ow) yrow[ow] += c[ow];
        }
        const T* __restrict d = divisor.data() + oh * OW;
        for (int64_t ow = 0; ow < OW; ++ow) yrow[ow] /= d[ow];
      }
    }
  });
}

template <typename T>
void avg_pool_backward_typed(const T* gy, T* gx, int64_t planes, const Pool2dGeometry& g) {
  const std::vector<T> divisor = avg_divisors<T>(g);
  const int64_t HW = g.H * g.W, P = g.OH * g.OW, OW = g.OW, W = g.W, sw = g.sw;
  const AvgRowBuffer rb(g);
  // Each input row's gradient sums the spread rows of the output rows whose windows hold it, in
  // the order of those output rows: from[ih] .. from[ih + 1] in `covering`.
  std::vector<math::AvgWindow> windows(static_cast<size_t>(g.OH));
  std::vector<int64_t> from(static_cast<size_t>(g.H + 1), 0), covering;
  for (int64_t oh = 0; oh < g.OH; ++oh) windows[static_cast<size_t>(oh)] = math::avg_pool_window(oh, g.H, g.kH, g.ph, g.sh);
  for (int64_t ih = 0; ih < g.H; ++ih) {
    for (int64_t oh = 0; oh < g.OH; ++oh)
      if (windows[static_cast<size_t>(oh)].start <= ih && ih < windows[static_cast<size_t>(oh)].end) covering.push_back(oh);
    from[static_cast<size_t>(ih + 1)] = static_cast<int64_t>(covering.size());
  }
  parallel_for(0, planes, plane_grain(P * g.kH * g.kW), [&](int64_t p0, int64_t p1) {
    std::vector<T> scaled(static_cast<size_t>(OW)), spread(static_cast<size_t>(g.OH * rb.width)),
        phases(static_cast<size_t>(sw * rb.phase_width));
    T* __restrict sc = scaled.data();
    T* ph = phases.data();
    for (int64_t p = p0; p < p1; ++p) {
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        const math::AvgWindow& hw = windows[static_cast<size_t>(oh)];
        if (hw.start >= hw.end) continue;  // reads no input
        const T* __restrict gyrow = gy + p * P + oh * OW;
        const T* __restrict d = divisor.data() + oh * OW;
        for (int64_t ow = 0; ow < OW; ++ow) sc[ow] = gyrow[ow] / d[ow];
        // t[ow sw + kw] += sc[ow] for every column kw (the forward pass's columns, adjoint).
        T* t = spread.data() + oh * rb.width;
        T* dst = sw == 1 ? t : ph;
        std::fill_n(dst, sw == 1 ? rb.width : sw * rb.phase_width, T(0));
        for (int64_t kw = 0; kw < g.kW; ++kw) {
          T* __restrict c = dst + (sw == 1 ? kw : (kw % sw) * rb.phase_width + kw / sw);
          for (int64_t ow = 0; ow < OW; ++ow) c[ow] += sc[ow];
        }
        if (sw != 1)
          for (int64_t b = 0; b < sw; ++b)
            for (int64_t i = 0; i * sw + b < rb.width; ++i) t[i * sw + b] = ph[b * rb.phase_width + i];
      }
      // Each gx row written once (it was zeroed and then added into by each of its kH output
      // rows: half the backward pass's time on 30 x 30 planes went to those passes).
      T* gxp = gx + p * HW;
      for (int64_t ih = 0; ih < g.H; ++ih) {
        T* __restrict gxrow = gxp + ih * W;
        std::fill_n(gxrow, W, T(0));
        for (int64_t k = from[static_cast<size_t>(ih)]; k < from[static_cast<size_t>(ih + 1)]; ++k) {
          const T* __restrict tr = spread.data() + covering[static_cast<size_t>(k)] * rb.width + g.pw;  // the padding's share is dropped
          for (int64_t w = 0; w < W; ++w) gxrow[w] += tr[w];
        }
      }
    }
  });
}

// ---- adaptive avg --------------------------------------------------------------------------

// Window sums accumulate in acc_t (f64 for f32): a window can be the whole plane (global
// average pooling over, say, 112 x 112 elements).
template <typename T>
void adaptive_forward_typed(const T* x, T* y, int64_t planes, int64_t H, int64_t W, int64_t OH, int64_t OW) {
  using A = acc_t<T>;
  parallel_for(0, planes, plane_grain(H * W), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const T* xp = x + p * H * W;
      T* yp = y + p * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t hs = math::adaptive_start(oh, H, OH), he = math::adaptive_end(oh, H, OH);
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t ws = math::adaptive_start(ow, W, OW), we = math::adaptive_end(ow, W, OW);
          A s = A(0);
          if (ws == 0 && we == W) {  // whole rows (global pooling, say): one contiguous run
            const T* run = xp + hs * W;
#pragma omp simd reduction(+ : s)
            for (int64_t i = 0; i < (he - hs) * W; ++i) s += static_cast<A>(run[i]);
          } else {
            for (int64_t ih = hs; ih < he; ++ih) {
              const T* row = xp + ih * W;
#pragma omp simd reduction(+ : s)
              for (int64_t iw = ws; iw < we; ++iw) s += static_cast<A>(row[iw]);
            }
          }
          yp[oh * OW + ow] = static_cast<T>(s / static_cast<A>((he - hs) * (we - ws)));
        }
      }
    }
  });
}

template <typename T>
void adaptive_backward_typed(const T* gy, T* gx, int64_t planes, int64_t H, int64_t W, int64_t OH, int64_t OW) {
  parallel_for(0, planes, plane_grain(H * W), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      T* gxp = gx + p * H * W;
      std::fill_n(gxp, H * W, T(0));
      const T* gyp = gy + p * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t hs = math::adaptive_start(oh, H, OH), he = math::adaptive_end(oh, H, OH);
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t ws = math::adaptive_start(ow, W, OW), we = math::adaptive_end(ow, W, OW);
          const T v = gyp[oh * OW + ow] / static_cast<T>((he - hs) * (we - ws));
          for (int64_t ih = hs; ih < he; ++ih) {
            T* row = gxp + ih * W;
            for (int64_t iw = ws; iw < we; ++iw) row[iw] += v;
          }
        }
      }
    }
  });
}

}  // namespace

std::pair<Tensor, Tensor> max_pool2d_forward(const Tensor& input, const Pool2dGeometry& g) {
  const DType dt = input.dtype();
  if (is_reduced_float(dt)) {
    // Exact: a maximum is one of the inputs, so the f32 round trip changes nothing.
    auto [v, i] = max_pool2d_forward(upcast(input), g);
    return {v.to(dt), i};
  }
  const Tensor x = input.contiguous();
  const Shape out_shape = with_plane(x.sizes(), g.OH, g.OW);
  Tensor y = empty(out_shape, dt), ind = empty(out_shape, DType::I64);
  if (y.numel() == 0) return {y, ind};
  TRIDENT_DISPATCH_F32_F64(dt, "max_pool2d", [&] {
    max_pool_forward_typed(x.data<scalar_t>(), y.data<scalar_t>(), ind.data<int64_t>(), nullptr, planes_of(x.sizes()), g);
  });
  return {y, ind};
}

bool max_pool2d_taps_apply(const Pool2dGeometry& g) { return g.kH * g.kW < kNoTap; }

std::pair<Tensor, Tensor> max_pool2d_forward_taps(const Tensor& input, const Pool2dGeometry& g) {
  TRIDENT_CHECK(max_pool2d_taps_apply(g), "max_pool2d: a ", g.kH, "x", g.kW, " window has too many taps for byte tap numbers");
  const DType dt = input.dtype();
  if (is_reduced_float(dt)) {  // exact, as max_pool2d_forward
    auto [v, t] = max_pool2d_forward_taps(upcast(input), g);
    return {v.to(dt), t};
  }
  const Tensor x = input.contiguous();
  const Shape out_shape = with_plane(x.sizes(), g.OH, g.OW);
  Tensor y = empty(out_shape, dt), taps = empty(out_shape, DType::U8);
  if (y.numel() == 0) return {y, taps};
  TRIDENT_DISPATCH_F32_F64(dt, "max_pool2d", [&] {
    max_pool_forward_typed<scalar_t, true>(x.data<scalar_t>(), y.data<scalar_t>(), nullptr, taps.data<uint8_t>(),
                                           planes_of(x.sizes()), g);
  });
  return {y, taps};
}

namespace {
// gx of input_sizes from gy and where (i64 indices or u8 taps) through kernel(gy, where, gx,
// planes) in f32 or f64; f16/bf16 through f32 (exact: each gradient element is one gy element or 0).
template <typename W, typename Kernel>
Tensor max_pool_backward_from(const Tensor& grad_out, const Tensor& where, const Shape& input_sizes, const Kernel& kernel) {
  const DType dt = grad_out.dtype();
  if (is_reduced_float(dt)) return max_pool_backward_from<W>(upcast(grad_out), where, input_sizes, kernel).to(dt);
  const Tensor gy = grad_out.contiguous(), w = where.contiguous();
  Tensor gx = empty(input_sizes, dt);
  if (gx.numel() == 0) return gx;
  TRIDENT_DISPATCH_F32_F64(dt, "max_pool2d_backward",
                           [&] { kernel(gy.data<scalar_t>(), w.data<W>(), gx.data<scalar_t>(), planes_of(input_sizes)); });
  return gx;
}
}  // namespace

Tensor max_pool2d_backward_taps(const Tensor& grad_out, const Tensor& taps, const Shape& input_sizes, const Pool2dGeometry& g) {
  return max_pool_backward_from<uint8_t>(grad_out, taps, input_sizes,
                                         [&g](const auto* gy, const uint8_t* t, auto* gx, int64_t planes) {
                                           max_pool_backward_taps_typed(gy, t, gx, planes, g);
                                         });
}

Tensor max_pool2d_taps_to_indices(const Tensor& taps, const Pool2dGeometry& g) {
  const Tensor t = taps.contiguous();
  Tensor ind = empty(t.sizes(), DType::I64);
  const int64_t P = g.OH * g.OW, planes = P == 0 ? 0 : t.numel() / P;
  const uint8_t* tp = t.data<uint8_t>();
  int64_t* ip = ind.data<int64_t>();
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const int64_t j = p * P + oh * g.OW + ow, tap = tp[j];
        ip[j] = tap == kNoTap ? -1
                              : (oh * g.sh - g.ph + (tap / g.kW) * g.dh) * g.W + ow * g.sw - g.pw + (tap % g.kW) * g.dw;
      }
  return ind;
}

Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Shape& input_sizes, const Pool2dGeometry& g) {
  return max_pool_backward_from<int64_t>(grad_out, indices, input_sizes,
                                         [&g](const auto* gy, const int64_t* ind, auto* gx, int64_t planes) {
                                           max_pool_backward_typed(gy, ind, gx, planes, g);
                                         });
}

Tensor avg_pool2d_forward(const Tensor& input, const Pool2dGeometry& g) {
  const DType dt = input.dtype();
  if (is_reduced_float(dt)) return avg_pool2d_forward(upcast(input), g).to(dt);
  const Tensor x = input.contiguous();
  Tensor y = empty(with_plane(x.sizes(), g.OH, g.OW), dt);
  if (y.numel() == 0) return y;
  TRIDENT_DISPATCH_F32_F64(dt, "avg_pool2d", [&] {
    avg_pool_forward_typed(x.data<scalar_t>(), y.data<scalar_t>(), planes_of(x.sizes()), g);
  });
  return y;
}

Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& input_sizes, const Pool2dGeometry& g) {
  const DType dt = grad_out.dtype();
  if (is_reduced_float(dt)) return avg_pool2d_backward(upcast(grad_out), input_sizes, g).to(dt);
  const Tensor gy = grad_out.contiguous();
  Tensor gx = empty(input_sizes, dt);
  if (gx.numel() == 0) return gx;
  TRIDENT_DISPATCH_F32_F64(dt, "avg_pool2d_backward", [&] {
    avg_pool_backward_typed(gy.data<scalar_t>(), gx.data<scalar_t>(), planes_of(input_sizes), g);
  });
  return gx;
}

Tensor adaptive_avg_pool2d_forward(const Tensor& input, int64_t OH, int64_t OW) {
  const DType dt = input.dtype();
  if (is_reduced_float(dt)) return adaptive_avg_pool2d_forward(upcast(input), OH, OW).to(dt);
  const Tensor x = input.contiguous();
  const int64_t H = x.size(-2), W = x.size(-1);
  Tensor y = empty(with_plane(x.sizes(), OH, OW), dt);
  if (y.numel() == 0) return y;
  TRIDENT_DISPATCH_F32_F64(dt, "adaptive_avg_pool2d", [&] {
    adaptive_forward_typed(x.data<scalar_t>(), y.data<scalar_t>(), planes_of(x.sizes()), H, W, OH, OW);
  });
  return y;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Shape& input_sizes) {
  const DType dt = grad_out.dtype();
  if (is_reduced_float(dt)) return adaptive_avg_pool2d_backward(upcast(grad_out), input_sizes).to(dt);
  const Tensor gy = grad_out.contiguous();
  Tensor gx = empty(input_sizes, dt);
  if (gx.numel() == 0) return gx;
  const int64_t H = input_sizes[input_sizes.size() - 2], W = input_sizes.back();
  TRIDENT_DISPATCH_F32_F64(dt, "adaptive_avg_pool2d_backward", [&] {
    adaptive_backward_typed(gy.data<scalar_t>(), gx.data<scalar_t>(), planes_of(input_sizes), H, W, gy.size(-2), gy.size(-1));
  });
  return gx;
}

}  // namespace trident::cpu
