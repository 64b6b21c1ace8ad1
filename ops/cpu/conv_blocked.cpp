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
// A forward pass of column stride >= 2 over wide rows gathers its tiles from the input instead,
// with no phase planes (NOTE [Conv2d dense blocks]).
// The input gradient of a stride-1 convolution with padding p is the same computation on gy
// with the kernel flipped and transposed and padding (k - 1) d - p. The weight gradient uses
// the same tiles, transposed, against gy (see "weight gradient" below).
#include "ops/cpu/conv_blocked.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/conv_blocked_internal.h"
#include "ops/cpu/conv_simd.h"
#include "ops/cpu/isa.h"

namespace trident::cpu {
namespace blocked {
namespace {

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
// vector loads and alternate8) where the loads stay inside the n (n - 1) sw + 1 elements read.
inline void gather_strided(const float* src, float* dst, int64_t n, int64_t sw) {
  if (sw == 1) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  int64_t k = 0;
  if (sw == 2) {
    for (; 2 * k + 16 <= 2 * n - 1; k += 8) store8(dst + k, alternate8<0>(load8(src + 2 * k), load8(src + 2 * k + 8)));
    if (k < n && n > 8) {  // the last 8 outputs again, from one float earlier (the odd lanes)
      k = n - 8;
      store8(dst + k, alternate8<1>(load8(src + 2 * k - 1), load8(src + 2 * k + 7)));
      return;
    }
  }
  for (; k < n; ++k) dst[k] = src[k * sw];
}

// dst_row(c)[r] = src[r cols + c] for the plane src [rows, cols]: 8 x 8 blocks through
// transpose_8x8, the last block of each direction starting 8 before the end, over the one
// before it (a copy: the floats written twice are the same); a plane under 8 either way one
// element at a time. Inline, for the clones below.
template <typename DstRow>
inline void transpose_plane(const float* src, int64_t rows, int64_t cols, const DstRow& dst_row) {
  if (rows < 8 || cols < 8) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) dst_row(c)[r] = src[r * cols + c];
    return;
  }
  for (int64_t rb = 0; rb < rows; rb += 8)
    for (int64_t cb = 0; cb < cols; cb += 8) {
      const int64_t r0 = std::min(rb, rows - 8), c0 = std::min(cb, cols - 8);
      v8f v[8], d[8];
      for (int e = 0; e < 8; ++e) v[e] = load8(src + (r0 + e) * cols + c0);
      transpose_8x8(v, d);
      for (int e = 0; e < 8; ++e) store8(dst_row(c0 + e) + r0, d[e]);
    }
}

// Channel q's phase planes: phase (a, b) row i holds padded row i sh + a, columns j sw + b,
// zero where that falls in the padding; then kMaxNR zeros of slack. Every float of the Lc is
// written once (no memset first: the copy is a few percent of a strided convolution).
TRIDENT_CPU_CLONES void split_channel(const Problem& p, const float* src, float* dst) {
  if (p.transposed) {  // x's row h is the problem's column h; rows in sh phases (sw == 1)
    const auto row = [&](int64_t w) {  // the problem's row w (x's column w), from column pw
      const int64_t r = w + p.ph;
      return dst + (r % p.sh) * p.plane + (r / p.sh) * p.Wq + p.pw;
    };
    // Zeros where no input lands: padding rows, each row's pw columns on either side, the slack.
    for (int64_t a = 0; a < p.sh; ++a)
      for (int64_t i = 0; i < p.Hq; ++i) {
        float* r = dst + a * p.plane + i * p.Wq;
        const int64_t w = i * p.sh + a - p.ph;
        if (w < 0 || w >= p.H) {
          std::fill_n(r, p.Wq, 0.0f);
        } else {
          std::fill_n(r, p.pw, 0.0f);
          std::fill_n(r + p.pw + p.W, p.Wq - p.pw - p.W, 0.0f);
        }
      }
    std::fill_n(dst + p.sh * p.plane, kMaxNR, 0.0f);
    transpose_plane(src, p.W, p.H, row);
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
  // Column phase b: columns j of the phase with input column j sw + b - pw inside [0, W) are
  // [lo, hi), the same for every row; the rest, a column or two at either end, zeros. Those go
  // first, as one vector store at each end where the row allows (the gather then overwrites
  // what is input), not as two calls to memset per row; the row phase is counted, not divided
  // out (one 64x56x56 image at stride 2, in cache: 62 -> 47 us, about 60 -> 45 cycles a row).
  const auto j_lo_of = [&](int64_t b) { return std::min(p.Wq, std::max<int64_t>(0, (p.pw - b + p.sw - 1) / p.sw)); };
  const auto j_hi_of = [&](int64_t b) { return std::max(j_lo_of(b), std::min(p.Wq, (p.W + p.pw - b + p.sw - 1) / p.sw)); };
  // Whether every column phase's zeros fit one vector store at each end (the phase with the
  // most zeros is b = 0 at the start and b = sw - 1 at the end).
  const bool edges_by_vector = p.Wq >= 8 && j_lo_of(0) <= 8 && p.Wq - j_hi_of(p.sw - 1) <= 8;
  constexpr int64_t kKept = 8;  // column phases whose ranges are computed once (any more: per row)
  int64_t lo[kKept], hi[kKept];
  for (int64_t b = 0; b < std::min(p.sw, kKept); ++b) lo[b] = j_lo_of(b), hi[b] = j_hi_of(b);
  int64_t a = p.ph % p.sh, i = p.ph / p.sh;  // input row h is row i of row phase a
  for (int64_t h = 0; h < p.H; ++h) {
    const float* in = src + h * p.W;
    for (int64_t b = 0; b < p.sw; ++b) {
      float* row = dst + (a * p.sw + b) * p.plane + i * p.Wq;
      const int64_t j_lo = b < kKept ? lo[b] : j_lo_of(b), j_hi = b < kKept ? hi[b] : j_hi_of(b);
      if (edges_by_vector) {
        if (j_lo > 0) store8(row, splat(0.0f));
        if (j_hi < p.Wq) store8(row + p.Wq - 8, splat(0.0f));
      } else {
        std::fill_n(row, j_lo, 0.0f);
        std::fill_n(row + j_hi, p.Wq - j_hi, 0.0f);
      }
      gather_strided(in + j_lo * p.sw + b - p.pw, row + j_lo, j_hi - j_lo, p.sw);
    }
    if (++a == p.sh) {
      a = 0;
      ++i;
    }
  }
  std::fill_n(dst + p.sh * p.sw * p.plane, kMaxNR, 0.0f);
}

}  // namespace

// The phase planes of images [n0, n0 + nb), one channel after another (split_channel).
void split_phases(const Problem& p, int64_t n0, int64_t nb, float* buf) {
  parallel_for(0, nb * p.Cin, std::max<int64_t>(1, 16384 / (p.H * p.W)), [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) split_channel(p, p.x + (n0 * p.Cin + q) * p.H * p.W, buf + q * p.Lc);
  });
}

namespace {

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

// One work item of a chunk: image i (of the chunk), group gi, blocks [b0, b0 + nblk) of nr
// outputs, output blocks [ob0, ob1).
struct Item {
  int64_t i, gi, b0, nblk, ob0, ob1;
};

inline Item item_of(const Chunk& ch, int64_t item) {
  const Problem& p = *ch.p;
  const int64_t orr = item % ch.orr, unit = item / ch.orr;  // unit = (image, group, run of blocks)
  const int64_t run = unit % ch.runs, b0 = run * ch.per_item;
  return Item{unit / (ch.runs * p.groups), (unit / ch.runs) % p.groups, b0, std::min(ch.per_item, p.blocks - b0),
              p.OB * orr / ch.orr, p.OB * (orr + 1) / ch.orr};
}

// The multiply-adds of one item, both layouts: K in slices of at most KC tile rows, of equal
// size (576 rows: 3 x 192, not 256, 256, 64, so none is a short one that pays the accumulators'
// loads and stores for few rows); per slice, for each block bk of the item, fill(bk, k0, kn)
// writes its tile slice and the micro-kernel runs it against every output block's weights, the
// sums going to out [block][output block][kMR][NR]. A block's tile slice stays in L1 while every
// output block uses it, the weights' slice in L2 while every block of the item uses it. In the
// last slice touch_y(bk, ob) runs before output block ob's kernel: it asks for the lines of y
// the writes after the item go to, which then find them in cache rather than waiting for each
// (4% of a 3x3 stride-2 forward pass, measured).
// The rows per K slice: at most KC, in equal slices (see multiply_item).
inline int64_t slice_size(int64_t K, int64_t KC) {
  const int64_t slices = (K + KC - 1) / KC;
  return (K + slices - 1) / slices;
}

template <int NV, typename Fill, typename TouchY>
inline void multiply_item(const Chunk& ch, const Item& it, float* tile, float* out, const Fill& fill, const TouchY& touch_y) {
  constexpr int NR = 8 * NV;
  constexpr int64_t KC = slice_rows(NR);
  const Problem& p = *ch.p;
  const int64_t kc = slice_size(p.K, KC), nob = it.ob1 - it.ob0;
  for (int64_t k0 = 0; k0 < p.K; k0 += kc) {
    const int64_t kn = std::min(kc, p.K - k0);
    const bool last = k0 + kn == p.K;
    for (int64_t bk = 0; bk < it.nblk; ++bk) {
      fill(bk, k0, kn);
      const auto up = [&](int64_t ob) { return ch.Wp + ((it.gi * p.OB + ob) * p.K + k0) * kMR; };
      const auto mp = [&](int64_t ob) {
        if (last) touch_y(bk, ob);
        return out + (bk * nob + ob - it.ob0) * kMR * NR;
      };
      if (k0 == 0) {
        gemm_rows<NV, false>(it.ob0, it.ob1, tile, kn, up, mp);
      } else {
        gemm_rows<NV, true>(it.ob0, it.ob1, tile, kn, up, mp);
      }
    }
  }
}

// Items [i0, i1) of a chunk; tile is slice_rows(nr) x nr floats, out per_item x OB x kMR x nr (nr = 8 NV).
template <int NV>
inline void blocked_items_nv(const Chunk& ch, float* tile, float* out, int64_t i0, int64_t i1) {
  constexpr int NR = 8 * NV;
  const Problem& p = *ch.p;
  const int64_t* off = p.off.data();
  const int64_t out_plane = p.OH * p.OW;
  for (int64_t item = i0; item < i1; ++item) {
    const Item it = item_of(ch, item);
    const int64_t nob = it.ob1 - it.ob0;
    const float* base = ch.phases + (it.i * p.Cin + it.gi * p.Cg) * p.Lc + it.b0 * NR;
    const auto copy_tile = [&](int64_t bk, int64_t k0, int64_t kn) {
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
    };
    Runs yr;  // block yr_bk's runs of y
    int64_t yr_bk = -1;
    const auto touch_y = [&](int64_t bk, int64_t ob) {
      if (bk != yr_bk) {
        yr.find(p.flat, p.Wq, p.OW, (it.b0 + bk) * NR, NR);
        yr_bk = bk;
      }
      for (int r = 0; r < kMR && ob * kMR + r < p.Og; ++r) {
        const float* yo = ch.y + (it.i * p.Cout + it.gi * p.Og + ob * kMR + r) * out_plane;
        for (int k = 0; k < yr.count; ++k) {
          const float* d = yo + yr.out(p, k, /*plane_layout=*/true);
          __builtin_prefetch(d, 1);
          __builtin_prefetch(d + yr.len[k] - 1, 1);
        }
      }
    };
    multiply_item<NV>(ch, it, tile, out, copy_tile, touch_y);
    for (int64_t bk = 0; bk < it.nblk; ++bk) {
      Runs rn;
      rn.find(p.flat, p.Wq, p.OW, (it.b0 + bk) * NR, NR);
      for (int64_t ob = it.ob0; ob < it.ob1; ++ob) {
        const float* ob_out = out + (bk * nob + ob - it.ob0) * kMR * NR;
        for (int r = 0; r < kMR; ++r) {
          const int64_t o = ob * kMR + r;
          if (o >= p.Og) break;
          const int64_t oc = it.gi * p.Og + o;
          const float b = p.bias ? p.bias[oc] : 0.0f;
          float* yo = ch.y + (it.i * p.Cout + oc) * out_plane;
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

// ---- dense blocks, tiles gathered from x ---------------------------------------------------
// NOTE [Conv2d dense blocks]: for a column stride of 2 or more the phase planes cost a pass of
// their own over the input and its copy (read x, write the planes, read them back: the split
// took 0.8-0.9 ms of a 3x3 stride-2 forward pass of 10.4 on one thread, AVX2, Zen 4, with the
// input in memory), computes the Wq - OW columns per row it drops, and splits every phase of a
// 1x1 stride-2 kernel to use one. Dense blocks number the outputs j = oh OW + ow instead (y's
// own layout: a block's lanes go to y as one run per channel, nothing computed and dropped) and
// gather each tile row from the input planes directly, the stride and the padding applied in
// the gather: a block's tile row is one piece per output row it covers (Seg), each a strided
// gather (gather_strided: 8 outputs from two vector loads and a shuffle at stride 2) with zeros
// where it falls in the padding. The pieces are filled tap by tap, piece by piece, for every
// channel of the slice at once, so one piece's lengths repeat and its branches are predicted;
// the zeros go first, as whole vectors (a piece's tail reaching into lanes the gathers then
// write, or into the tile's 8 floats of slack). A gather costs more than the phase path's copy
// of a tile row (a vector load per 8 lanes), and the tile is shared by every output block, so it
// pays where rows are wide (few pieces per block) and the kernel narrow (few gathers per input
// row): column stride >= 2, kW <= 3 and OW >= 16, or a 1x1 kernel. Measured (best of 12 runs
// alternating the two in one process, Zen 4, AVX2 kernels and OpenBLAS Haswell, phases / dense,
// 1 and 2 threads): 3x3 stride 2 8x64x56x56->128 1.07 / 1.09, 8x64x112x112->64 1.06 / 1.09,
// 8x128x28x28->256 1.01 / 1.01, grouped 8x64x56x56->64 g4 1.11 / 1.02, 1x1 stride 2
// 8x64x56x56->128 1.39 / 1.56 and 8x256x28x28->512 1.17 / 1.18; left on the phase planes:
// 8x256x14x14->256 (OW 7) 0.97 / 0.96, 1x128x28x28->128 (OW 14) 0.98 / 0.98, the 7x7 stride-2
// stem 0.92 / 0.91, 5x5 stride 2 0.85 / 0.89. With the AVX-512 kernels the direct kernel
// (NOTE [Conv2d direct]) takes most of these; of those left to the blocked kernels, 3x3
// stride 2 to 36 channels measured 0.96-0.99 (at parity) and 5x5 0.82-0.87. (Unpadded 1x1
// stride-2 kernels no longer come here: they are pointwise convolutions of the sampled pixels,
// NOTE [Strided pointwise convolutions] in ops/cpu/conv.cpp.)
// set_conv_dense_blocks_for_testing forces either layout.
// One piece of a block's tile row: lanes [lane, lane + len) are output row oh, columns ow..,
// whose inputs for tap t lie in one input row (src < 0: a row of padding) at columns
// (w0 + e sw), inside the row for lo <= e < hi.
struct Seg {
  int64_t src;  // offset in the channel's plane of the element for e = lo, or -1
  int32_t lane, len, lo, hi;
};

// v8f zeros over d[0, n) and up to 7 floats past it (the callers write what follows later).
inline void zero_over(float* d, int64_t n) {
  for (int64_t e = 0; e < n; e += 8) store8(d + e, splat(0.0f));
}

// The pieces of block j0 (NR lanes, valid of them outputs) for every tap: segs[t * count + k].
// Lanes past the outputs (the last block of an image) get a piece of padding.
inline int dense_segments(const Problem& p, int64_t j0, int64_t NR, Seg* segs) {
  Runs rn;
  const int64_t P = p.OH * p.OW;
  rn.find(P, p.OW, p.OW, j0, NR);
  const int64_t valid = std::min(NR, P - j0);
  const int count = rn.count + (valid < NR ? 1 : 0);
  for (int64_t t = 0; t < p.taps; ++t) {
    const int64_t kh = t / p.kW, kw = t % p.kW;
    Seg* st = segs + t * count;
    for (int k = 0; k < rn.count; ++k) {
      const int64_t h = rn.row[k] * p.sh + kh * p.dh - p.ph, w0 = rn.col[k] * p.sw + kw * p.dw - p.pw, len = rn.len[k];
      int64_t lo = w0 < 0 ? (-w0 + p.sw - 1) / p.sw : 0, hi = w0 < p.W ? (p.W - w0 + p.sw - 1) / p.sw : 0;
      lo = std::min(lo, len);
      hi = std::clamp(hi, lo, len);
      const bool row_in = h >= 0 && h < p.H && hi > lo;
      st[k] = Seg{row_in ? h * p.W + w0 + lo * p.sw : -1, static_cast<int32_t>(rn.lane[k]), static_cast<int32_t>(len),
                  static_cast<int32_t>(lo), static_cast<int32_t>(hi)};
    }
    if (valid < NR) st[rn.count] = Seg{-1, static_cast<int32_t>(valid), static_cast<int32_t>(NR - valid), 0, 0};
  }
  return count;
}

// Items [i0, i1) of a chunk of dense blocks (ch.phases is x itself, ch.y is y); tile is
// slice_rows(nr) x nr floats and 8 of slack, out per_item x OB x kMR x nr, segs taps x (nr + 1).
// The same slices and kernel calls as multiply_item, written out: the gathers passed to it as
// a callback ran 2-3% slower (AVX2, one thread, 3x3 stride 2, best of 15 alternating builds).
template <int NV>
inline void dense_items_nv(const Chunk& ch, float* tile, float* out, Seg* segs, int64_t i0, int64_t i1) {
  constexpr int NR = 8 * NV;
  constexpr int64_t KC = slice_rows(NR);
  const Problem& p = *ch.p;
  const int64_t out_plane = p.OH * p.OW, in_plane = p.H * p.W;
  for (int64_t item = i0; item < i1; ++item) {
    const Item it = item_of(ch, item);
    const int64_t i = it.i, gi = it.gi, b0 = it.b0, nblk = it.nblk, ob0 = it.ob0, ob1 = it.ob1, nob = ob1 - ob0;
    const float* xg = ch.phases + (i * p.Cin + gi * p.Cg) * in_plane;
    const int64_t kc = slice_size(p.K, KC);
    for (int64_t k0 = 0; k0 < p.K; k0 += kc) {
      const int64_t kn = std::min(kc, p.K - k0);
      for (int64_t bk = 0; bk < nblk; ++bk) {
        const int64_t j0 = (b0 + bk) * NR;
        const int count = dense_segments(p, j0, NR, segs);
        // Tap by tap, piece by piece, every channel of the slice: the same lengths over and
        // over (predicted branches). The zeros first, as whole vectors that may reach past
        // their piece (into lanes the gathers then write, or the tile's slack).
        for (int pass = 0; pass < 2; ++pass)
          for (int64_t t = 0; t < p.taps; ++t) {
            const int64_t c_lo = std::max<int64_t>(0, (k0 - t + p.taps - 1) / p.taps);
            const int64_t c_hi = (k0 + kn - t + p.taps - 1) / p.taps;
            if (c_hi <= c_lo) continue;
            for (int q = 0; q < count; ++q) {
              const Seg& sg = segs[t * count + q];
              float* d = tile + (c_lo * p.taps + t - k0) * NR + sg.lane;
              const int64_t dstep = p.taps * NR;
              if (pass == 0) {
                if (sg.src < 0) {
                  for (int64_t c = c_lo; c < c_hi; ++c, d += dstep) zero_over(d, sg.len);
                } else if (sg.lo > 0 || sg.hi < sg.len) {
                  for (int64_t c = c_lo; c < c_hi; ++c, d += dstep) {
                    zero_over(d, sg.lo);
                    zero_over(d + sg.hi, sg.len - sg.hi);
                  }
                }
              } else if (sg.src >= 0) {
                const float* xs = xg + c_lo * in_plane + sg.src;
                for (int64_t c = c_lo; c < c_hi; ++c, d += dstep, xs += in_plane)
                  gather_strided(xs, d + sg.lo, sg.hi - sg.lo, p.sw);
              }
            }
          }
        const bool last = k0 + kn == p.K;
        const auto up = [&](int64_t ob) { return ch.Wp + ((gi * p.OB + ob) * p.K + k0) * kMR; };
        const auto mp = [&](int64_t ob) {
          if (last)  // the output's lines, for the writes below
            for (int r = 0; r < kMR && ob * kMR + r < p.Og; ++r) {
              const float* yo = ch.y + (i * p.Cout + gi * p.Og + ob * kMR + r) * out_plane + j0;
              for (int e = 0; e < NR; e += 16) __builtin_prefetch(yo + e, 1);
            }
          return out + (bk * nob + ob - ob0) * kMR * NR;
        };
        if (k0 == 0) {
          gemm_rows<NV, false>(ob0, ob1, tile, kn, up, mp);
        } else {
          gemm_rows<NV, true>(ob0, ob1, tile, kn, up, mp);
        }
      }
    }
    // Each output channel's lanes of the item are one run of y.
    for (int64_t ob = ob0; ob < ob1; ++ob)
      for (int r = 0; r < kMR && ob * kMR + r < p.Og; ++r) {
        const int64_t oc = gi * p.Og + ob * kMR + r;
        const v8f b = splat(p.bias ? p.bias[oc] : 0.0f);
        float* yo = ch.y + (i * p.Cout + oc) * out_plane;
        for (int64_t bk = 0; bk < nblk; ++bk) {
          const int64_t j0 = (b0 + bk) * NR, valid = std::min<int64_t>(NR, out_plane - j0);
          const float* s = out + ((bk * nob + ob - ob0) * kMR + r) * NR;
          int64_t e = 0;
          for (; e + 8 <= valid; e += 8) store8(yo + j0 + e, load8(s + e) + b);
          for (; e < valid; ++e) yo[j0 + e] = s[e] + b[0];
        }
      }
  }
}

TRIDENT_CPU_CLONES void dense_items(const Chunk& ch, float* tile, float* out, Seg* segs, int64_t i0, int64_t i1) {
  if (ch.p->nr == 48) return dense_items_nv<6>(ch, tile, out, segs, i0, i1);
  dense_items_nv<3>(ch, tile, out, segs, i0, i1);
}

TRIDENT_CPU_CLONES void blocked_items(const Chunk& ch, float* tile, float* out, int64_t i0, int64_t i1) {
  if (ch.p->nr == 48) return blocked_items_nv<6>(ch, tile, out, i0, i1);
  blocked_items_nv<3>(ch, tile, out, i0, i1);
}

// dst[c][r] = src[r][c] for planes [rows, cols] -> [cols, rows] (transpose_plane).
TRIDENT_CPU_CLONES void transpose_planes(const float* src, float* dst, int64_t planes, int64_t rows, int64_t cols) {
  const int64_t size = rows * cols;
  for (int64_t q = 0; q < planes; ++q, src += size, dst += size)
    transpose_plane(src, rows, cols, [&](int64_t c) { return dst + c * rows; });
}

}  // namespace

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

namespace {

// NOTE [Dynamic items]: the work items of the forward passes and input gradients that run here
// (blocks of outputs) and in the direct kernels (rows) cost about the same and write disjoint outputs, so they go to the threads
// in chunks of about an eighth of a thread's share, to whichever thread asks next
// (parallel_for_dynamic with dynamic_chunk, core/parallel.h), rather than as one fixed range
// each: on these shared VMs one vCPU often runs slower for a while, and with fixed ranges the other then waits for it (libgomp's
// barrier took 4-5% of a 3x3 stride-2 forward pass on two threads; runs of the pass took 8.5 ms
// instead of 4.4 with fixed ranges, 5.0 handed out). A chunk keeps consecutive items together, so
// each still reuses what the one before left in cache; the results do not depend on which thread
// computes which item.

int g_blocked_preference = -1;  // NOTE [Blocked or GEMM]
int g_dense_blocks = -1;        // NOTE [Conv2d dense blocks]

bool dense_blocks_apply(const Problem& p) {
  if (p.transposed) return false;
  if (g_dense_blocks >= 0) return g_dense_blocks == 1;
  return p.sw >= 2 && ((p.kW <= 3 && p.OW >= 16) || p.taps == 1);
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
  // Too few items to keep every thread busy for long: fewer blocks per item, then the output
  // channels split as well.
  const auto share_out = [&](Chunk& ch) {
    const auto runs_for = [&](int64_t per_item) { return (p.blocks + per_item - 1) / per_item; };
    while (ch.per_item > 1 && ch.nb * p.groups * runs_for(ch.per_item) < 4 * threads) ch.per_item /= 2;
    ch.runs = runs_for(ch.per_item);
    while (ch.items() < 4 * threads && ch.orr * 2 <= p.OB) ch.orr *= 2;
  };
  if (dense_blocks_apply(p)) {
    p.blocks = (p.OH * p.OW + p.nr - 1) / p.nr;
    Chunk ch{&p, wp.data<float>(), p.x, p.y, 0, p.N, kFwdBlocks, 0, 1};
    share_out(ch);
    parallel_for_dynamic(0, ch.items(), dynamic_chunk(ch.items()), [&](int64_t i0, int64_t i1) {
      const int64_t tile = slice_rows(p.nr) * p.nr + 8;
      Tensor ws = empty({tile + ch.per_item * p.OB * kMR * p.nr});
      std::vector<Seg> segs(static_cast<size_t>(p.taps * (p.nr + 1)));
      dense_items(ch, ws.data<float>(), ws.data<float>() + tile, segs.data(), i0, i1);
    });
    return;
  }
  forward_chunks(p, p, [&](int64_t n0, int64_t nb, const float* phases, float* y) {
    Chunk ch{&p, wp.data<float>(), phases, y, n0, nb, kFwdBlocks, 0, 1};
    share_out(ch);
    parallel_for_dynamic(0, ch.items(), dynamic_chunk(ch.items()), [&](int64_t i0, int64_t i1) {
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
}  // namespace blocked

using namespace blocked;

bool blocked_kernels_preferred() {
  if (g_blocked_preference >= 0) return g_blocked_preference == 1;
  static const bool blas_avx512 = blas_core_has_avx512();
  return widest_nv() == 6 || !blas_avx512;
}

int set_conv_blocked_preference_for_testing(int mode) { return std::exchange(g_blocked_preference, mode < 0 ? -1 : mode > 0 ? 1 : 0); }

int set_conv_dense_blocks_for_testing(int mode) { return std::exchange(g_dense_blocks, mode < 0 ? -1 : mode > 0 ? 1 : 0); }

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
