// Direct convolution with channels in the vector lanes (NOTE [Conv2d algorithms] in
// ops/cpu/conv.cpp).
//
// NOTE [Conv2d direct]: the blocked im2col kernels (NOTE [Conv2d blocked im2col]) put output
// pixels in the vector lanes, so a stride-2 convolution first splits its input into stride
// phases and then copies tiles of them; on an AVX-512 CPU, where the micro-kernel itself runs
// at the FMA peak, those copies were a third of the 3x3 stride-2 forward pass and left it at
// 0.7-0.9 of PyTorch's oneDNN (docs/performance.md). Here the lanes hold 16 output channels
// instead (oneDNN's layout for its direct kernels): for each input channel and tap, one or two
// vectors of packed weights (16 or 32 output channels) are loaded and every output pixel of the
// block broadcasts its input value from where it lies in the NCHW input (2 floats apart for a
// column stride of 2, 1 for 1) and multiplies both; the stride costs nothing and nothing is
// copied. A block is up to 14 output pixels of one row by 32 channels: 28 accumulators, and per
// (channel, tap) 2 loads of weights and 14 broadcasts for 28 multiply-adds. Each work item is
// one output row of one image and group for a range of output channels whose weights fit in
// about 768 KiB (range_of; the rows of a range are consecutive items, so the weights stay in L2
// from row to row): its input channels go in chunks whose rows fit in L1 (about 24 KiB), each
// chunk serving every block of output channels of the range before the next is read;
// the partial sums wait in a per-thread buffer [channel block][pixel][lane] and go to y
// transposed (16 x 16 blocks) with the bias at the end. Taps that fall in the padding are
// skipped by the loop bounds for rows; for columns, the blocks at a row's edges (those with a
// pixel whose taps reach outside the row) run their kernel columns in runs that reach the same
// pixels, one narrower kernel call per run (Direct::inside), into sums zeroed first. (They
// once read a zero-padded copy of their input columns instead: 8.5% of the 3x3 stride-2
// forward pass below on one thread, whose first block of each row is an edge block; without
// it that pass is 1.16x faster, Zen 5, best of 8 alternating runs of the two builds. The input
// gradient's edge blocks still read copies, copy_edge: 2% of that convolution's forward +
// backward.)
// It takes every f32 pass of column stride 1 or 2 whose channels fill the lanes, except the
// shapes of Winograd F(4x4, 3x3) and F(2, 7) (fewer multiplies) and pointwise (strided or not)
// and depthwise convolutions (their own kernels). Measured against the blocked kernels (8x64x56x56->128, 3x3
// stride 2, one Emerald Rapids thread, alternating): 6.6-6.7 ms against 8.2-8.3; the kernels run
// at the FMA peak, the transposed writes take 6% and the edge copies (since gone) 4%. On column
// stride 1 (two threads, best of 12 alternating rounds): 5x5 forward 1.10x the blocked kernels' speed,
// forward + backward 1.31x; 1x5 1.22x and 1.23x; 3x3 dilated 2 0.99x and 1.18x; 7x1 with row
// stride 2 1.06x and 1.21x. An AVX2 form (8 lanes, 16 registers: blocks of 6 pixels by 16
// channels) measured slower than the blocked kernels in AVX2 mode on the same machine (3x3
// stride 2 forward, best of 30 alternating rounds: 15.0 against 14.2 ms on one thread, 8.9
// against 8.4 on two), so AVX2 CPUs keep the blocked kernels.
#include "ops/cpu/conv_direct.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/conv_blocked.h"
#include "ops/cpu/conv_simd.h"
#include "ops/cpu/conv_winograd.h"

namespace trident::cpu {
namespace {

bool g_direct_enabled = true;

// The geometries the direct kernels can take: an AVX-512 CPU, column stride 1 or 2, neither
// depthwise nor pointwise, strided or not (their own kernels), channels on both sides.
bool direct_geometry(const Conv2dGeometry& g) {
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
  return g_direct_enabled && cpu_avx512_kernels() && (g.sw == 1 || g.sw == 2) && !g.depthwise() && !g.pointwise() &&
         !g.sampled_pointwise() && g.in_per_group() > 0 && g.out_per_group() > 0;
#else
  (void)g;
  return false;
#endif
}

#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
using conv_simd::v16f;

constexpr int kUW = 14;  // output pixels per block
constexpr int kOB = 32;  // output channels per block (the last block of a group may be 16)

// Channels per range (a multiple of kOB, or all `channels`) such that their packed weights,
// per_channel floats each, take at most about 768 KiB (g_range_floats): under half of a 2 MiB
// L2, but a range of at least one block. Measured on 416 -> 416 1x7 and 7x1 convolutions with
// column and row stride 2 (4x416x28x28, two threads): the forward pass 0.81-0.84x the blocked
// kernels' speed with the whole weights per row, 0.94-1.07x with ranges of 768 KiB (256 KiB
// and 1.5 MiB no better), forward + backward 1.17-1.24x.
constexpr int64_t kRangeFloats = (int64_t{768} << 10) / static_cast<int64_t>(sizeof(float));
int64_t g_range_floats = kRangeFloats;
int64_t range_of(int64_t channels, int64_t per_channel) {
  const int64_t blocks = std::max<int64_t>(1, g_range_floats / std::max<int64_t>(1, per_channel * kOB));
  return std::min(channels, blocks * kOB);
}

// The work items of the forward pass and the input gradient on the threads: (image, group,
// range of `channels` lanes-side channels, one of `rows` rows), handed out in chunks of
// consecutive items (NOTE [Dynamic items] in ops/cpu/conv_blocked.cpp), so a range's rows follow
// one another on a thread and the range's weights (range_of) stay in L2 from row to row (all of
// a 416 -> 416 7x1 convolution's, 4.8 MB, came from L3 for every row otherwise). Each chunk gets
// its own stage and copy buffers; row(n, gi, begin, end, row, stage, copies).
template <typename Row>
void for_rows(const Conv2dGeometry& g, int64_t rows, int64_t channels, int64_t per_channel, int64_t stage_floats,
              int64_t copy_floats, const Row& row) {
  const int64_t range = range_of(channels, per_channel), ranges = (channels + range - 1) / range;
  const int64_t items = g.N * g.groups * ranges * rows;
  const auto body = [&](int64_t i0, int64_t i1) {
    std::vector<float> stage(static_cast<size_t>(stage_floats)), copies(static_cast<size_t>(copy_floats));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t r = i % rows, q = i / rows % ranges, gi = i / (rows * ranges) % g.groups, n = i / (rows * ranges * g.groups);
      row(n, gi, q * range, std::min(channels, (q + 1) * range), r, stage.data(), copies.data());
    }
  };
  // Handed out in chunks of about an eighth of a thread's share (NOTE [Dynamic items]).
  parallel_for_dynamic(0, items, dynamic_chunk(items), body);
}

// One block's sums over input channels [c0, c0 + nc) and the kernel rows and columns that stay
// inside the input: x at (c0, the first kernel row's input row, the first pixel's first kernel
// column), w the packed weights at (c0, that kernel row, that column). (The input gradient's
// blocks read gy as their input and run over output channels; see direct_backward_input.)
struct Taps {
  const float* x;
  const float* w;
  int64_t nc, nkh, nkw;
  int64_t x_c, x_kh, x_kw;  // input strides: channel H W, kernel row dh W, kernel column dw
  int64_t w_c, w_kh, w_kw;  // weight strides: channel kH kW L, kernel row kW L, kernel column L
};

// The accumulators acc[N][OV] of a kernel: zero when first, else acc_io's rows (`pitch` floats
// apart, OV vectors each); and back.
template <int N, int OV>
__attribute__((TRIDENT_TARGET_V4, always_inline)) inline void load_sums(v16f (&acc)[N][OV], const float* acc_io,
                                                                                int pitch, bool first) {
#pragma GCC unroll 16
  for (int j = 0; j < N; ++j)
#pragma GCC unroll 2
    for (int v = 0; v < OV; ++v) {
      if (first) {
        acc[j][v] = v16f{};
      } else {
        std::memcpy(&acc[j][v], acc_io + j * pitch + 16 * v, sizeof(v16f));
      }
    }
}
template <int N, int OV>
__attribute__((TRIDENT_TARGET_V4, always_inline)) inline void store_sums(const v16f (&acc)[N][OV], float* acc_io,
                                                                                 int pitch) {
#pragma GCC unroll 16
  for (int j = 0; j < N; ++j)
#pragma GCC unroll 2
    for (int v = 0; v < OV; ++v) std::memcpy(acc_io + j * pitch + 16 * v, &acc[j][v], sizeof(v16f));
}

// acc [UW][16 OV] (= when first, += otherwise) for UW pixels XS floats apart in the input, their
// sums AS L floats apart in acc_io: the forward pass XS = 2 (the stride), AS = 1; the input
// gradient XS = 1 (gy's columns), AS = 2 (one stride phase of gx's columns).
// NOTE [Direct kernel taps]: the (kernel row, column) taps' offsets in x and w are listed first
// (up to kMaxTaps at a time, in row-major order), and the loop runs over (channel, tap) with two
// pointers and the two lists. A loop nest over (channel, row, column) with the six strides of
// Taps kept more integers live than x86-64 has registers: GCC parked one in a vector register and
// fetched it back at every kernel row, on the weights' address path, and the nest's loop control
// ran every three taps. On the 3x3 stride-2 kernel (14 pixels, 32 channels, 32 input channels,
// the inputs in L1 and L2 as in the benchmark, one thread of a 2 MiB-L2 Xeon, best of 3, three
// runs alternating): 185-186 GFLOP/s instead of 172-177 with all three columns, 188 instead of
// 162-174 with one (the runs of edge blocks); the benchmark's whole forward pass on one thread,
// four rounds alternating the two builds: 5.74-6.16 ms instead of 6.28-6.84. The sums keep their
// order (channel, then row, then column) wherever a kernel has at most kMaxTaps taps.
constexpr int kMaxTaps = 64;

template <int OV, int UW, int XS, int AS>
__attribute__((TRIDENT_TARGET_V4, noinline)) void direct_kernel(const Taps& t, float* __restrict acc_io, bool first) {
  constexpr int L = 16 * OV;
  v16f acc[UW][OV];
  load_sums(acc, acc_io, AS * L, first);
  const int64_t taps = t.nkh * t.nkw;
  for (int64_t s0 = 0; s0 < taps; s0 += kMaxTaps) {
    const int nt = static_cast<int>(std::min<int64_t>(kMaxTaps, taps - s0));
    int64_t xo[kMaxTaps], wo[kMaxTaps];
    for (int64_t i = 0, kh = s0 / t.nkw, kw = s0 % t.nkw; i < nt; ++i) {
      xo[i] = kh * t.x_kh + kw * t.x_kw;
      wo[i] = kh * t.w_kh + kw * t.w_kw;
      if (++kw == t.nkw) kw = 0, ++kh;
    }
    const float* xc = t.x;
    const float* wc = t.w;
    for (int64_t c = 0; c < t.nc; ++c, xc += t.x_c, wc += t.w_c)
      for (int i = 0; i < nt; ++i) {
        const float* xr = xc + xo[i];
        const float* wr = wc + wo[i];
        v16f wv[OV];
        for (int v = 0; v < OV; ++v) std::memcpy(&wv[v], wr + 16 * v, sizeof(v16f));
#pragma GCC unroll 16
        for (int j = 0; j < UW; ++j) {
          const float s = xr[XS * j];
          const v16f a = {s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s};
          for (int v = 0; v < OV; ++v) acc[j][v] += a * wv[v];
        }
      }
  }
  store_sums(acc, acc_io, AS * L);
}

using KernelFn = void (*)(const Taps&, float*, bool);

template <int OV, int XS, int AS, int... U>
constexpr std::array<KernelFn, sizeof...(U)> kernel_table(std::integer_sequence<int, U...>) {
  return {&direct_kernel<OV, U + 1, XS, AS>...};
}
// kKernels[OV - 1][UW - 1] of the forward pass with column stride 2, kStride1Kernels of column
// stride 1 (and of the input gradient of those), kInputKernels of the input gradient of stride 2.
const std::array<std::array<KernelFn, kUW>, 2> kKernels = {kernel_table<1, 2, 1>(std::make_integer_sequence<int, kUW>()),
                                                            kernel_table<2, 2, 1>(std::make_integer_sequence<int, kUW>())};
const std::array<std::array<KernelFn, kUW>, 2> kStride1Kernels = {kernel_table<1, 1, 1>(std::make_integer_sequence<int, kUW>()),
                                                                   kernel_table<2, 1, 1>(std::make_integer_sequence<int, kUW>())};
const std::array<std::array<KernelFn, kUW>, 2> kInputKernels = {
    kernel_table<1, 1, 2>(std::make_integer_sequence<int, kUW>()), kernel_table<2, 1, 2>(std::make_integer_sequence<int, kUW>())};

using v16i = int32_t __attribute__((vector_size(64)));

// The 16 x 16 transpose of v (rows) in place: for e = 8, 4, 2, 1, rows i and i + e (bit e of i
// clear) swap the lanes with bit e set of row i with those with it clear of row i + e, which
// exchanges bit e of the row and lane numbers; after all four every element (r, l) is at (l, r).
template <int E>
__attribute__((TRIDENT_TARGET_V4, always_inline)) inline void transpose_step(v16f* v) {
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
__attribute__((TRIDENT_TARGET_V4, noinline)) void write_rows(const float* __restrict stage, int64_t OW, int L,
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
__attribute__((TRIDENT_TARGET_V4, noinline)) void copy_edge(const float* src, int64_t nc, int64_t nkh, int64_t x_c,
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
  int64_t ow_a, ow_b;  // pixels whose taps all lie inside the row
  int64_t p0(int64_t b) const { return g.OW * b / blocks; }
  bool edge(int64_t b) const { return p0(b) < ow_a || p0(b + 1) > ow_b; }
  // The pixels [lo, hi) of [p0, p1) whose kernel column kw reads inside the row: 0 <= ow sw -
  // pw + kw dw < W (lo >= hi when none does).
  std::pair<int64_t, int64_t> inside(int64_t p0, int64_t p1, int64_t kw) const {
    const int64_t a = g.pw - kw * g.dw, z = g.W - 1 + g.pw - kw * g.dw;  // ow sw in [a, z]
    const int64_t lo = a <= 0 ? 0 : (a + g.sw - 1) / g.sw, hi = z < 0 ? 0 : z / g.sw + 1;
    return {std::max(p0, lo), std::min(p1, hi)};
  }
  // Per-thread buffer floats: the partial sums (Og x OW rounded up to 16).
  int64_t stage_floats() const { return Og * ((g.OW + 15) / 16 * 16); }
};

// Output row oh of image n, group gi, output channels [o_begin, o_end) of the group; stage as
// sized by Direct.
void direct_row(const Direct& d, int64_t n, int64_t gi, int64_t o_begin, int64_t o_end, int64_t oh, float* stage) {
  const Conv2dGeometry& g = d.g;
  int64_t kh0 = 0, kh1 = g.kH;
  while (kh0 < kh1 && oh * g.sh - g.ph + kh0 * g.dh < 0) ++kh0;
  while (kh1 > kh0 && oh * g.sh - g.ph + (kh1 - 1) * g.dh >= g.H) --kh1;
  const int64_t nkh = kh1 - kh0, ih0 = std::clamp<int64_t>(oh * g.sh - g.ph + kh0 * g.dh, 0, g.H - 1);
  const float* x_img = d.x + ((n * g.C + gi * d.Cg) * g.H + ih0) * g.W;
  for (int64_t c0 = 0; c0 < d.Cg; c0 += d.cb) {
    const int64_t nc = std::min(d.cb, d.Cg - c0);
    const float* x_c0 = x_img + c0 * g.H * g.W;
    for (int64_t o0 = o_begin; o0 < o_end; o0 += kOB) {
      const int L = static_cast<int>(std::min<int64_t>(kOB, o_end - o0)), OV = L / 16;
      const auto& kernels = (g.sw == 2 ? kKernels : kStride1Kernels)[OV - 1];
      float* st = stage + o0 * ((g.OW + 15) / 16 * 16);
      Taps t;
      t.nc = nc;
      t.nkh = nkh;
      t.x_c = g.H * g.W;
      t.x_kh = g.dh * g.W;
      t.x_kw = g.dw;
      t.w_c = g.kH * g.kW * L;
      t.w_kh = g.kW * L;
      t.w_kw = L;
      const float* w_c0 = d.Wp + gi * d.Og * d.K + o0 * d.K + (c0 * g.kH + kh0) * g.kW * L;
      for (int64_t b = 0; b < d.blocks; ++b) {
        const int64_t p0 = d.p0(b), p1 = d.p0(b + 1);
        if (!d.edge(b)) {
          t.nkw = g.kW;
          t.x = x_c0 + p0 * g.sw - g.pw;
          t.w = w_c0;
          kernels[p1 - p0 - 1](t, st + p0 * L, c0 == 0);
          continue;
        }
        // An edge block: the kernel columns in runs that reach the same pixels of the block
        // (those whose tap lies inside the row), one kernel call per run, so that nothing
        // outside the row is read; its sums start from zero.
        if (c0 == 0) std::fill_n(st + p0 * L, (p1 - p0) * L, 0.0f);
        for (int64_t kw = 0; kw < g.kW;) {
          const auto [lo, hi] = d.inside(p0, p1, kw);
          int64_t kw1 = kw + 1;
          while (kw1 < g.kW && d.inside(p0, p1, kw1) == std::pair{lo, hi}) ++kw1;
          if (lo < hi) {
            t.nkw = kw1 - kw;
            t.x = x_c0 + lo * g.sw - g.pw + kw * g.dw;
            t.w = w_c0 + kw * L;
            kernels[hi - lo - 1](t, st + lo * L, false);
          }
          kw = kw1;
        }
      }
    }
  }
  for (int64_t o0 = o_begin; o0 < o_end; o0 += kOB) {
    const int L = static_cast<int>(std::min<int64_t>(kOB, o_end - o0));
    const int64_t oc = gi * d.Og + o0;
    write_rows(stage + o0 * ((g.OW + 15) / 16 * 16), g.OW, L, d.bias ? d.bias + oc : nullptr,
               d.y + ((n * g.O + oc) * g.OH + oh) * g.OW, g.OH * g.OW);
  }
}

// ---- input gradient -------------------------------------------------------------------
// NOTE [Conv2d direct input gradient]: gx[c][ih][iw] sums gy[o][oh][ow] w[o][c][kh][kw] over
// the (kh, oh) with ih = oh sh - ph + kh dh and the (kw, ow) with iw = 2 ow - pw + kw dw. With
// 16 input channels in the lanes this is the forward kernel run on gy: for gx's columns of one
// parity (one stride phase: iw = 2 j + phase) the kernel columns that reach them are fixed (every
// other one for odd dw) and pixel j reads gy column j + e(kw), consecutive columns, so the
// block broadcasts gy at stride 1 and keeps its sums 2 pixels apart in the row's buffer, the
// other phase filling the columns between. A row's kernel rows are those with ih + ph - kh dh
// a multiple of sh and oh inside gy, an arithmetic progression. As in the forward pass, the
// blocks whose gy columns run past gy's edges read a zero-padded copy, and the sums go to gx by
// 16 x 16 transposes.
struct DirectInput {
  const float* gy;
  const float* Wp;  // [group][channel block][row class][column phase][Og][its taps][L], L input channels
  float* gx;
  Conv2dGeometry g;
  int64_t Cg, Og, cb, span;
  // Row classes r = (ih + ph) mod sh: the kernel rows kh with kh dh = r mod sh, first and count
  // (khstep apart); the taps of the classes and phases packed before (r, phase).
  std::vector<int64_t> kh_first, kh_count, before;
  int64_t khstep = 1;
  // Per column phase: pixels, kernel columns (first, step, count), the gy column of pixel 0 for
  // the first one (e0) and its change per step (de), blocks.
  struct Phase {
    int64_t pixels = 0, kw0 = 0, kstep = 1, nk = 0, e0 = 0, de = 0, blocks = 0;
    int64_t j(int64_t b) const { return pixels * b / blocks; }
    int64_t e_last() const { return e0 + (nk > 0 ? nk - 1 : 0) * de; }
  } ph[2];
  bool edge(const Phase& q, int64_t b) const {
    return q.nk > 0 && (q.j(b) + q.e_last() < 0 || q.j(b + 1) - 1 + q.e0 > g.OW - 1);
  }
  int64_t stage_floats() const { return Cg * ((g.W + 15) / 16 * 16); }
  int64_t copy_floats() const {
    int64_t e = 0;
    for (const Phase& q : ph)
      for (int64_t b = 0; b < q.blocks; ++b) e += edge(q, b);
    return e * cb * g.kH * span;
  }
};

// Input row ih of image n, group gi, input channels [c_begin, c_end) of the group; stage and
// copies as sized by DirectInput.
void direct_input_row(const DirectInput& d, int64_t n, int64_t gi, int64_t c_begin, int64_t c_end, int64_t ih, float* stage,
                      float* copies) {
  const Conv2dGeometry& g = d.g;
  // Kernel rows: those of the row's class with 0 <= oh < OH, oh = (ih + ph - kh dh) / sh: a
  // run [i0, i0 + nkh) of the class's progression.
  const int64_t r = (ih + g.ph) % g.sh, nclass = d.kh_count[static_cast<size_t>(r)];
  int64_t i0 = 0, nkh = 0, kh0 = 0;
  const int64_t khs = d.khstep;
  for (int64_t i = 0; i < nclass; ++i) {
    const int64_t kh = d.kh_first[static_cast<size_t>(r)] + i * khs, oh = (ih + g.ph - kh * g.dh) / g.sh;
    if (oh >= g.OH) {
      i0 = i + 1;
      continue;
    }
    if (oh < 0) break;
    if (nkh == 0) kh0 = kh;
    ++nkh;
  }
  const int64_t oh0 = nkh > 0 ? (ih + g.ph - kh0 * g.dh) / g.sh : 0;
  const int64_t x_kh = -(khs * g.dh / g.sh) * g.OW;  // gy rows per kernel-row step
  const float* gy_row = d.gy + ((n * g.O + gi * d.Og) * g.OH + oh0) * g.OW;
  const int64_t W16 = (g.W + 15) / 16 * 16;
  for (int64_t o0 = 0; o0 < d.Og; o0 += d.cb) {
    const int64_t no = std::min(d.cb, d.Og - o0);
    const float* gy_o0 = gy_row + o0 * g.OH * g.OW;
    float* cp = copies;
    for (const DirectInput::Phase& q : d.ph)
      for (int64_t b = 0; b < q.blocks; ++b) {
        if (!d.edge(q, b)) continue;
        copy_edge(gy_o0, no, nkh, g.OH * g.OW, x_kh, q.j(b) + q.e_last(), g.OW, d.span, cp);
        cp += no * nkh * d.span;
      }
    for (int64_t c0 = c_begin; c0 < c_end; c0 += kOB) {
      const int L = static_cast<int>(std::min<int64_t>(kOB, c_end - c0)), OV = L / 16;
      const int64_t taps = g.kH * g.kW;
      const float* w_block = d.Wp + (gi * d.Cg + c0) * d.Og * taps;
      float* st = stage + c0 * W16;
      const float* cpb = copies;
      for (int64_t phase = 0; phase < 2; ++phase) {
        const DirectInput::Phase& q = d.ph[phase];
        Taps t;
        t.nc = no;
        t.nkh = nkh;
        t.nkw = q.nk;
        t.x_kw = q.de;
        // This class and phase's taps, [Og][kernel row of the class][kernel column of the phase][L].
        t.w_c = nclass * q.nk * L;
        t.w_kh = q.nk * L;
        t.w_kw = L;
        t.w = w_block + d.before[static_cast<size_t>(r * 2 + phase)] * d.Og * L + o0 * t.w_c + i0 * t.w_kh;
        for (int64_t b = 0; b < q.blocks; ++b) {
          const int64_t j0 = q.j(b), j1 = q.j(b + 1);
          if (d.edge(q, b)) {
            t.x = cpb + (q.e0 - q.e_last());
            t.x_c = nkh * d.span;
            t.x_kh = d.span;
            cpb += no * nkh * d.span;
          } else {
            t.x = q.nk > 0 ? gy_o0 + j0 + q.e0 : gy_o0;
            t.x_c = g.OH * g.OW;
            t.x_kh = x_kh;
          }
          (g.sw == 2 ? kInputKernels : kStride1Kernels)[OV - 1][j1 - j0 - 1](t, st + (g.sw * j0 + phase) * L, o0 == 0);
        }
      }
    }
  }
  for (int64_t c0 = c_begin; c0 < c_end; c0 += kOB) {
    const int L = static_cast<int>(std::min<int64_t>(kOB, c_end - c0));
    write_rows(stage + c0 * W16, g.W, L, nullptr, d.gx + ((n * g.C + gi * d.Cg + c0) * g.H + ih) * g.W, g.H * g.W);
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

// acc [T][16 OV] (= when first, += otherwise) over every output pixel, column stride SW.
template <int OV, int T, int SW>
__attribute__((TRIDENT_TARGET_V4, noinline)) void wgrad_kernel(const WTaps& t, float* __restrict acc_io, bool first) {
  constexpr int L = 16 * OV;
  v16f acc[T][OV];
  load_sums(acc, acc_io, L, first);
  int64_t off[T];
  for (int k = 0; k < T; ++k) off[k] = t.off[k];
  const float* g = t.gy;
  for (int64_t oh = 0; oh < t.OH; ++oh) {
    const float* xr = t.x + oh * t.sh * t.pitch;
    for (int64_t ow = 0; ow < t.OW; ++ow, g += L) {
      v16f gv[OV];
      for (int v = 0; v < OV; ++v) std::memcpy(&gv[v], g + 16 * v, sizeof(v16f));
      const float* xb = xr + SW * ow;
#pragma GCC unroll 16
      for (int k = 0; k < T; ++k) {
        const float s = xb[off[k]];
        const v16f a = {s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s};
        for (int v = 0; v < OV; ++v) acc[k][v] += a * gv[v];
      }
    }
  }
  store_sums(acc, acc_io, L);
}

using WKernelFn = void (*)(const WTaps&, float*, bool);

template <int OV, int SW, int... U>
constexpr std::array<WKernelFn, sizeof...(U)> wkernel_table(std::integer_sequence<int, U...>) {
  return {&wgrad_kernel<OV, U + 1, SW>...};
}
// kWKernels[SW - 1][OV - 1][T - 1]
using WTable = std::array<std::array<WKernelFn, kWTaps>, 3>;
template <int SW>
constexpr WTable wkernels() {
  return {wkernel_table<1, SW>(std::make_integer_sequence<int, kWTaps>()), wkernel_table<2, SW>(std::make_integer_sequence<int, kWTaps>()),
          wkernel_table<3, SW>(std::make_integer_sequence<int, kWTaps>())};
}
const std::array<WTable, 2> kWKernels = {wkernels<1>(), wkernels<2>()};

// dst [P][L] = the L planes src, src + P, ... (P floats each) transposed: 16 x 16 blocks, the
// last P % 16 pixels with masked loads.
__attribute__((TRIDENT_TARGET_V4, noinline)) void gy_to_lanes(const float* __restrict src, int64_t P, int L,
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
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
  return direct_forward_applies(g) && g.groups * g.in_per_group() * wgrad_blocks(g.out_per_group()) >= 2 * get_num_threads();
#else
  (void)g;
  return false;
#endif
}

void direct_backward_weight(const float* gy, const float* x, float* gw, const Conv2dGeometry& g) {
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
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
          kWKernels[g.sw - 1][L / 16 - 1][t1 - t0 - 1](t, acc + t0 * L, n == 0);
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

bool direct_backward_input_applies(const Conv2dGeometry& g) {
  return direct_geometry(g) && g.in_per_group() % 16 == 0 && !winograd_backward_input_applies(g) &&
         !winograd7_backward_input_applies(g);
}

void direct_backward_input(const float* gy, const float* w, float* gx, const Conv2dGeometry& g) {
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
  DirectInput d{gy, nullptr, gx, g, g.in_per_group(), g.out_per_group(), 0, 0, {}, {}, {}, 1, {}};
  const int64_t taps = g.kH * g.kW;
  const int64_t fit = std::clamp<int64_t>(6144 / std::max<int64_t>(1, g.kH * g.OW), 1, d.Og);
  const int64_t chunks = (d.Og + fit - 1) / fit;
  d.cb = (d.Og + chunks - 1) / chunks;
  int64_t reach = 0;  // the most gy columns a block's kernel columns add to its pixels
  for (int64_t phase = 0; phase < g.sw; ++phase) {  // column stride 1: one phase, every kernel column
    DirectInput::Phase& q = d.ph[phase];
    q.pixels = (g.W - phase + g.sw - 1) / g.sw;
    q.blocks = (q.pixels + kUW - 1) / kUW;
    for (int64_t kw = 0; kw < g.kW; ++kw) {
      if ((phase + g.pw - kw * g.dw) % g.sw != 0) continue;
      if (q.nk == 0) q.kw0 = kw;
      if (q.nk == 1) q.kstep = kw - q.kw0;
      ++q.nk;
    }
    q.e0 = (phase + g.pw - q.kw0 * g.dw) / g.sw;  // exact: a multiple of sw (or nk = 0)
    q.de = -(q.kstep * g.dw / g.sw);
    reach = std::max(reach, q.e0 - q.e_last());
  }
  d.span = (kUW + reach + 15) / 16 * 16;
  // Row classes: kh dh mod sh; a class's kernel rows are khstep apart.
  d.khstep = g.sh / std::gcd(g.sh, g.dh);
  d.kh_first.assign(static_cast<size_t>(g.sh), 0);
  d.kh_count.assign(static_cast<size_t>(g.sh), 0);
  for (int64_t kh = 0; kh < g.kH; ++kh) {
    const size_t r = static_cast<size_t>(kh * g.dh % g.sh);
    if (d.kh_count[r]++ == 0) d.kh_first[r] = kh;
  }
  d.before.assign(static_cast<size_t>(2 * g.sh), 0);
  for (int64_t k = 1; k < 2 * g.sh; ++k)
    d.before[static_cast<size_t>(k)] =
        d.before[static_cast<size_t>(k - 1)] + d.kh_count[static_cast<size_t>((k - 1) / 2)] * d.ph[(k - 1) % 2].nk;
  // Wp[gi][c0 / 32][class r][phase][o][i][j][l] = w[gi Og + o][c0 + l][kh_first[r] + i khstep]
  // [kw0 + j kstep] (the phase's), blocks of 32 input channels (the last 16): a row's taps for
  // each output channel next to each other.
  Tensor packed = empty({g.groups * d.Cg * d.Og * taps});
  float* Wp = packed.data<float>();
  const int64_t cblocks = (d.Cg + kOB - 1) / kOB;
  parallel_for(0, g.groups * cblocks, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t gi = i / cblocks, c0 = i % cblocks * kOB, L = std::min<int64_t>(kOB, d.Cg - c0);
      float* block = Wp + (gi * d.Cg + c0) * d.Og * taps;
      for (int64_t r = 0; r < g.sh; ++r)
        for (int64_t phase = 0; phase < 2; ++phase) {
          const DirectInput::Phase& q = d.ph[phase];
          const int64_t nr = d.kh_count[static_cast<size_t>(r)];
          float* dst = block + d.before[static_cast<size_t>(r * 2 + phase)] * d.Og * L;
          for (int64_t o = 0; o < d.Og; ++o)
            for (int64_t a = 0; a < nr; ++a)
              for (int64_t b = 0; b < q.nk; ++b) {
                const int64_t kh = d.kh_first[static_cast<size_t>(r)] + a * d.khstep, kw = q.kw0 + b * q.kstep;
                for (int64_t l = 0; l < L; ++l)
                  dst[((o * nr + a) * q.nk + b) * L + l] = w[((gi * d.Og + o) * d.Cg + c0 + l) * taps + kh * g.kW + kw];
              }
        }
    }
  });
  d.Wp = Wp;
  // Input channels in ranges whose weights (Og kH kW floats each) fit in about half of L2.
  for_rows(g, g.H, d.Cg, d.Og * taps, d.stage_floats(), d.copy_floats(),
           [&](int64_t n, int64_t gi, int64_t c_begin, int64_t c_end, int64_t ih, float* stage, float* copies) {
             direct_input_row(d, n, gi, c_begin, c_end, ih, stage, copies);
           });
#else
  (void)gy, (void)w, (void)gx, (void)g;
  TRIDENT_CHECK(false, "conv2d: the direct kernel needs the AVX-512 micro-kernel (direct_backward_input_applies)");
#endif
}

bool set_conv_direct_enabled_for_testing(bool enabled) { return std::exchange(g_direct_enabled, enabled); }

int64_t set_conv_direct_range_floats_for_testing(int64_t floats) {
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
  return std::exchange(g_range_floats, floats > 0 ? floats : kRangeFloats);
#else
  (void)floats;
  return 0;
#endif
}

bool direct_forward_applies(const Conv2dGeometry& g) {
  return direct_geometry(g) && g.out_per_group() % 16 == 0 && !winograd_forward_applies(g) && !winograd7_forward_applies(g);
}

void direct_forward(const float* x, const float* w, const float* bias, float* y, const Conv2dGeometry& g) {
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
  Direct d{x, nullptr, bias, y, g, g.in_per_group(), g.out_per_group(), 0, 0, 0, 0, 0};
  const int64_t taps = g.kH * g.kW;
  d.K = d.Cg * taps;
  // Input channels per chunk: the kernel rows they read fit in about 24 KiB; equal chunks.
  const int64_t fit = std::clamp<int64_t>(6144 / std::max<int64_t>(1, g.kH * g.W), 1, d.Cg);
  const int64_t chunks = (d.Cg + fit - 1) / fit;
  d.cb = (d.Cg + chunks - 1) / chunks;
  d.blocks = (g.OW + kUW - 1) / kUW;
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
  // Output channels in ranges whose weights (Cg kH kW floats each) fit in about half of L2.
  for_rows(g, g.OH, d.Og, d.K, d.stage_floats(), 0,
           [&](int64_t n, int64_t gi, int64_t o_begin, int64_t o_end, int64_t oh, float* stage, float*) {
             direct_row(d, n, gi, o_begin, o_end, oh, stage);
           });
#else
  (void)x, (void)w, (void)bias, (void)y, (void)g;
  TRIDENT_CHECK(false, "conv2d: the direct kernel needs the AVX-512 micro-kernel (direct_forward_applies)");
#endif
}

}  // namespace trident::cpu
