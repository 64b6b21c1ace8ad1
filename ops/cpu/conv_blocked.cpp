// Blocked im2col convolution for f32 (NOTE [Conv2d algorithms] in ops/cpu/conv.cpp).
//
// NOTE [Conv2d blocked im2col]: every input plane is copied once into zero-padded planes
// split by stride phase, as for the depthwise kernels (NOTE [Depthwise planes]): then tap
// (kh, kw) of output j = oh Wq + ow (outputs numbered at the phase planes' pitch Wq) reads
// element j + off[tap] of the channel's phase buffer, a fixed offset. Threads take work
// items, a run of up to 4 blocks of nr consecutive outputs j of one image and group (fewer
// blocks, then also a range of the output channels, when that leaves fewer than 4 items per
// thread). K = C/g kH kW goes in equal slices of at most 256 rows (128 at nr = 48); per slice,
// each block of the item copies its im2col tile slice, the nr inputs each (channel, tap) row
// reads (nr / 8 vector copies per row, prefetching the next block's), and runs the register-blocked
// micro-kernel of ops/cpu/conv_simd.h over it for every block of 4 output channels, against
// the weights packed once per call as [group][block of 4][K][4]: the tile slice (24 KiB)
// stays in L1 while every output block uses it, and the weights' slice in L2 while every
// block of the item uses it; the blocks' sums accumulate in a small buffer. The results go to
// the output with the bias, skipping the Wq - OW columns per row that fall between output rows
// (computed and dropped: the price of a fixed offset per tap, (kW - 1) dw / Wq of the work;
// a 1 x k kernel runs on transposed planes instead, where it has none: see
// transpose_if_row_kernel, whose outputs are written in the problem's layout and transposed
// into y by 8 x 8 blocks afterwards). Unlike im2col of whole images followed by a BLAS GEMM,
// nothing of size K x OH OW is written to memory and read back, and there is no packing
// beyond the tile itself. Measured single-threaded (CPU time, min of 3) on 8x128x28x28 -> 128
// (2-core Zen 3) against the im2col + OpenBLAS path: 7x1 forward 19 ms instead of 24, 1x7
// forward 23.6 instead of 24 and forward + backward 60 instead of 73 (the weight gradient
// still im2col); the micro-kernel alone runs at 48 GMAC/s, in here at about 40. Items of
// several blocks, equal slices, the prefetches, the transposed outputs staged and the phase
// split writing each float once then took the 1x7 forward from 18.1-18.3 ms to 17.1 (min of 5
// alternating runs, single thread) and 3x3 stride 2 (8x64x56x56 -> 128) from 12.3-12.4 to
// 12.1-12.2, where the micro-kernel now runs at about 47 GMAC/s.
// Block width: nr = 24 outputs with the AVX2 micro-kernel, 48 with the AVX-512 one, which also
// takes the output blocks two at a time (NOTE [AVX-512 micro-kernel] in ops/cpu/conv_simd.h);
// the numbers "24" below are nr at its AVX2 value. Every function that touches a block is a
// template on NV = nr / 8 behind one cloned entry point that dispatches on the problem's nr.
// The input gradient of a stride-1 convolution with padding p is the same computation on gy
// with the kernel flipped and transposed and padding (k - 1) d - p. The weight gradient uses
// the same tiles, transposed, against gy (see "weight gradient" below).
#include "ops/cpu/conv_blocked.h"

#include <algorithm>
#include <mutex>
#include <utility>
#include <cstring>
#include <vector>

#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/conv_simd.h"
#include "ops/cpu/isa.h"

namespace trident::cpu {
namespace {

using namespace conv_simd;

// Outputs per block: 8 NV with NV = conv_simd::widest_nv(), 24 for the AVX2 micro-kernel and 48
// for the AVX-512 one (NOTE [AVX-512 micro-kernel]); the kernels below are templates on NV and
// a problem carries its block width nr = 8 NV.
constexpr int kMaxNR = 48;
// Tile rows per slice for blocks of NR outputs: 24 KiB (256 rows of 24, 128 of 48).
constexpr int64_t slice_rows(int64_t NR) { return 6144 / NR; }

// One convolution: input planes [N, Cin, H, W] into [N, Cout, OH, OW].
struct Problem {
  const float* x;
  float* y;
  const float* bias;  // [Cout] or null
  int64_t N, Cin, H, W, Cout, OH, OW, kH, kW, sh, sw, ph, pw, dh, dw, groups;
  // Kernel g[oo][ci] (output oo, input ci of group gi) at w + gi * group_stride + oo * s_out +
  // ci * s_in, taps row-major, reversed when flip.
  const float* w = nullptr;
  int64_t group_stride = 0, s_out = 0, s_in = 0;
  bool flip = false;
  // Computed on transposed planes (see transpose_if_row_kernel): x and y are read and written
  // with rows and columns swapped.
  bool transposed = false;
  int64_t nr = 24;  // outputs per block, 8 NV

  Problem(const float* x_, float* y_, const float* bias_, int64_t N_, int64_t Cin_, int64_t H_, int64_t W_, int64_t Cout_,
          int64_t OH_, int64_t OW_, int64_t kH_, int64_t kW_, int64_t sh_, int64_t sw_, int64_t ph_, int64_t pw_, int64_t dh_,
          int64_t dw_, int64_t groups_)
      : x(x_), y(y_), bias(bias_), N(N_), Cin(Cin_), H(H_), W(W_), Cout(Cout_), OH(OH_), OW(OW_), kH(kH_), kW(kW_), sh(sh_),
        sw(sw_), ph(ph_), pw(pw_), dh(dh_), dw(dw_), groups(groups_) {}

  // Derived: channels per group, 4-output blocks, taps, K = Cg taps; the phase planes (Hq x Wq
  // each, sh sw of them per channel, then kMaxNR zeros of slack: Lc floats per channel); the
  // outputs' flat extent at pitch Wq and its blocks; each tap's offset.
  int64_t Cg = 0, Og = 0, OB = 0, taps = 0, K = 0, Hq = 0, Wq = 0, plane = 0, Lc = 0, flat = 0, blocks = 0;
  std::vector<int64_t> off;

  void derive() {
    Cg = Cin / groups;
    Og = Cout / groups;
    OB = (Og + kMR - 1) / kMR;
    taps = kH * kW;
    K = Cg * taps;
    Hq = (H + 2 * ph + sh - 1) / sh;
    Wq = (W + 2 * pw + sw - 1) / sw;
    plane = Hq * Wq;
    Lc = sh * sw * plane + kMaxNR;
    flat = (OH - 1) * Wq + OW;
    blocks = (flat + nr - 1) / nr;
    off.resize(static_cast<size_t>(taps));
    for (int64_t kh = 0; kh < kH; ++kh)
      for (int64_t kw = 0; kw < kW; ++kw) {
        const int64_t a = (kh * dh) % sh, b = (kw * dw) % sw;
        off[static_cast<size_t>(kh * kW + kw)] = (a * sw + b) * plane + (kh * dh / sh) * Wq + kw * dw / sw;
      }
  }
};

// Wp[gi][ob][c taps + t][r] = kernel (ob kMR + r, c) tap t of group gi (zero past Og).
void pack_weights(const Problem& p, float* Wp) {
  parallel_for(0, p.groups * p.OB, std::max<int64_t>(1, 4096 / (p.K * kMR)), [&](int64_t i0, int64_t i1) {
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t gi = item / p.OB, ob = item % p.OB;
      float* dst = Wp + item * p.K * kMR;
      for (int r = 0; r < kMR; ++r) {
        const int64_t oo = ob * kMR + r;
        for (int64_t c = 0; c < p.Cg; ++c) {
          const float* src = p.w + gi * p.group_stride + oo * p.s_out + c * p.s_in;
          for (int64_t t = 0; t < p.taps; ++t)
            dst[(c * p.taps + t) * kMR + r] = oo < p.Og ? src[p.flip ? p.taps - 1 - t : t] : 0.0f;
        }
      }
    }
  });
}

// dst[k] = src[k sw] for k < n: sw = 1 a copy, sw = 2 deinterleaved 8 outputs at a time (two
// vector loads and one shuffle) where the loads stay inside the n (n - 1) sw + 1 elements read.
inline void gather_strided(const float* src, float* dst, int64_t n, int64_t sw) {
  if (sw == 1) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  int64_t k = 0;
  if (sw == 2) {
    const v8i even = {0, 2, 4, 6, 8, 10, 12, 14};
    for (; 2 * k + 16 <= 2 * n - 1; k += 8) store8(dst + k, __builtin_shuffle(load8(src + 2 * k), load8(src + 2 * k + 8), even));
    if (k < n && n > 8) {  // the last 8 outputs again, from one float earlier (the odd lanes)
      const v8i odd = {1, 3, 5, 7, 9, 11, 13, 15};
      k = n - 8;
      store8(dst + k, __builtin_shuffle(load8(src + 2 * k - 1), load8(src + 2 * k + 7), odd));
      return;
    }
  }
  for (; k < n; ++k) dst[k] = src[k * sw];
}

// Channel q's phase planes: phase (a, b) row i holds padded row i sh + a, columns j sw + b,
// zero where that falls in the padding; then kMaxNR zeros of slack. Every float of the Lc is
// written once (no memset first: the copy is a few percent of a strided convolution).
TRIDENT_CPU_CLONES void split_channel(const Problem& p, const float* src, float* dst) {
  if (p.transposed) {  // x's row h is the problem's column h; rows in sh phases (sw == 1)
    std::fill_n(dst, p.Lc, 0.0f);
    const auto row = [&](int64_t w) {  // the problem's row w (x's column w), from column pw
      const int64_t r = w + p.ph;
      return dst + (r % p.sh) * p.plane + (r / p.sh) * p.Wq + p.pw;
    };
    // 8 x 8 blocks through transpose_8x8, the edges one element at a time.
    const int64_t h8 = p.W - p.W % 8, w8 = p.H - p.H % 8;
    for (int64_t h0 = 0; h0 < h8; h0 += 8)
      for (int64_t w0 = 0; w0 < w8; w0 += 8) {
        v8f v[8], d[8];
        for (int e = 0; e < 8; ++e) v[e] = load8(src + (h0 + e) * p.H + w0);
        transpose_8x8(v, d);
        for (int e = 0; e < 8; ++e) store8(row(w0 + e) + h0, d[e]);
      }
    for (int64_t h = 0; h < p.W; ++h)
      for (int64_t w = h < h8 ? w8 : 0; w < p.H; ++w) row(w)[h] = src[h * p.H + w];
    return;
  }
  // Rows of the phases that fall in the padding are zeros; every other row is input row h =
  // i sh + a - ph, whose sw column phases are written while the row is in L1. The input is
  // read once, in order (the hardware prefetchers follow one stream, not sh of them).
  for (int64_t a = 0; a < p.sh; ++a)
    for (int64_t i = 0; i < p.Hq; ++i) {
      const int64_t h = i * p.sh + a - p.ph;
      if (h < 0 || h >= p.H)
        for (int64_t b = 0; b < p.sw; ++b) std::fill_n(dst + (a * p.sw + b) * p.plane + i * p.Wq, p.Wq, 0.0f);
    }
  for (int64_t h = 0; h < p.H; ++h) {
    const int64_t r = h + p.ph, a = r % p.sh, i = r / p.sh;
    const float* in = src + h * p.W;
    for (int64_t b = 0; b < p.sw; ++b) {
      float* row = dst + (a * p.sw + b) * p.plane + i * p.Wq;
      // Columns j of the phase with input column j sw + b - pw inside [0, W): [j_lo, j_hi).
      const int64_t j_lo = std::min(p.Wq, std::max<int64_t>(0, (p.pw - b + p.sw - 1) / p.sw));
      const int64_t j_hi = std::max(j_lo, std::min(p.Wq, (p.W + p.pw - b + p.sw - 1) / p.sw));
      std::fill_n(row, j_lo, 0.0f);
      gather_strided(in + j_lo * p.sw + b - p.pw, row + j_lo, j_hi - j_lo, p.sw);
      std::fill_n(row + j_hi, p.Wq - j_hi, 0.0f);
    }
  }
  std::fill_n(dst + p.sh * p.sw * p.plane, kMaxNR, 0.0f);
}

// The phase planes of images [n0, n0 + nb), one channel after another (split_channel).
void split_phases(const Problem& p, int64_t n0, int64_t nb, float* buf) {
  parallel_for(0, nb * p.Cin, std::max<int64_t>(1, 16384 / (p.H * p.W)), [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) split_channel(p, p.x + (n0 * p.Cin + q) * p.H * p.W, buf + q * p.Lc);
  });
}

// Blocks of nr outputs per forward work item (fewer when that leaves too few items to share
// out, see run()): the item takes its blocks' tiles one K slice at a time, and each slice of
// the packed weights (slice_rows(nr) rows x all output blocks, 128 KiB for 128 outputs at nr 24) serves all of them
// from L2 instead of being fetched again for every block.
constexpr int64_t kFwdBlocks = 4;

struct Chunk {
  const Problem* p;
  const float* Wp;
  const float* phases;  // [nb, Cin, Lc]
  // Where image n0 + i, channel oc starts: y + (i Cout + oc) OH OW. The output itself, or when
  // the problem is transposed the problem-layout planes that run() transposes into it.
  float* y;
  int64_t n0, nb;
  int64_t per_item;  // blocks per item
  int64_t runs;      // items per (image, group): ceil(blocks / per_item)
  int64_t orr;       // output-channel ranges per item
  int64_t items() const { return nb * p->groups * runs * orr; }
};

// The lanes of the block of nr starting at j0 (lanes numbered at pitch Wq, flat of them, OW
// of each row real), in runs of one row: lanes [lane, lane + len) are row `row`, columns col,
// col + 1, ... The blocked path's rows are output rows; F(2, 7)'s are pairs of them.
struct Runs {
  int64_t lane[kMaxNR], len[kMaxNR], row[kMaxNR], col[kMaxNR];
  int count = 0;
  void find(int64_t flat, int64_t Wq, int64_t OW, int64_t j0, int64_t nr) {
    count = 0;
    for (int64_t l = 0; l < nr && j0 + l < flat;) {
      const int64_t j = j0 + l, r = j / Wq, c = j % Wq;
      if (c >= OW) {
        l += Wq - c;
        continue;
      }
      const int64_t n = std::min(OW - c, std::min<int64_t>(nr - l, flat - j));
      lane[count] = l;
      len[count] = n;
      row[count] = r;
      col[count] = c;
      ++count;
      l += n;
    }
  }
  // Where run k starts in an output plane of the problem: its own layout (plane_layout), or
  // the output's (transposed: the run goes down a column, OH' apart).
  int64_t out(const Problem& p, int k, bool plane_layout) const {
    return p.transposed && !plane_layout ? col[k] * p.OH + row[k] : row[k] * p.OW + col[k];
  }
};

// Items [i0, i1) of a chunk; tile is slice_rows(nr) x nr floats, out per_item x OB x kMR x nr (nr = 8 NV).
template <int NV>
inline void blocked_items_nv(const Chunk& ch, float* tile, float* out, int64_t i0, int64_t i1) {
  constexpr int NR = 8 * NV;
  constexpr int64_t KC = slice_rows(NR);
  const Problem& p = *ch.p;
  const int64_t* off = p.off.data();
  const int64_t out_plane = p.OH * p.OW;
  for (int64_t item = i0; item < i1; ++item) {
    const int64_t orr = item % ch.orr, unit = item / ch.orr;  // unit = (image, group, run of blocks)
    const int64_t run = unit % ch.runs, gi = (unit / ch.runs) % p.groups, i = unit / (ch.runs * p.groups);
    const int64_t b0 = run * ch.per_item, nblk = std::min(ch.per_item, p.blocks - b0);
    const int64_t ob0 = p.OB * orr / ch.orr, ob1 = p.OB * (orr + 1) / ch.orr, nob = ob1 - ob0;
    const float* base = ch.phases + (i * p.Cin + gi * p.Cg) * p.Lc + b0 * NR;
    // K in slices of KC tile rows: a block's slice stays in L1 while every output block uses
    // it, the weights' slice in L2 while every block of the item uses it.
    // Slices of equal size (576 rows: 3 x 192, not 256, 256, 64), so none is a short one
    // that pays the accumulators' loads and stores for few rows.
    const int64_t slices = (p.K + KC - 1) / KC, kc = (p.K + slices - 1) / slices;
    for (int64_t k0 = 0; k0 < p.K; k0 += kc) {
      const int64_t kn = std::min(kc, p.K - k0);
      for (int64_t bk = 0; bk < nblk; ++bk) {
        int64_t c = k0 / p.taps, t = k0 % p.taps;
        const float* src = base + c * p.Lc + bk * NR;
        float* dst = tile;
        for (int64_t k = 0; k < kn; ++k, dst += NR) {
          const float* row = src + off[t];
          for (int v = 0; v < NV; ++v) store8(dst + 8 * v, load8(row + 8 * v));
          // The next block reads the next NR floats of every row, from up to 256 different
          // phase planes at once: more streams than the hardware prefetchers follow.
          __builtin_prefetch(row + NR);
          __builtin_prefetch(row + 2 * NR - 1);
          if (++t == p.taps) {
            t = 0;
            src += p.Lc;
          }
        }
        const auto up = [&](int64_t ob) { return ch.Wp + ((gi * p.OB + ob) * p.K + k0) * kMR; };
        const auto mp = [&](int64_t ob) { return out + (bk * nob + ob - ob0) * kMR * NR; };
        if (k0 == 0) {
          gemm_rows<NV, false>(ob0, ob1, tile, kn, up, mp);
        } else {
          gemm_rows<NV, true>(ob0, ob1, tile, kn, up, mp);
        }
      }
    }
    for (int64_t bk = 0; bk < nblk; ++bk) {
      Runs rn;
      rn.find(p.flat, p.Wq, p.OW, (b0 + bk) * NR, NR);
      for (int64_t ob = ob0; ob < ob1; ++ob) {
        const float* ob_out = out + (bk * nob + ob - ob0) * kMR * NR;
        for (int r = 0; r < kMR; ++r) {
          const int64_t o = ob * kMR + r;
          if (o >= p.Og) break;
          const int64_t oc = gi * p.Og + o;
          const float b = p.bias ? p.bias[oc] : 0.0f;
          float* yo = ch.y + (i * p.Cout + oc) * out_plane;
          for (int k = 0; k < rn.count; ++k) {
            const float* s = ob_out + r * NR + rn.lane[k];
            float* d = yo + rn.out(p, k, /*plane_layout=*/true);
            for (int64_t e = 0; e < rn.len[k]; ++e) d[e] = s[e] + b;
          }
        }
      }
    }
  }
}

TRIDENT_CPU_CLONES void blocked_items(const Chunk& ch, float* tile, float* out, int64_t i0, int64_t i1) {
  if (ch.p->nr == 48) return blocked_items_nv<6>(ch, tile, out, i0, i1);
  blocked_items_nv<3>(ch, tile, out, i0, i1);
}

// dst[c][r] = src[r][c] for planes [rows, cols] -> [cols, rows]: 8 x 8 blocks through
// transpose_8x8, the edges one element at a time.
TRIDENT_CPU_CLONES void transpose_planes(const float* src, float* dst, int64_t planes, int64_t rows, int64_t cols) {
  const int64_t size = rows * cols, r8 = rows - rows % 8, c8 = cols - cols % 8;
  for (int64_t q = 0; q < planes; ++q, src += size, dst += size) {
    for (int64_t r0 = 0; r0 < r8; r0 += 8)
      for (int64_t c0 = 0; c0 < c8; c0 += 8) {
        v8f v[8], d[8];
        for (int e = 0; e < 8; ++e) v[e] = load8(src + (r0 + e) * cols + c0);
        transpose_8x8(v, d);
        for (int e = 0; e < 8; ++e) store8(dst + (c0 + e) * rows + r0, d[e]);
      }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = r < r8 ? c8 : 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  }
}

// transpose_planes on the threads, whole planes each.
void transpose_planes_parallel(const float* src, float* dst, int64_t planes, int64_t rows, int64_t cols) {
  const int64_t size = rows * cols;
  parallel_for(0, planes, std::max<int64_t>(1, 16384 / size), [&](int64_t q0, int64_t q1) {
    transpose_planes(src + q0 * size, dst + q0 * size, q1 - q0, rows, cols);
  });
}

// A 1 x k stride-1 kernel reads k - 1 (dilated) columns of padding per row, all computed and
// dropped at pitch Wq (18% of a 1x7 on 28 columns); on the transposed planes it is a k x 1
// kernel whose rows have no padding, so nothing is dropped. The copy in and the writes out
// then go through the planes with a stride (scalar), a small price next to the kernel's.
void transpose_if_row_kernel(Problem& p) {
  if (p.kH != 1 || p.kW == 1 || p.sh != 1 || p.sw != 1 || p.ph != 0) return;
  std::swap(p.H, p.W);
  std::swap(p.OH, p.OW);
  std::swap(p.kH, p.kW);  // taps stay numbered kw: kh kW + kw with kh = 0 is kw' kW' + 0
  std::swap(p.ph, p.pw);
  std::swap(p.dh, p.dw);
  p.transposed = true;
}

// The chunks of images of a forward-type pass (those whose copies fit conv_copy_budget_bytes()):
// for each, the input's phase planes with the geometry of `split` (p's own, or F(2, 7)'s two
// row phases), then items(n0, nb, phases, y) with y where image n0's outputs go, then, for a
// transposed problem, its staged outputs transposed into p.y: writing y directly would be one
// scattered scalar store per output (8% of a 1x7 forward pass, measured).
template <typename Items>
void forward_chunks(const Problem& p, const Problem& split, Items items) {
  const int64_t chunk =
      std::clamp<int64_t>(conv_copy_budget_bytes() / static_cast<int64_t>(sizeof(float) * p.Cin * split.Lc), 1, p.N);
  Tensor phases = empty({std::min(chunk, p.N) * p.Cin * split.Lc});
  const int64_t out_plane = p.OH * p.OW;
  Tensor staged = p.transposed ? empty({std::min(chunk, p.N) * p.Cout * out_plane}) : Tensor();
  for (int64_t n0 = 0; n0 < p.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, p.N - n0);
    split_phases(split, n0, nb, phases.data<float>());
    float* y = p.transposed ? staged.data<float>() : p.y + n0 * p.Cout * out_plane;
    items(n0, nb, phases.data<float>(), y);
    if (p.transposed) transpose_planes_parallel(y, p.y + n0 * p.Cout * out_plane, nb * p.Cout, p.OH, p.OW);
  }
}

// ---- Winograd F(2, 7) for 7 x 1 kernels -------------------------------------------------
// NOTE [Conv2d Winograd F(2,7)]: AmoebaNet's 1x7 and 7x1 convolutions (stride 1, dilation 1;
// a 1x7 runs as a 7x1 on transposed planes, transpose_if_row_kernel) compute each pair of
// vertically adjacent outputs from the 8 inputs above them with the minimal filtering
// algorithm F(2, 7) (Winograd; Lavin and Gray's notation):
//     y = A^T [ sum_c (G g_c) (.) (B^T d_c) ]      (g_c the 7 taps of input channel c)
// over the points 0, 1, -1, 2, -2, 1/2, -1/2 and infinity. Derived here from those points:
// with V the 8 x 8 matrix evaluating a degree-7 polynomial at them (the point at infinity
// picking the leading coefficient), E_g (8 x 7) and E_h (8 x 2) the same evaluation of the
// kernel and of the output pair, the linear convolution of g and h is V^-1 [(E_g g) (.) (E_h
// h)]; its transpose is the correlation, so A^T = E_h^T, G = E_g and B^T = (V^-1)^T, each row
// of B^T then scaled to small integers and the matching row of G divided by the same factor:
//     B^T = [4  0 -21   0  21   0 -4 0]   G = [  1/4     0     0     0     0     0     0]
//           [0 -4  -4  17  17  -4 -4 0]       [ 1/18  1/18  1/18  1/18  1/18  1/18  1/18]
//           [0  4  -4 -17  17   4 -4 0]       [ 1/18 -1/18  1/18 -1/18  1/18 -1/18  1/18]
//           [0  2   1 -10  -5   8  4 0]       [1/360 1/180  1/90  1/45  2/45  4/45  8/45]
//           [0 -2   1  10  -5  -8  4 0]       [1/360 -1/180 1/90 -1/45  2/45 -4/45  8/45]
//           [0  4   8  -5 -10   1  2 0]       [16/45  8/45  4/45  2/45  1/45  1/90 1/180]
//           [0 -4   8   5 -10  -1  2 0]       [16/45 -8/45  4/45 -2/45  1/45 -1/90 1/180]
//           [0 -4   0  21   0 -21  0 4]       [    0     0     0     0     0     0   1/4]
//     A^T = [1 1  1 1  1   1    1 0]
//           [0 1 -1 2 -2 1/2 -1/2 1]
// The 8 frequencies are independent sums over the channels: per block of 24 output pairs,
// M[xi] (O x 24) = U[xi] (O x C) V[xi] (C x 24), 8 x 24 multiply-adds per channel and output
// channel where the direct sum takes 7 x 48: 1.75x fewer. The blocks are those of the blocked
// path (NOTE [Conv2d blocked im2col]) with the output rows taken two at a time: the padded
// planes are split into two row phases (even and odd rows), so input e of the pair at (tile
// row th, column ow), padded row 2 th + e, is element th Wq + ow + off[e] of the channel's
// phases, a fixed offset again. Per block and channel the 8 inputs of 24 pairs are loaded as
// 3 vectors each and B^T applied across them (no transposes: the lanes are the pairs); the
// micro-kernel of ops/cpu/conv_simd.h computes M one frequency at a time against U = G g
// (computed in f64 once per call, packed [group][xi][block of 4 outputs][C][4]); A^T, the bias
// and the writes finish the block.
// Accuracy: as for F(4x4, 3x3) (NOTE [Conv2d Winograd] in ops/cpu/conv_winograd.cpp) an output
// is off by about (C + 24) u times |A^T| [ sum_c (|G| |g_c|) (.) (|B^T| |d_c|) ], the transforms'
// growth (rows of |B^T| sum to at most 50) in one dimension where F(4x4, 3x3) has it in two
// (10 x 10); tests/ops/conv_test.cpp checks that bound on every output and input gradient.
// Measured (7x1, 2 x C x 28 x 28 -> 64, unit-variance inputs, weights scaled to unit-variance
// outputs, against f64): rms error 4.8e-7 / 7.8e-7 / 1.0e-6 / 1.5e-6 for C = 16 / 64 / 128 /
// 256, 2.0 to 2.6 times the direct blocked kernel's, max 1.1e-5 or less (1.2 to 2.6 times).
// Speed (8x128x28x28 -> 128, single thread, min of 3 alternating runs): 7x1 forward 11.7 ms
// instead of 18.0 on the blocked kernel, 1x7 12.5 instead of 18.9 (its planes transposed on
// the way in and out), 1x7 forward + backward 42.4 instead of 58.2 with the weight gradient
// below (46.6 with the blocked one).

constexpr int kW7Xi = 8;

// t[0..7] = B^T d for the 8-vector d.
inline void bt7_times(const v8f* d, v8f* t) {
  t[0] = (d[0] - d[6]) * 4.0f + (d[4] - d[2]) * 21.0f;
  t[7] = (d[7] - d[1]) * 4.0f + (d[3] - d[5]) * 21.0f;
  const v8f a = d[4] * 17.0f - (d[2] + d[6]) * 4.0f, b = d[3] * 17.0f - (d[1] + d[5]) * 4.0f;
  t[1] = a + b;
  t[2] = a - b;
  const v8f c = d[2] - d[4] * 5.0f + d[6] * 4.0f, e = d[1] * 2.0f - d[3] * 10.0f + d[5] * 8.0f;
  t[3] = c + e;
  t[4] = c - e;
  const v8f f = d[2] * 8.0f - d[4] * 10.0f + d[6] * 2.0f, h = d[1] * 4.0f - d[3] * 5.0f + d[5];
  t[5] = f + h;
  t[6] = f - h;
}

// The rows of G, in f64 (the weight transform runs once per call).
constexpr double kG7[kW7Xi][7] = {
    {1.0 / 4, 0, 0, 0, 0, 0, 0},
    {1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18, 1.0 / 18},
    {1.0 / 18, -1.0 / 18, 1.0 / 18, -1.0 / 18, 1.0 / 18, -1.0 / 18, 1.0 / 18},
    {1.0 / 360, 1.0 / 180, 1.0 / 90, 1.0 / 45, 2.0 / 45, 4.0 / 45, 8.0 / 45},
    {1.0 / 360, -1.0 / 180, 1.0 / 90, -1.0 / 45, 2.0 / 45, -4.0 / 45, 8.0 / 45},
    {16.0 / 45, 8.0 / 45, 4.0 / 45, 2.0 / 45, 1.0 / 45, 1.0 / 90, 1.0 / 180},
    {16.0 / 45, -8.0 / 45, 4.0 / 45, -2.0 / 45, 1.0 / 45, -1.0 / 90, 1.0 / 180},
    {0, 0, 0, 0, 0, 0, 1.0 / 4},
};

bool g_winograd7_enabled = true;
int g_blocked_preference = -1;  // NOTE [Blocked or GEMM]

bool winograd7_applies(const Problem& p) {
  return g_winograd7_enabled && p.kH == 7 && p.kW == 1 && p.sh == 1 && p.sw == 1 && p.dh == 1 && p.dw == 1 &&
         p.Cin / p.groups >= 8 && p.Cout / p.groups >= 8 && p.OH >= 2;
}

// U[gi][xi][ob][c][r] = (G g)[xi] for output ob kMR + r, input c of group gi (zero past Og).
void winograd7_weights(const Problem& p, float* U) {
  parallel_for(0, p.groups * p.OB, std::max<int64_t>(1, 4096 / (p.Cg * kMR * 7)), [&](int64_t i0, int64_t i1) {
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t gi = item / p.OB, ob = item % p.OB;
      for (int r = 0; r < kMR; ++r) {
        const int64_t oo = ob * kMR + r;
        for (int64_t c = 0; c < p.Cg; ++c) {
          double g[7] = {};
          if (oo < p.Og) {
            const float* src = p.w + gi * p.group_stride + oo * p.s_out + c * p.s_in;
            for (int t = 0; t < 7; ++t) g[t] = src[p.flip ? 6 - t : t];
          }
          for (int xi = 0; xi < kW7Xi; ++xi) {
            double u = 0.0;
            for (int t = 0; t < 7; ++t) u += kG7[xi][t] * g[t];
            U[(((gi * kW7Xi + xi) * p.OB + ob) * p.Cg + c) * kMR + r] = static_cast<float>(u);
          }
        }
      }
    }
  });
}

// The tile geometry: q is the problem with its padded planes split into two row phases of TH +
// 3 rows each (TH = ceil(OH / 2) pairs of output rows); lanes j = th Wq + ow.
struct Wino7 {
  Problem q;
  int64_t TH = 0, flat = 0, blocks = 0;
  int64_t off[8] = {};
  explicit Wino7(const Problem& p) : q(p) {
    TH = (p.OH + 1) / 2;
    q.sh = 2;
    q.Hq = TH + 3;
    q.Wq = p.W + 2 * p.pw;  // = OW: a 7 x 1 kernel drops no columns
    q.plane = q.Hq * q.Wq;
    q.Lc = 2 * q.plane + kMaxNR;
    flat = (TH - 1) * q.Wq + p.OW;
    blocks = (flat + p.nr - 1) / p.nr;
    for (int e = 0; e < 8; ++e) off[e] = (e % 2) * q.plane + (e / 2) * q.Wq;
  }
};

struct W7Chunk {
  const Problem* p;
  const Wino7* w7;
  const float* U;
  const float* phases;  // [nb, Cin, q.Lc]
  float* y;             // as Chunk::y
  int64_t nb, orr;
  int64_t items() const { return nb * p->groups * w7->blocks * orr; }
};

// Items [i0, i1): V is kW7Xi x slice_rows(nr) x nr floats, M kW7Xi x OB x kMR x nr (nr = 8 NV).
template <int NV>
inline void winograd7_items_nv(const W7Chunk& ch, float* V, float* M, int64_t i0, int64_t i1) {
  constexpr int NR = 8 * NV;
  constexpr int64_t KC = slice_rows(NR);
  const Problem& p = *ch.p;
  const Wino7& w7 = *ch.w7;
  const Problem& q = w7.q;
  const int64_t out_plane = p.OH * p.OW, v_stride = KC * NR;
  for (int64_t item = i0; item < i1; ++item) {
    const int64_t orr = item % ch.orr, unit = item / ch.orr;
    const int64_t jb = unit % w7.blocks, gi = (unit / w7.blocks) % p.groups, i = unit / (w7.blocks * p.groups);
    const int64_t j0 = jb * NR;
    const int64_t ob0 = p.OB * orr / ch.orr, ob1 = p.OB * (orr + 1) / ch.orr, nob = ob1 - ob0;
    const int64_t m_stride = nob * kMR * NR;
    const float* base = ch.phases + (i * p.Cin + gi * p.Cg) * q.Lc + j0;
    const int64_t slices = (p.Cg + KC - 1) / KC, kc = (p.Cg + slices - 1) / slices;
    for (int64_t c0 = 0; c0 < p.Cg; c0 += kc) {
      const int64_t cn = std::min(kc, p.Cg - c0);
      for (int64_t c = 0; c < cn; ++c) {
        const float* src = base + (c0 + c) * q.Lc;
        for (int v = 0; v < NV; ++v) {
          v8f d[8], t[8];
          for (int e = 0; e < 8; ++e) d[e] = load8(src + w7.off[e] + 8 * v);
          bt7_times(d, t);
          for (int xi = 0; xi < kW7Xi; ++xi) store8(V + xi * v_stride + c * NR + 8 * v, t[xi]);
        }
      }
      for (int xi = 0; xi < kW7Xi; ++xi) {
        const auto up = [&](int64_t ob) { return ch.U + (((gi * kW7Xi + xi) * p.OB + ob) * p.Cg + c0) * kMR; };
        const auto mp = [&](int64_t ob) { return M + xi * m_stride + (ob - ob0) * kMR * NR; };
        if (c0 == 0) {
          gemm_rows<NV, false>(ob0, ob1, V + xi * v_stride, cn, up, mp);
        } else {
          gemm_rows<NV, true>(ob0, ob1, V + xi * v_stride, cn, up, mp);
        }
      }
    }
    Runs rn;  // rows: pairs of output rows
    rn.find(w7.flat, q.Wq, p.OW, j0, NR);
    for (int64_t ob = ob0; ob < ob1; ++ob)
      for (int r = 0; r < kMR; ++r) {
        const int64_t o = ob * kMR + r;
        if (o >= p.Og) break;
        const int64_t oc = gi * p.Og + o;
        const v8f b = splat(p.bias ? p.bias[oc] : 0.0f);
        alignas(32) float y0[NR], y1[NR];
        for (int v = 0; v < NV; ++v) {
          v8f m[8];
          for (int xi = 0; xi < kW7Xi; ++xi) m[xi] = load8(M + xi * m_stride + ((ob - ob0) * kMR + r) * NR + 8 * v);
          store8(y0 + 8 * v, m[0] + m[1] + m[2] + m[3] + m[4] + m[5] + m[6] + b);
          store8(y1 + 8 * v, (m[1] - m[2]) + (m[3] - m[4]) * 2.0f + (m[5] - m[6]) * 0.5f + m[7] + b);
        }
        float* yo = ch.y + (i * p.Cout + oc) * out_plane;
        for (int k = 0; k < rn.count; ++k) {
          const int64_t oh = 2 * rn.row[k];
          float* d0 = yo + oh * p.OW + rn.col[k];
          for (int64_t e = 0; e < rn.len[k]; ++e) d0[e] = y0[rn.lane[k] + e];
          if (oh + 1 < p.OH) {
            float* d1 = d0 + p.OW;
            for (int64_t e = 0; e < rn.len[k]; ++e) d1[e] = y1[rn.lane[k] + e];
          }
        }
      }
  }
}

TRIDENT_CPU_CLONES void winograd7_items(const W7Chunk& ch, float* V, float* M, int64_t i0, int64_t i1) {
  if (ch.p->nr == 48) return winograd7_items_nv<6>(ch, V, M, i0, i1);
  winograd7_items_nv<3>(ch, V, M, i0, i1);
}

void run_winograd7(const Problem& p) {
  const Wino7 w7(p);
  const int threads = get_num_threads();
  Tensor u = empty({p.groups * kW7Xi * p.OB * p.Cg * kMR});
  winograd7_weights(p, u.data<float>());
  forward_chunks(p, w7.q, [&](int64_t, int64_t nb, const float* phases, float* y) {
    W7Chunk ch{&p, &w7, u.data<float>(), phases, y, nb, 1};
    while (ch.items() < 4 * threads && ch.orr * 2 <= p.OB) ch.orr *= 2;
    parallel_for(0, ch.items(), 1, [&](int64_t i0, int64_t i1) {
      const int64_t v = kW7Xi * slice_rows(p.nr) * p.nr;
      Tensor ws = empty({v + kW7Xi * p.OB * kMR * p.nr});
      winograd7_items(ch, ws.data<float>(), ws.data<float>() + v, i0, i1);
    });
  });
}

void run(Problem& p) {
  transpose_if_row_kernel(p);
  p.nr = 8 * widest_nv();
  p.derive();
  if (winograd7_applies(p)) {
    run_winograd7(p);
    return;
  }
  const int threads = get_num_threads();
  Tensor wp = empty({p.groups * p.OB * p.K * kMR});
  pack_weights(p, wp.data<float>());
  forward_chunks(p, p, [&](int64_t n0, int64_t nb, const float* phases, float* y) {
    Chunk ch{&p, wp.data<float>(), phases, y, n0, nb, kFwdBlocks, 0, 1};
    // Too few items to keep every thread busy for long: fewer blocks per item, then the
    // output channels split as well.
    const auto runs_for = [&](int64_t per_item) { return (p.blocks + per_item - 1) / per_item; };
    while (ch.per_item > 1 && nb * p.groups * runs_for(ch.per_item) < 4 * threads) ch.per_item /= 2;
    ch.runs = runs_for(ch.per_item);
    while (ch.items() < 4 * threads && ch.orr * 2 <= p.OB) ch.orr *= 2;
    parallel_for(0, ch.items(), 1, [&](int64_t i0, int64_t i1) {
      const int64_t tile = slice_rows(p.nr) * p.nr;
      Tensor ws = empty({tile + ch.per_item * p.OB * kMR * p.nr});
      blocked_items(ch, ws.data<float>(), ws.data<float>() + tile, i0, i1);
    });
  });
}

// ---- weight gradient ----------------------------------------------------------------------
// dW[o][k] = sum over outputs j of gy[o][j] tile[k][j]. An item is a run of up to kWgradBlocks
// blocks of 24 outputs of one image and group (L = 24 x its blocks lanes): it gathers its gy
// columns as [output block][L][4] (zero for lanes that are no output) and its tile transposed,
// [k / 24][L][k % 24], and the micro-kernel adds a 4 x 24 block of dW per (24 tile rows, output
// block) with the L lanes as the reduction: each dW block is loaded and stored once per L lanes,
// not per 24, and each 24-row slice of the tile (L x 24 floats) stays in L1 while every output
// block passes over it. Each thread sums its range of items into its own dW, [group][output
// block][k / 24][4][24]; the ranges' sums are added in item order (the same result on every run
// with the same thread count). Measured on 8x128x28x28 -> 128, 1x7 (2-core Zen 3, best of 3,
// alternating with the previous one-block items): 10.1 ms instead of 11.8 on 2 threads, CPU time
// 21.3-22.7 ms instead of 23.9-24.9 on one; 8 blocks per item measured no better than 4.
constexpr int64_t kWgradBlocks = 4;

struct WgradChunk {
  const Problem* p;
  const float* phases;  // [nb, Cin, Lc]
  const float* gy;      // [N, Cout, OH, OW] (the output's layout, transposed or not)
  int64_t n0, KB;       // images; blocks of 24 tile rows
  int64_t runs;         // items per (image, group): ceil(blocks / kWgradBlocks)
};

template <int NV>
inline void blocked_wgrad_items_nv(const WgradChunk& ch, float* tileT, float* gyP, float* dW, int64_t i0, int64_t i1) {
  constexpr int NR = 8 * NV;
  const Problem& p = *ch.p;
  const int64_t* off = p.off.data();
  const int64_t out_plane = p.OH * p.OW, step = p.transposed ? p.OH : 1;
  constexpr int64_t kLanes = kWgradBlocks * NR;  // buffer pitch: the longest item
  for (int64_t item = i0; item < i1; ++item) {
    const int64_t run = item % ch.runs, gi = (item / ch.runs) % p.groups, i = item / (ch.runs * p.groups);
    const int64_t b0 = run * kWgradBlocks, nblk = std::min(kWgradBlocks, p.blocks - b0), L = nblk * NR;
    const int64_t j0 = b0 * NR;
    // gy: gyP[ob][lane][r] = gy[ob 4 + r][output at lane], lanes of the item's blocks in order.
    std::fill_n(gyP, p.OB * kLanes * kMR, 0.0f);
    const float* gimg = ch.gy + ((ch.n0 + i) * p.Cout + gi * p.Og) * out_plane;
    for (int64_t bk = 0; bk < nblk; ++bk) {
      Runs rn;
      rn.find(p.flat, p.Wq, p.OW, j0 + bk * NR, NR);
      // Whole groups of 4 output channels, 8 outputs at a time: 4 vector loads and a 4 x 8
      // transpose (the scattered scalar stores took 7% of a 3x3 stride-2 weight gradient).
      const int64_t o4 = step == 1 ? p.Og / kMR * kMR : 0;
      for (int64_t o = 0; o < o4; o += kMR) {
        float* dst = gyP + (o / kMR) * kLanes * kMR + bk * NR * kMR;
        const float* src = gimg + o * out_plane;
        for (int k = 0; k < rn.count; ++k) {
          const float* s = src + rn.out(p, k, false);
          float* d = dst + rn.lane[k] * kMR;
          int64_t e = 0;
          for (; e + 8 <= rn.len[k]; e += 8) {
            const v8f v[4] = {load8(s + e), load8(s + out_plane + e), load8(s + 2 * out_plane + e), load8(s + 3 * out_plane + e)};
            v8f t[4];
            columns_of_4x8(v, t);
            for (int q = 0; q < 4; ++q) store8(d + e * kMR + 8 * q, t[q]);
          }
          for (; e < rn.len[k]; ++e)
            for (int r = 0; r < kMR; ++r) d[e * kMR + r] = s[r * out_plane + e];
        }
      }
      for (int64_t o = o4; o < p.Og; ++o) {
        float* dst = gyP + (o / kMR) * kLanes * kMR + bk * NR * kMR + o % kMR;
        const float* src = gimg + o * out_plane;
        for (int k = 0; k < rn.count; ++k)
          for (int64_t e = 0; e < rn.len[k]; ++e) dst[(rn.lane[k] + e) * kMR] = src[rn.out(p, k, false) + e * step];
      }
    }
    // The tile transposed, 8 rows at a time through 8x8 transposes (the rows of a tile block
    // of NR start at multiples of 8), the last K % 8 rows one by one.
    const float* base = ch.phases + (i * p.Cin + gi * p.Cg) * p.Lc + j0;
    const float* rows[8];
    int64_t k = 0;
    for (int64_t c = 0; c < p.Cg; ++c, base += p.Lc)
      for (int64_t t = 0; t < p.taps; ++t, ++k) {
        rows[k % 8] = base + off[t];
        if (k % 8 != 7) continue;
        float* dst = tileT + (k / NR) * kLanes * NR + (k - 7) % NR;
        for (int64_t l0 = 0; l0 < L; l0 += 8) {
          v8f v[8], d[8];
          for (int q = 0; q < 8; ++q) v[q] = load8(rows[q] + l0);
          transpose_8x8(v, d);
          for (int l = 0; l < 8; ++l) store8(dst + (l0 + l) * NR, d[l]);
        }
      }
    for (int64_t kt = k - k % 8; kt < k; ++kt) {
      float* dst = tileT + (kt / NR) * kLanes * NR + kt % NR;
      for (int64_t l = 0; l < L; ++l) dst[l * NR] = rows[kt % 8][l];
    }
    for (int64_t kb = 0; kb < ch.KB; ++kb)
      gemm_rows<NV, true>(
          0, p.OB, tileT + kb * kLanes * NR, L, [&](int64_t ob) { return gyP + ob * kLanes * kMR; },
          [&](int64_t ob) { return dW + ((gi * p.OB + ob) * ch.KB + kb) * kMR * NR; });
  }
}

TRIDENT_CPU_CLONES void blocked_wgrad_items(const WgradChunk& ch, float* tileT, float* gyP, float* dW, int64_t i0, int64_t i1) {
  if (ch.p->nr == 48) return blocked_wgrad_items_nv<6>(ch, tileT, gyP, dW, i0, i1);
  blocked_wgrad_items_nv<3>(ch, tileT, gyP, dW, i0, i1);
}

// The chunks of images of a weight gradient: per chunk the input's phase planes (geometry
// `split`), then its nb x units_per_image work items on the threads, each thread's range run as
// items(ws, n0, phases, i0, i1) on its own zeroed workspace of ws_floats floats whose last
// sum_floats are its partial sum; the partial sums are added into tot in the order of their
// first item, so the result does not depend on thread timing.
template <typename Items>
void wgrad_chunks(const Problem& p, const Problem& split, int64_t units_per_image, int64_t ws_floats, int64_t sum_floats,
                  float* tot, Items items) {
  const int64_t chunk =
      std::clamp<int64_t>(conv_copy_budget_bytes() / static_cast<int64_t>(sizeof(float) * p.Cin * split.Lc), 1, p.N);
  Tensor phases = empty({std::min(chunk, p.N) * p.Cin * split.Lc});
  for (int64_t n0 = 0; n0 < p.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, p.N - n0);
    split_phases(split, n0, nb, phases.data<float>());
    std::mutex mu;
    std::vector<std::pair<int64_t, Tensor>> partials;
    parallel_for(0, nb * units_per_image, 1, [&](int64_t i0, int64_t i1) {
      Tensor ws = zeros({ws_floats}, kF32);
      items(ws.data<float>(), n0, phases.data<float>(), i0, i1);
      std::lock_guard<std::mutex> lock(mu);
      partials.emplace_back(i0, ws);
    });
    std::sort(partials.begin(), partials.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [first, ws] : partials) {
      const float* part = ws.template data<float>() + ws_floats - sum_floats;
      for (int64_t e = 0; e < sum_floats; ++e) tot[e] += part[e];
    }
  }
}

// ---- the F(2, 7) weight gradient ---------------------------------------------------------
// The adjoint of NOTE [Conv2d Winograd F(2,7)]: dU[xi] (O x C) = sum over pairs of Z[xi] V[xi]^T,
// Z = A gy_pair (the 8 frequencies of each output pair's gradient: A = (A^T)^T), V = B^T d as in
// the forward pass, then dg = G^T dU: 8 products of O x C over the pairs where the direct sum
// takes 7 over the outputs, 1.75x fewer again. An item is a run of up to kWgradBlocks blocks of
// 24 pairs of one image and group (L lanes): it gathers the two rows of gy of its pairs and
// forms Zp[xi][output block][L][4]; then, 24 input channels at a time, it transforms their
// inputs (V[xi][channel][L]), transposes them to [xi][L][24] (8 x 8 blocks), and the
// micro-kernel adds the 4 x 24 blocks of dU[xi] with the L lanes as the reduction. Threads
// sum their items into their own dU, [group][xi][output block][channel block][4][24], added in
// item order afterwards; the last step is G^T in f64. The error bound, checked on every weight
// in tests/ops/conv_test.cpp: about (pairs + 24) u times G^T [sum (|A| |gy|) (.) (|B^T| |d|)].
template <int NV>
inline void winograd7_wgrad_items_nv(const Problem& p, const Wino7& w7, const float* phases, const float* gy, int64_t n0,
                                              int64_t runs, float* Zp, float* V, float* Vt, float* dU, int64_t i0, int64_t i1) {
  constexpr int NR = 8 * NV;
  const Problem& q = w7.q;
  constexpr int64_t kLanes = kWgradBlocks * NR;
  const int64_t CB = (p.Cg + NR - 1) / NR, out_plane = p.OH * p.OW;
  const int64_t z_xi = p.OB * kLanes * kMR;  // floats per frequency of Zp
  for (int64_t item = i0; item < i1; ++item) {
    const int64_t run = item % runs, gi = (item / runs) % p.groups, i = item / (runs * p.groups);
    const int64_t b0 = run * kWgradBlocks, nblk = std::min(kWgradBlocks, w7.blocks - b0), L = nblk * NR, j0 = b0 * NR;
    // Zp: the pairs' two gradient rows, then A applied (zero where no output). gy is in the
    // problem's layout (run_winograd7_wgrad transposes it first for a transposed problem), so
    // the lanes of a run are consecutive floats: for whole groups of 4 output channels, 8 lanes
    // at a time as vectors, the 8 frequencies of each turned into [lane][4] by 4 x 8 transposes
    // (one scalar load per output and 8 scattered stores took as long as the products).
    std::fill_n(Zp, kW7Xi * z_xi, 0.0f);
    const float* gimg = gy + ((n0 + i) * p.Cout + gi * p.Og) * out_plane;
    const int64_t o4 = p.Og / kMR * kMR;
    for (int64_t bk = 0; bk < nblk; ++bk) {
      Runs rn;  // rows: pairs of output rows
      rn.find(w7.flat, q.Wq, p.OW, j0 + bk * NR, NR);
      for (int k = 0; k < rn.count; ++k) {
        const int64_t oh = 2 * rn.row[k], lane0 = bk * NR + rn.lane[k], len = rn.len[k];
        const bool second = oh + 1 < p.OH;
        const float* src = gimg + oh * p.OW + rn.col[k];
        const auto one = [&](int64_t o, int64_t e) {  // output o, lane lane0 + e
          const float g0 = src[o * out_plane + e], g1 = second ? src[o * out_plane + p.OW + e] : 0.0f;
          const float z[kW7Xi] = {g0, g0 + g1, g0 - g1, g0 + 2.0f * g1, g0 - 2.0f * g1, g0 + 0.5f * g1, g0 - 0.5f * g1, g1};
          float* dst = Zp + ((o / kMR) * kLanes + lane0 + e) * kMR + o % kMR;
          for (int xi = 0; xi < kW7Xi; ++xi) dst[xi * z_xi] = z[xi];
        };
        for (int64_t o = 0; o < o4; o += kMR) {
          float* dst = Zp + ((o / kMR) * kLanes + lane0) * kMR;
          int64_t e = 0;
          for (; e + 8 <= len; e += 8) {
            v8f z[kW7Xi][kMR];
            for (int r = 0; r < kMR; ++r) {
              const float* s0 = src + (o + r) * out_plane + e;
              const v8f g0 = load8(s0), g1 = second ? load8(s0 + p.OW) : splat(0.0f);
              const v8f h = g1 * 0.5f, d = g1 * 2.0f;
              z[0][r] = g0;
              z[1][r] = g0 + g1;
              z[2][r] = g0 - g1;
              z[3][r] = g0 + d;
              z[4][r] = g0 - d;
              z[5][r] = g0 + h;
              z[6][r] = g0 - h;
              z[7][r] = g1;
            }
            for (int xi = 0; xi < kW7Xi; ++xi) {
              v8f t[kMR];
              columns_of_4x8(z[xi], t);
              for (int c = 0; c < kMR; ++c) store8(dst + xi * z_xi + e * kMR + 8 * c, t[c]);
            }
          }
          for (; e < len; ++e)
            for (int r = 0; r < kMR; ++r) one(o + r, e);
        }
        for (int64_t o = o4; o < p.Og; ++o)
          for (int64_t e = 0; e < len; ++e) one(o, e);
      }
    }
    const float* base = phases + (i * p.Cin + gi * p.Cg) * q.Lc + j0;
    for (int64_t cb = 0; cb < CB; ++cb) {
      // V[xi][c][lane] for the block's 24 channels (zero past Cg), then Vt[xi][lane][c].
      for (int64_t c = 0; c < NR; ++c) {
        const int64_t ch = cb * NR + c;
        for (int64_t v = 0; v < L / 8; ++v) {
          v8f t[8];
          if (ch < p.Cg) {
            v8f d[8];
            const float* src = base + ch * q.Lc + 8 * v;
            for (int e = 0; e < 8; ++e) d[e] = load8(src + w7.off[e]);
            bt7_times(d, t);
          } else {
            for (int xi = 0; xi < kW7Xi; ++xi) t[xi] = splat(0.0f);
          }
          for (int xi = 0; xi < kW7Xi; ++xi) store8(V + (xi * NR + c) * kLanes + 8 * v, t[xi]);
        }
      }
      for (int xi = 0; xi < kW7Xi; ++xi)
        for (int64_t c0 = 0; c0 < NR; c0 += 8)
          for (int64_t l0 = 0; l0 < L; l0 += 8) {
            v8f a[8], d[8];
            for (int e = 0; e < 8; ++e) a[e] = load8(V + (xi * NR + c0 + e) * kLanes + l0);
            transpose_8x8(a, d);
            for (int e = 0; e < 8; ++e) store8(Vt + (xi * kLanes + l0 + e) * NR + c0, d[e]);
          }
      for (int xi = 0; xi < kW7Xi; ++xi)
        gemm_rows<NV, true>(
            0, p.OB, Vt + xi * kLanes * NR, L, [&](int64_t ob) { return Zp + xi * z_xi + ob * kLanes * kMR; },
            [&](int64_t ob) { return dU + (((gi * kW7Xi + xi) * p.OB + ob) * CB + cb) * kMR * NR; });
    }
  }
}

TRIDENT_CPU_CLONES void winograd7_wgrad_items(const Problem& p, const Wino7& w7, const float* phases, const float* gy, int64_t n0,
                                              int64_t runs, float* Zp, float* V, float* Vt, float* dU, int64_t i0, int64_t i1) {
  if (p.nr == 48) return winograd7_wgrad_items_nv<6>(p, w7, phases, gy, n0, runs, Zp, V, Vt, dU, i0, i1);
  winograd7_wgrad_items_nv<3>(p, w7, phases, gy, n0, runs, Zp, V, Vt, dU, i0, i1);
}

void run_winograd7_wgrad(const Problem& p, const float* gy, float* gw) {
  const Wino7 w7(p);
  // A transposed problem's gy comes in the output's layout: transposed once into the
  // problem's, where winograd7_wgrad_items reads the lanes of a row as consecutive floats.
  Tensor staged;
  if (p.transposed) {
    staged = empty({p.N * p.Cout * p.OH * p.OW});
    transpose_planes_parallel(gy, staged.data<float>(), p.N * p.Cout, p.OW, p.OH);
    gy = staged.data<float>();
  }
  const int64_t kLanes = kWgradBlocks * p.nr;
  const int64_t CB = (p.Cg + p.nr - 1) / p.nr, du_size = p.groups * kW7Xi * p.OB * CB * kMR * p.nr;
  const int64_t runs = (w7.blocks + kWgradBlocks - 1) / kWgradBlocks;
  const int64_t zp = kW7Xi * p.OB * kLanes * kMR, v = kW7Xi * p.nr * kLanes, vt = kW7Xi * kLanes * p.nr;
  Tensor total = zeros({du_size}, kF32);
  float* tot = total.data<float>();
  wgrad_chunks(p, w7.q, p.groups * runs, zp + v + vt + du_size, du_size, tot,
               [&](float* b, int64_t n0, const float* phases, int64_t i0, int64_t i1) {
                 winograd7_wgrad_items(p, w7, phases, gy, n0, runs, b, b + zp, b + zp + v, b + zp + v + vt, i0, i1);
               });
  // gw[gi Og + o][c][t] = sum_xi G[xi][t] dU[gi][xi][o][c], in f64.
  parallel_for(0, p.groups * p.Og, std::max<int64_t>(1, 512 / p.Cg), [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      const int64_t gi = row / p.Og, o = row % p.Og, ob = o / kMR, r = o % kMR;
      for (int64_t c = 0; c < p.Cg; ++c) {
        double du[kW7Xi];
        for (int xi = 0; xi < kW7Xi; ++xi)
          du[xi] = tot[((((gi * kW7Xi + xi) * p.OB + ob) * CB + c / p.nr) * kMR + r) * p.nr + c % p.nr];
        for (int t = 0; t < 7; ++t) {
          double s = 0.0;
          for (int xi = 0; xi < kW7Xi; ++xi) s += kG7[xi][t] * du[xi];
          gw[(row * p.Cg + c) * 7 + t] = static_cast<float>(s);
        }
      }
    }
  });
}

void run_wgrad(Problem& p, const float* gy, float* gw) {
  transpose_if_row_kernel(p);
  p.nr = 8 * widest_nv();
  p.derive();
  if (winograd7_applies(p)) {
    run_winograd7_wgrad(p, gy, gw);
    return;
  }
  const int64_t KB = (p.K + p.nr - 1) / p.nr, dw_size = p.groups * p.OB * KB * kMR * p.nr;
  const int64_t runs = (p.blocks + kWgradBlocks - 1) / kWgradBlocks, lanes = kWgradBlocks * p.nr;
  Tensor total = zeros({dw_size}, kF32);
  float* tot = total.data<float>();
  // The workspace's zeros matter: tile rows past K stay zero.
  const int64_t tile = KB * p.nr * lanes, gyp = p.OB * lanes * kMR;
  wgrad_chunks(p, p, p.groups * runs, tile + gyp + dw_size, dw_size, tot,
               [&](float* b, int64_t n0, const float* phases, int64_t i0, int64_t i1) {
                 const WgradChunk ch{&p, phases, gy, n0, KB, runs};
                 blocked_wgrad_items(ch, b, b + tile, b + tile + gyp, i0, i1);
               });
  // gw[gi Og + o][k] from the [group][output block][k / 24][4][24] layout.
  parallel_for(0, p.groups * p.Og, std::max<int64_t>(1, 4096 / p.K), [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      const int64_t gi = row / p.Og, o = row % p.Og, ob = o / kMR, r = o % kMR;
      for (int64_t k = 0; k < p.K; ++k) gw[row * p.K + k] = tot[(((gi * p.OB + ob) * KB + k / p.nr) * kMR + r) * p.nr + k % p.nr];
    }
  });
}

}  // namespace

bool set_conv_winograd7_enabled_for_testing(bool enabled) { return std::exchange(g_winograd7_enabled, enabled); }

bool blocked_kernels_preferred() {
  if (g_blocked_preference >= 0) return g_blocked_preference == 1;
  static const bool blas_avx512 = blas_core_has_avx512();
  return widest_nv() == 6 || !blas_avx512;
}

#ifdef TRIDENT_AVX512_MICRO_KERNEL
bool conv_avx512_kernel_available() { return cpu_has_avx512(); }
bool set_conv_avx512_kernel_enabled_for_testing(bool enabled) {
  return std::exchange(conv_simd::g_avx512_kernel, enabled && cpu_has_avx512());
}
#else
bool conv_avx512_kernel_available() { return false; }
bool set_conv_avx512_kernel_enabled_for_testing(bool) { return false; }
#endif

int set_conv_blocked_preference_for_testing(int mode) { return std::exchange(g_blocked_preference, mode < 0 ? -1 : mode > 0 ? 1 : 0); }

bool winograd7_forward_applies(const Conv2dGeometry& g) {
  Problem p(nullptr, nullptr, nullptr, g.N, g.C, g.H, g.W, g.O, g.OH, g.OW, g.kH, g.kW, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.groups);
  transpose_if_row_kernel(p);
  p.derive();
  return winograd7_applies(p);
}

bool winograd7_backward_input_applies(const Conv2dGeometry& g) {
  if (!blocked_backward_input_applies(g)) return false;
  const int64_t qh = (g.kH - 1) * g.dh - g.ph, qw = (g.kW - 1) * g.dw - g.pw;
  Problem p(nullptr, nullptr, nullptr, g.N, g.O, g.OH, g.OW, g.C, g.H, g.W, g.kH, g.kW, 1, 1, qh, qw, g.dh, g.dw, g.groups);
  transpose_if_row_kernel(p);
  p.derive();
  return winograd7_applies(p);
}

void blocked_backward_weight(const float* gy, const float* x, float* gw, const Conv2dGeometry& g) {
  Problem p(x, nullptr, nullptr, g.N, g.C, g.H, g.W, g.O, g.OH, g.OW, g.kH, g.kW, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.groups);
  run_wgrad(p, gy, gw);
}

void blocked_forward(const float* x, const float* w, const float* bias, float* y, const Conv2dGeometry& g) {
  Problem p(x, y, bias, g.N, g.C, g.H, g.W, g.O, g.OH, g.OW, g.kH, g.kW, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.groups);
  // w [O, C/g, kH, kW]: output oo of group gi is row gi Og + oo.
  p.w = w;
  p.group_stride = g.out_per_group() * g.in_per_group() * g.kH * g.kW;
  p.s_out = g.in_per_group() * g.kH * g.kW;
  p.s_in = g.kH * g.kW;
  run(p);
}

bool blocked_backward_input_applies(const Conv2dGeometry& g) {
  return g.sh == 1 && g.sw == 1 && (g.kH - 1) * g.dh >= g.ph && (g.kW - 1) * g.dw >= g.pw;
}

void blocked_backward_input(const float* gy, const float* w, float* gx, const Conv2dGeometry& g) {
  const int64_t qh = (g.kH - 1) * g.dh - g.ph, qw = (g.kW - 1) * g.dw - g.pw;
  Problem p(gy, gx, nullptr, g.N, g.O, g.OH, g.OW, g.C, g.H, g.W, g.kH, g.kW, 1, 1, qh, qw, g.dh, g.dw, g.groups);
  // w'[c][o] = w[o][c] rotated: "output" c of group gi reads w[gi Og_f + o][c], flipped.
  p.w = w;
  p.group_stride = g.out_per_group() * g.in_per_group() * g.kH * g.kW;
  p.s_out = g.kH * g.kW;
  p.s_in = g.in_per_group() * g.kH * g.kW;
  p.flip = true;
  run(p);
}

}  // namespace trident::cpu
