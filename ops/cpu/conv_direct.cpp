// Direct convolution with output channels in the vector lanes (NOTE [Conv2d algorithms] in
// ops/cpu/conv.cpp).
//
// NOTE [Conv2d direct]: the blocked im2col kernels (NOTE [Conv2d blocked im2col]) put output
// pixels in the vector lanes, so a stride-2 convolution first splits its input into stride
// phases and then copies tiles of them; on an AVX-512 CPU, where the micro-kernel itself runs
// at the FMA peak, those copies were a third of the 3x3 stride-2 forward pass and left it at
// 0.7-0.9 of PyTorch's oneDNN (docs/performance.md). Here the lanes hold 16 output channels
// instead (oneDNN's layout for its direct kernels): for each input channel and tap, one or two
// vectors of packed weights (16 or 32 output channels) are loaded and every output pixel of the
// block broadcasts its input value from where it lies in the NCHW input, 2 floats apart for a
// stride of 2, and multiplies both; the stride costs nothing and nothing is copied. A block is
// up to 14 output pixels of one row by 32 channels: 28 accumulators, and per (channel, tap) 2
// loads of weights and 14 broadcasts for 28 multiply-adds. Each work item is one output row of
// one image and group: its input channels go in chunks whose rows fit in L1 (about 24 KiB),
// each chunk serving every block of output channels before the next is read; the partial sums
// wait in a per-thread buffer [channel block][pixel][lane] and go to y transposed (16 x 16
// blocks) with the bias at the end. Taps that fall in the padding are skipped: rows by the
// loop bounds, columns by computing the pixels at the row's edges (those with a tap outside
// the row) one at a time, each with its own range of kernel columns.
#include "ops/cpu/conv_direct.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/conv_simd.h"

namespace trident::cpu {
namespace {

bool g_direct_enabled = true;

#ifdef TRIDENT_AVX512_MICRO_KERNEL
using conv_simd::v16f;

constexpr int kUW = 14;  // output pixels per block
constexpr int kOB = 32;  // output channels per block (the last block of a group may be 16)

// One block's sums over input channels [c0, c0 + nc) and the kernel rows and columns that stay
// inside the input: x at (c0, the first kernel row's input row, the first pixel's first kernel
// column), w the packed weights at (c0, that kernel row, that column).
struct Taps {
  const float* x;
  const float* w;
  int64_t nc, nkh, nkw;
  int64_t x_c, x_kh, x_kw;  // input strides: channel H W, kernel row dh W, kernel column dw
  int64_t w_c, w_kh;        // weight strides: channel kH kW L, kernel row kW L (kernel column L)
};

// acc [UW][16 OV] (= when first, += otherwise) for the UW pixels 2 floats apart in the input.
template <int OV, int UW>
__attribute__((target("arch=x86-64-v4"), noinline)) void direct_kernel(const Taps& t, float* __restrict acc_io, bool first) {
  constexpr int L = 16 * OV;
  v16f acc[UW][OV];
  for (int j = 0; j < UW; ++j)
    for (int v = 0; v < OV; ++v) {
      if (first) {
        acc[j][v] = v16f{};
      } else {
        std::memcpy(&acc[j][v], acc_io + j * L + 16 * v, sizeof(v16f));
      }
    }
  for (int64_t c = 0; c < t.nc; ++c)
    for (int64_t kh = 0; kh < t.nkh; ++kh) {
      const float* xr = t.x + c * t.x_c + kh * t.x_kh;
      const float* wr = t.w + c * t.w_c + kh * t.w_kh;
      for (int64_t kw = 0; kw < t.nkw; ++kw, xr += t.x_kw, wr += L) {
        v16f wv[OV];
        for (int v = 0; v < OV; ++v) std::memcpy(&wv[v], wr + 16 * v, sizeof(v16f));
#pragma GCC unroll 16
        for (int j = 0; j < UW; ++j) {
          const float s = xr[2 * j];
          const v16f a = {s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s};
          for (int v = 0; v < OV; ++v) acc[j][v] += a * wv[v];
        }
      }
    }
  for (int j = 0; j < UW; ++j)
    for (int v = 0; v < OV; ++v) std::memcpy(acc_io + j * L + 16 * v, &acc[j][v], sizeof(v16f));
}

using KernelFn = void (*)(const Taps&, float*, bool);

template <int OV, int... U>
constexpr std::array<KernelFn, sizeof...(U)> kernel_table(std::integer_sequence<int, U...>) {
  return {&direct_kernel<OV, U + 1>...};
}
// kKernels[OV - 1][UW - 1]
const std::array<std::array<KernelFn, kUW>, 2> kKernels = {kernel_table<1>(std::make_integer_sequence<int, kUW>()),
                                                            kernel_table<2>(std::make_integer_sequence<int, kUW>())};

using v16i = int32_t __attribute__((vector_size(64)));

// The 16 x 16 transpose of v (rows) in place: for e = 8, 4, 2, 1, rows i and i + e (bit e of i
// clear) swap the lanes with bit e set of row i with those with it clear of row i + e, which
// exchanges bit e of the row and lane numbers; after all four every element (r, l) is at (l, r).
template <int E>
__attribute__((target("arch=x86-64-v4"), always_inline)) inline void transpose_step(v16f* v) {
  v16i m0, m1;
  for (int l = 0; l < 16; ++l) {
    m0[l] = (l & E) ? 16 + l - E : l;
    m1[l] = (l & E) ? 16 + l : l + E;
  }
  for (int i = 0; i < 16; ++i)
    if (!(i & E)) {
      const v16f a = v[i], b = v[i + E];
      v[i] = __builtin_shuffle(a, b, m0);
      v[i + E] = __builtin_shuffle(a, b, m1);
    }
}

// y rows [oc0, oc0 + L) of one output row (OW pixels; row l at y + l y_pitch) = stage
// [pixel][L] + bias, by 16 x 16 transposes; stage has room for OW rounded up to 16 pixels (the
// rows past OW are never stored).
__attribute__((target("arch=x86-64-v4"), noinline)) void write_rows(const float* __restrict stage, int64_t OW, int L,
                                                                     const float* bias, float* __restrict y, int64_t y_pitch) {
  for (int l0 = 0; l0 < L; l0 += 16) {
    float b[16];
    for (int l = 0; l < 16; ++l) b[l] = bias ? bias[l0 + l] : 0.0f;
    for (int64_t p = 0; p < OW; p += 16) {
      v16f v[16];
      for (int q = 0; q < 16; ++q) std::memcpy(&v[q], stage + (p + q) * L + l0, sizeof(v16f));
      transpose_step<8>(v);
      transpose_step<4>(v);
      transpose_step<2>(v);
      transpose_step<1>(v);
      const int64_t n = std::min<int64_t>(16, OW - p);
      for (int l = 0; l < 16; ++l) {
        const v16f r = v[l] + b[l];
        float* d = y + (l0 + l) * y_pitch + p;
        _mm512_mask_storeu_ps(d, static_cast<__mmask16>((1u << n) - 1), r);
      }
    }
  }
}

// dst[c][kh][e] = the input row (channel c, kernel row kh; x_c, x_kh apart from src) at column
// iw0 + e, 0 outside [0, W), for e < span (a multiple of 16): masked loads, which read nothing
// in the lanes they leave out.
__attribute__((target("arch=x86-64-v4"), noinline)) void copy_edge(const float* src, int64_t nc, int64_t nkh, int64_t x_c,
                                                                    int64_t x_kh, int64_t iw0, int64_t W, int64_t span,
                                                                    float* __restrict dst) {
  for (int64_t e = 0; e < span; e += 16) {
    uint32_t m = 0;
    for (int l = 0; l < 16; ++l) m |= (iw0 + e + l >= 0 && iw0 + e + l < W ? 1u : 0u) << l;
    const __mmask16 mask = static_cast<__mmask16>(m);
    for (int64_t c = 0; c < nc; ++c)
      for (int64_t kh = 0; kh < nkh; ++kh)
        _mm512_storeu_ps(dst + (c * nkh + kh) * span + e, _mm512_maskz_loadu_ps(mask, src + c * x_c + kh * x_kh + iw0 + e));
  }
}

struct Direct {
  const float* x;
  const float* Wp;  // [group][channel block][Cg][kH][kW][L]
  const float* bias;
  float* y;
  Conv2dGeometry g;
  int64_t Cg, Og, K, cb;
  int64_t blocks;      // pixel blocks per row, equal sizes of at most kUW
  int64_t span;        // input columns a block of kUW pixels reads, rounded up to 16
  int64_t ow_a, ow_b;  // pixels whose taps all lie inside the row
  int64_t p0(int64_t b) const { return g.OW * b / blocks; }
  bool edge(int64_t b) const { return p0(b) < ow_a || p0(b + 1) > ow_b; }
  // Per-thread buffer floats: the partial sums (Og x OW rounded up to 16) and the padded copies
  // of the edge blocks' input (cb channels x kH rows x span each).
  int64_t stage_floats() const { return Og * ((g.OW + 15) / 16 * 16); }
  int64_t copy_floats() const {
    int64_t e = 0;
    for (int64_t b = 0; b < blocks; ++b) e += edge(b);
    return e * cb * g.kH * span;
  }
};

// Output row oh of image n, group gi; stage and copies as sized by Direct.
void direct_row(const Direct& d, int64_t n, int64_t gi, int64_t oh, float* stage, float* copies) {
  const Conv2dGeometry& g = d.g;
  int64_t kh0 = 0, kh1 = g.kH;
  while (kh0 < kh1 && oh * g.sh - g.ph + kh0 * g.dh < 0) ++kh0;
  while (kh1 > kh0 && oh * g.sh - g.ph + (kh1 - 1) * g.dh >= g.H) --kh1;
  const int64_t nkh = kh1 - kh0, ih0 = std::clamp<int64_t>(oh * g.sh - g.ph + kh0 * g.dh, 0, g.H - 1);
  const float* x_img = d.x + ((n * g.C + gi * d.Cg) * g.H + ih0) * g.W;
  for (int64_t c0 = 0; c0 < d.Cg; c0 += d.cb) {
    const int64_t nc = std::min(d.cb, d.Cg - c0);
    const float* x_c0 = x_img + c0 * g.H * g.W;
    // The edge blocks' input, zero where it falls outside the row: [c][kernel row][span].
    float* cp = copies;
    for (int64_t b = 0; b < d.blocks; ++b) {
      if (!d.edge(b)) continue;
      copy_edge(x_c0, nc, nkh, g.H * g.W, g.dh * g.W, d.p0(b) * g.sw - g.pw, g.W, d.span, cp);
      cp += nc * nkh * d.span;
    }
    for (int64_t o0 = 0; o0 < d.Og; o0 += kOB) {
      const int L = static_cast<int>(std::min<int64_t>(kOB, d.Og - o0)), OV = L / 16;
      float* st = stage + o0 * ((g.OW + 15) / 16 * 16);
      Taps t;
      t.nc = nc;
      t.nkh = nkh;
      t.nkw = g.kW;
      t.x_kw = g.dw;
      t.w_c = g.kH * g.kW * L;
      t.w_kh = g.kW * L;
      t.w = d.Wp + gi * d.Og * d.K + o0 * d.K + (c0 * g.kH + kh0) * g.kW * L;
      const float* cpb = copies;
      for (int64_t b = 0; b < d.blocks; ++b) {
        const int64_t p0 = d.p0(b), p1 = d.p0(b + 1);
        if (d.edge(b)) {
          t.x = cpb;
          t.x_c = nkh * d.span;
          t.x_kh = d.span;
          cpb += nc * nkh * d.span;
        } else {
          t.x = x_c0 + p0 * g.sw - g.pw;
          t.x_c = g.H * g.W;
          t.x_kh = g.dh * g.W;
        }
        kKernels[OV - 1][p1 - p0 - 1](t, st + p0 * L, c0 == 0);
      }
    }
  }
  for (int64_t o0 = 0; o0 < d.Og; o0 += kOB) {
    const int L = static_cast<int>(std::min<int64_t>(kOB, d.Og - o0));
    const int64_t oc = gi * d.Og + o0;
    write_rows(stage + o0 * ((g.OW + 15) / 16 * 16), g.OW, L, d.bias ? d.bias + oc : nullptr,
               d.y + ((n * g.O + oc) * g.OH + oh) * g.OW, g.OH * g.OW);
  }
}

// ---- weight gradient -------------------------------------------------------------------
// NOTE [Conv2d direct weight gradient]: the same layout turned around. gw[o][c][tap] sums
// gy[o][pixel] x[c][the pixel's tap] over the batch's pixels; with 16 output channels in the
// lanes, a block's sums for one input channel and up to 9 taps stay in registers (9 x 3 vectors
// for 48 channels) while the pixels go by: per pixel, 3 loads of gy (transposed once to [pixel]
// [lanes], gy_to_lanes) and 9 broadcasts of x for 27 multiply-adds. The input plane is copied
// zero-padded (in L1) before its channel's blocks run, so no tap needs a bounds check. Threads
// take (group, input channel, output block) items and go through the images in order, so the
// sums need no reduction across threads; an image's transposed gy (OH OW Og floats) stays in
// L2 while a thread's items use it.
constexpr int kWTaps = 9;   // taps per block
constexpr int kWLanes = 48; // output channels per block (then 32 or 16)

struct WTaps {
  const float* x;       // the padded input plane at the first output pixel's first tap
  int64_t pitch, sh;    // its row pitch; the rows between output rows
  const float* gy;      // [OH OW][L]
  int64_t OH, OW;
  const int64_t* off;   // the block's taps' offsets in the plane
};

// acc [T][16 OV] (= when first, += otherwise) over every output pixel, column stride 2.
template <int OV, int T>
__attribute__((target("arch=x86-64-v4"), noinline)) void wgrad_kernel(const WTaps& t, float* __restrict acc_io, bool first) {
  constexpr int L = 16 * OV;
  v16f acc[T][OV];
  for (int k = 0; k < T; ++k)
    for (int v = 0; v < OV; ++v) {
      if (first) {
        acc[k][v] = v16f{};
      } else {
        std::memcpy(&acc[k][v], acc_io + k * L + 16 * v, sizeof(v16f));
      }
    }
  int64_t off[T];
  for (int k = 0; k < T; ++k) off[k] = t.off[k];
  const float* g = t.gy;
  for (int64_t oh = 0; oh < t.OH; ++oh) {
    const float* xr = t.x + oh * t.sh * t.pitch;
    for (int64_t ow = 0; ow < t.OW; ++ow, g += L) {
      v16f gv[OV];
      for (int v = 0; v < OV; ++v) std::memcpy(&gv[v], g + 16 * v, sizeof(v16f));
      const float* xb = xr + 2 * ow;
#pragma GCC unroll 16
      for (int k = 0; k < T; ++k) {
        const float s = xb[off[k]];
        const v16f a = {s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s};
        for (int v = 0; v < OV; ++v) acc[k][v] += a * gv[v];
      }
    }
  }
  for (int k = 0; k < T; ++k)
    for (int v = 0; v < OV; ++v) std::memcpy(acc_io + k * L + 16 * v, &acc[k][v], sizeof(v16f));
}

using WKernelFn = void (*)(const WTaps&, float*, bool);

template <int OV, int... U>
constexpr std::array<WKernelFn, sizeof...(U)> wkernel_table(std::integer_sequence<int, U...>) {
  return {&wgrad_kernel<OV, U + 1>...};
}
// kWKernels[OV - 1][T - 1]
const std::array<std::array<WKernelFn, kWTaps>, 3> kWKernels = {wkernel_table<1>(std::make_integer_sequence<int, kWTaps>()),
                                                                 wkernel_table<2>(std::make_integer_sequence<int, kWTaps>()),
                                                                 wkernel_table<3>(std::make_integer_sequence<int, kWTaps>())};

// dst [P][L] = the L planes src, src + P, ... (P floats each) transposed: 16 x 16 blocks, the
// last P % 16 pixels with masked loads.
__attribute__((target("arch=x86-64-v4"), noinline)) void gy_to_lanes(const float* __restrict src, int64_t P, int L,
                                                                      float* __restrict dst) {
  for (int64_t p = 0; p < P; p += 16) {
    const int64_t n = std::min<int64_t>(16, P - p);
    const __mmask16 mask = static_cast<__mmask16>((1u << n) - 1);
    for (int l0 = 0; l0 < L; l0 += 16) {
      v16f v[16];
      for (int l = 0; l < 16; ++l) v[l] = _mm512_maskz_loadu_ps(mask, src + (l0 + l) * P + p);
      transpose_step<8>(v);
      transpose_step<4>(v);
      transpose_step<2>(v);
      transpose_step<1>(v);
      for (int64_t q = 0; q < n; ++q) std::memcpy(dst + (p + q) * L + l0, &v[q], sizeof(v16f));
    }
  }
}

// The output-channel blocks of a group: 48 wide while at least 48 remain, then 32 or 16.
int64_t wgrad_lanes(int64_t Og, int64_t o0) { return std::min<int64_t>(kWLanes, Og - o0); }
int64_t wgrad_blocks(int64_t Og) { return (Og + kWLanes - 1) / kWLanes; }
#endif

}  // namespace

bool direct_backward_weight_applies(const Conv2dGeometry& g) {
#ifdef TRIDENT_AVX512_MICRO_KERNEL
  return direct_forward_applies(g) && g.groups * g.in_per_group() * wgrad_blocks(g.out_per_group()) >= 2 * get_num_threads();
#else
  (void)g;
  return false;
#endif
}

void direct_backward_weight(const float* gy, const float* x, float* gw, const Conv2dGeometry& g) {
#ifdef TRIDENT_AVX512_MICRO_KERNEL
  const int64_t Cg = g.in_per_group(), Og = g.out_per_group(), taps = g.kH * g.kW, P = g.OH * g.OW;
  const int64_t nob = wgrad_blocks(Og), Hp = g.H + 2 * g.ph, Wp = g.W + 2 * g.pw;
  // gy of every image and group, block by block: [n][gi][block at o0: P x L].
  Tensor lanes = empty({g.N * g.O * P});
  float* gyT = lanes.data<float>();
  parallel_for(0, g.N * g.groups * nob, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t ng = i / nob, o0 = i % nob * kWLanes;
      gy_to_lanes(gy + (ng * Og + o0) * P, P, static_cast<int>(wgrad_lanes(Og, o0)), gyT + (ng * Og + o0) * P);
    }
  });
  // The taps' offsets in a padded plane, and the blocks of at most kWTaps taps (equal sizes).
  std::vector<int64_t> off(static_cast<size_t>(taps));
  for (int64_t t = 0; t < taps; ++t) off[static_cast<size_t>(t)] = t / g.kW * g.dh * Wp + t % g.kW * g.dw;
  const int64_t tblocks = (taps + kWTaps - 1) / kWTaps;
  // The sums, [gi][c][block at o0: taps x L], then into gw [o][c][tap].
  Tensor sums = empty({g.groups * Cg * Og * taps});
  float* gwT = sums.data<float>();
  parallel_for(0, g.groups * Cg * nob, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> plane(static_cast<size_t>(Hp * Wp), 0.0f);
    for (int64_t n = 0; n < g.N; ++n) {
      int64_t padded = -1;  // the channel in `plane`
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t gc = i / nob, gi = gc / Cg, o0 = i % nob * kWLanes;
        const int L = static_cast<int>(wgrad_lanes(Og, o0));
        if (padded != gc) {  // borders stay zero; rows copied
          const float* src = x + (n * g.C + gc) * g.H * g.W;
          for (int64_t h = 0; h < g.H; ++h) std::memcpy(plane.data() + (h + g.ph) * Wp + g.pw, src + h * g.W, sizeof(float) * g.W);
          padded = gc;
        }
        WTaps t{plane.data(), Wp, g.sh, gyT + ((n * g.groups + gi) * Og + o0) * P, g.OH, g.OW, nullptr};
        float* acc = gwT + (gc * Og + o0) * taps;
        for (int64_t b = 0; b < tblocks; ++b) {
          const int64_t t0 = taps * b / tblocks, t1 = taps * (b + 1) / tblocks;
          t.off = off.data() + t0;
          kWKernels[L / 16 - 1][t1 - t0 - 1](t, acc + t0 * L, n == 0);
        }
      }
    }
  });
  parallel_for(0, g.O, 1, [&](int64_t o_begin, int64_t o_end) {
    for (int64_t o = o_begin; o < o_end; ++o) {
      const int64_t gi = o / Og, oo = o % Og, o0 = oo / kWLanes * kWLanes, l = oo - o0, L = wgrad_lanes(Og, o0);
      for (int64_t c = 0; c < Cg; ++c)
        for (int64_t t = 0; t < taps; ++t) gw[(o * Cg + c) * taps + t] = gwT[((gi * Cg + c) * Og + o0) * taps + t * L + l];
    }
  });
#else
  (void)gy, (void)x, (void)gw, (void)g;
  TRIDENT_CHECK(false, "conv2d: the direct kernel needs the AVX-512 micro-kernel (direct_backward_weight_applies)");
#endif
}

bool set_conv_direct_enabled_for_testing(bool enabled) { return std::exchange(g_direct_enabled, enabled); }

bool direct_forward_applies(const Conv2dGeometry& g) {
#ifdef TRIDENT_AVX512_MICRO_KERNEL
  return g_direct_enabled && conv_simd::g_avx512_kernel && g.sw == 2 && !g.depthwise() && g.in_per_group() > 0 &&
         g.out_per_group() > 0 && g.out_per_group() % 16 == 0;
#else
  (void)g;
  return false;
#endif
}

void direct_forward(const float* x, const float* w, const float* bias, float* y, const Conv2dGeometry& g) {
#ifdef TRIDENT_AVX512_MICRO_KERNEL
  Direct d{x, nullptr, bias, y, g, g.in_per_group(), g.out_per_group(), 0, 0, 0, 0, 0, 0};
  const int64_t taps = g.kH * g.kW;
  d.K = d.Cg * taps;
  // Input channels per chunk: the kernel rows they read fit in about 24 KiB; equal chunks.
  const int64_t fit = std::clamp<int64_t>(6144 / std::max<int64_t>(1, g.kH * g.W), 1, d.Cg);
  const int64_t chunks = (d.Cg + fit - 1) / fit;
  d.cb = (d.Cg + chunks - 1) / chunks;
  d.blocks = (g.OW + kUW - 1) / kUW;
  d.span = ((kUW - 1) * g.sw + (g.kW - 1) * g.dw + 1 + 15) / 16 * 16;
  d.ow_a = std::min<int64_t>((g.pw + g.sw - 1) / g.sw, g.OW);
  const int64_t last = g.W - 1 + g.pw - (g.kW - 1) * g.dw;  // the largest ow sw with every tap inside
  d.ow_b = last < 0 ? d.ow_a : std::clamp<int64_t>(last / g.sw + 1, d.ow_a, g.OW);
  // Wp[gi][o0 / 32][c][tap][l] = w[gi Og + o0 + l][c][tap], blocks of 32 channels (the last 16).
  Tensor packed = empty({g.groups * d.Og * d.K});
  float* Wp = packed.data<float>();
  const int64_t oblocks = (d.Og + kOB - 1) / kOB;
  parallel_for(0, g.groups * oblocks, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t gi = i / oblocks, o0 = i % oblocks * kOB, L = std::min<int64_t>(kOB, d.Og - o0);
      float* dst = Wp + gi * d.Og * d.K + o0 * d.K;
      for (int64_t l = 0; l < L; ++l) {
        const float* src = w + (gi * d.Og + o0 + l) * d.K;
        for (int64_t k = 0; k < d.K; ++k) dst[k * L + l] = src[k];
      }
    }
  });
  d.Wp = Wp;
  const int64_t rows = g.N * g.groups * g.OH;
  parallel_for(0, rows, 1, [&](int64_t r0, int64_t r1) {
    std::vector<float> stage(static_cast<size_t>(d.stage_floats())), copies(static_cast<size_t>(d.copy_floats()));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t oh = r % g.OH, gi = r / g.OH % g.groups, n = r / (g.OH * g.groups);
      direct_row(d, n, gi, oh, stage.data(), copies.data());
    }
  });
#else
  (void)x, (void)w, (void)bias, (void)y, (void)g;
  TRIDENT_CHECK(false, "conv2d: the direct kernel needs the AVX-512 micro-kernel (direct_forward_applies)");
#endif
}

}  // namespace trident::cpu
