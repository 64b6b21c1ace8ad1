// Winograd F(4x4, 3x3) convolution for f32 (NOTE [Conv2d algorithms] in ops/cpu/conv.cpp).
//
// NOTE [Conv2d Winograd]: a 4x4 block of outputs of a 3x3 stride-1 convolution needs a 6x6
// block d of input; Lavin and Gray's F(4x4, 3x3) computes it as
//     Y = A^T [ sum_c (G g_c G^T) (.) (B^T d_c B) ] A
// ((.) element-wise, g_c the 3x3 kernel of input channel c) with the matrices
//     B^T = [4  0 -5  0 1 0]    G = [ 1/4     0    0 ]    A^T = [1 1  1 1  1 0]
//           [0 -4 -4  1 1 0]        [-1/6 -1/6 -1/6 ]          [0 1 -1 2 -2 0]
//           [0  4 -4 -1 1 0]        [-1/6  1/6 -1/6 ]          [0 1  1 4  4 0]
//           [0 -2 -1  2 1 0]        [1/24 1/12  1/6 ]          [0 1 -1 8 -8 1]
//           [0  2 -1 -2 1 0]        [1/24 -1/12 1/6 ]
//           [0  4  0 -5 0 1]        [   0    0    1 ]
// So each of the 36 "frequencies" xi of a tile is an independent sum over channels: for a set
// of tiles, M[xi] (O x tiles) = U[xi] (O x C) @ V[xi] (C x tiles), 36 GEMMs with 36 * 16 / 4
// = 4x fewer multiply-adds than the direct 9 per output (tiles that stick out past the output's
// edge are computed and dropped, so small maps save less: a 7x7 output uses 2x2 tiles).
//
// The forward pass, per chunk of images (their zero-padded copy fits
// conv_copy_budget_bytes(), 32 MiB):
// 1. U = G g G^T for every (output, input) channel pair, once per call, laid out
//    [group][output block of 4][xi][input channel][4] for the micro-kernel of
//    ops/cpu/conv_simd.h (8 pairs at a time, 8 lanes).
// 2. The input chunk is copied into zero-padded planes of (4 TH + 2) x (4 TW + 4) (TH x TW
//    tiles cover the output), so no tile needs a bounds check.
// 3. Threads take work items: a block of 8, 16 or 24 tiles (16, 32 or 48 with the AVX-512
//    micro-kernel; tiles numbered across the images of the chunk, so small maps still fill the
//    blocks) and a range of output channels. Per block the thread transforms the input: for each
//    channel, 8 tiles at a time, it loads each tile's 6 rows as 8-float vectors and transposes
//    them so the lanes are the 8 tiles, then applies B^T from both sides in registers; V is
//    [xi][channel][tile]. Then, 16 output channels at a time, the register-blocked micro-kernel (4
//    rows x the block, 8 rows on AVX-512) computes M for all 36 frequencies into a small buffer
//    that stays in cache, and the output transform (A^T from both sides, bias, a transpose back to
//    4-float tile rows) writes the outputs. With few blocks (small batch, small map) the output
//    channels are split into ranges so every thread has work; each range's thread redoes the
//    block's input transform. With at most two blocks each thread instead owns a range of
//    output channels for every block (NOTE [Winograd work by owner]).
// Buffers whose 36 frequencies are written or read at once place them a cache line more than
// a multiple of 4 KiB apart, so they do not all land in one L1 set.
// The input gradient of a 3x3 stride-1 convolution with padding p is the same computation on
// gy with padding 2 - p and the kernel flipped and transposed (w'[c][o] = w[o][c] rotated by
// 180 degrees), so it runs through the same code. The weight gradient is its adjoint: see
// "weight gradient" below (36 GEMMs through cpu::gemm over the tiles).
//
// Accuracy: the transforms multiply magnitudes. Every intermediate is a sum of products
// computed in f32, so each step adds at most a few units of roundoff u = 2^-24 of the sum of
// absolute values of its terms; carried through the stages this bounds the error of an output
// by about (C + 24) u (|A^T| [ sum_c (|G| |g_c| |G^T|) (.) (|B^T| |d_c| |B|) ] |A|), the same
// expression evaluated with the absolute values of every matrix and operand (C counts the
// channel sum, 24 the roundings along the longest path through the transforms). That
// magnitude exceeds the direct sum's sum |x w| by the transforms' growth, largest at the
// tile's far corner (the 8s of A^T, the 5s of B^T). Measured (unit-variance inputs and
// outputs, 28x28, 64 outputs, C = 16 / 64 / 256): rms error 1.0e-6 / 1.7e-6 / 3.2e-6 and max
// 1.5e-5 / 3.0e-5 / 5.5e-5, 4 to 5 times the direct f32 kernel's rms error (6 times its max);
// far below what f32 training notices (cuDNN and oneDNN use the same F(4x4, 3x3)). F(6x6,
// 3x3) would save another 1.8x of multiplies, but published error analyses put its error
// about an order of magnitude higher; F(2x2, 3x3) is more accurate but saves only 2.25x. tests/ops/conv_test.cpp checks every output, input-gradient
// and weight-gradient entry against this bound (and its weight-gradient counterpart, noted
// there), computed from the f64 operands in the test's own loops.
#include "ops/cpu/conv_winograd.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/conv_simd.h"
#include "ops/cpu/isa.h"

namespace trident::cpu {
namespace {

using namespace conv_simd;

constexpr int kXi = 36;        // frequencies of a 6x6 tile
constexpr int64_t kOC = 16;    // output channels whose M is computed before their output transform
constexpr int kMaxNV = 6;      // tiles per block: 8 NV, NV <= 6 (plan_blocks)
constexpr int64_t kTransformBytes = int64_t{4} << 20;  // the weight gradient's V and Z per pass

// ---- the three transforms, on 8 lanes at once --------------------------------------------

// r[0..5] = G a for the 3-vector a (each entry 8 lanes).
inline void g_times(const v8f& a0, const v8f& a1, const v8f& a2, v8f* r) {
  const v8f s = a0 + a2;
  r[0] = a0 * 0.25f;
  r[1] = (s + a1) * (-1.0f / 6.0f);
  r[2] = (s - a1) * (-1.0f / 6.0f);
  const v8f p = a0 * (1.0f / 24.0f) + a2 * (1.0f / 6.0f), q = a1 * (1.0f / 12.0f);
  r[3] = p + q;
  r[4] = p - q;
  r[5] = a2;
}

// t[0..5] = B^T d for the 6-vector d.
inline void bt_times(const v8f* d, v8f* t) {
  t[0] = d[0] * 4.0f - d[2] * 5.0f + d[4];
  const v8f a = d[4] - d[2] * 4.0f, b = d[3] - d[1] * 4.0f;
  t[1] = a + b;
  t[2] = a - b;
  const v8f c = d[4] - d[2], e = (d[3] - d[1]) * 2.0f;
  t[3] = c + e;
  t[4] = c - e;
  t[5] = d[1] * 4.0f - d[3] * 5.0f + d[5];
}

// y[0..3] = A^T m for the 6-vector m.
inline void at_times(const v8f* m, v8f* y) {
  const v8f s12 = m[1] + m[2], d12 = m[1] - m[2], s34 = m[3] + m[4], d34 = m[3] - m[4];
  y[0] = m[0] + s12 + s34;
  y[1] = d12 + d34 * 2.0f;
  y[2] = s12 + s34 * 4.0f;
  y[3] = d12 + d34 * 8.0f + m[5];
}

// z[0..5] = A g for the 4-vector g (A = (A^T)^T, 6 x 4): the adjoint of at_times.
inline void a_times(const v8f* g, v8f* z) {
  const v8f p = g[0] + g[2], q = g[1] + g[3], r = g[0] + g[2] * 4.0f, s = g[1] * 2.0f + g[3] * 8.0f;
  z[0] = g[0];
  z[1] = p + q;
  z[2] = p - q;
  z[3] = r + s;
  z[4] = r - s;
  z[5] = g[3];
}

// o[0..2] = G^T m for the 6-vector m: the adjoint of g_times.
inline void gt_times(const v8f* m, v8f* o) {
  const v8f s12 = m[1] + m[2], d12 = m[2] - m[1], s34 = m[3] + m[4], d34 = m[3] - m[4];
  o[0] = m[0] * 0.25f - s12 * (1.0f / 6.0f) + s34 * (1.0f / 24.0f);
  o[1] = d12 * (1.0f / 6.0f) + d34 * (1.0f / 12.0f);
  o[2] = (s34 - s12) * (1.0f / 6.0f) + m[5];
}

// Columns 0..5 of the 8x8 matrix whose rows are v[0..7]: d[j][q] = v[q][j] (unpack, shuffle
// and 128-bit permute steps, 22 shuffles in all).
inline void transpose_8x6(const v8f* v, v8f* d) {
  const v8f t0 = unpack_lo(v[0], v[1]), t1 = unpack_hi(v[0], v[1]);
  const v8f t2 = unpack_lo(v[2], v[3]), t3 = unpack_hi(v[2], v[3]);
  const v8f t4 = unpack_lo(v[4], v[5]), t5 = unpack_hi(v[4], v[5]);
  const v8f t6 = unpack_lo(v[6], v[7]), t7 = unpack_hi(v[6], v[7]);
  const v8f s0 = pairs02(t0, t2), s1 = pairs13(t0, t2);
  const v8f s2 = pairs02(t1, t3), s3 = pairs13(t1, t3);
  const v8f s4 = pairs02(t4, t6), s5 = pairs13(t4, t6);
  const v8f s6 = pairs02(t5, t7), s7 = pairs13(t5, t7);
  d[0] = halves02(s0, s4);
  d[1] = halves02(s1, s5);
  d[2] = halves02(s2, s6);
  d[3] = halves02(s3, s7);
  d[4] = halves13(s0, s4);
  d[5] = halves13(s1, s5);
}

// The inverse direction for 4 columns: r[k] holds lane q = k's row (y[0..3][q]) in its low
// half and lane q = k + 4's in its high half.
inline void transpose_4x8(const v8f* y, v8f* r) {
  const v8f a = unpack_lo(y[0], y[1]), b = unpack_hi(y[0], y[1]);
  const v8f c = unpack_lo(y[2], y[3]), d = unpack_hi(y[2], y[3]);
  r[0] = pairs02(a, c);
  r[1] = pairs13(a, c);
  r[2] = pairs02(b, d);
  r[3] = pairs13(b, d);
}

// ---- the problem -------------------------------------------------------------------------

// One stride-1 3x3 convolution: input planes [N, Cin, Hin, Win] padded by (pt, pl) on the
// top/left (and implicitly enough on the bottom/right) into [N, Cout, Hout, Wout].
struct Problem {
  const float* x;
  float* y;
  const float* bias;  // [Cout] or null
  int64_t N, Cin, Hin, Win, Cout, Hout, Wout, groups, pt, pl;
  int64_t Cg, Og, OB;  // per group: input channels, output channels, blocks of kMR outputs
  int64_t TH, TW, Hp, Wp;
  // Where kernel g[oo][ci] (output oo, input ci of group gi) lives in w: gi * group_stride +
  // oo * s_out + ci * s_in, its 9 taps row-major, or reversed when flip (backward input).
  const float* w;
  int64_t group_stride, s_out, s_in;
  bool flip;

  Problem(const float* x_, float* y_, const float* bias_, int64_t N_, int64_t Cin_, int64_t Hin_, int64_t Win_,
          int64_t Cout_, int64_t Hout_, int64_t Wout_, int64_t groups_, int64_t pt_, int64_t pl_)
      : x(x_), y(y_), bias(bias_), N(N_), Cin(Cin_), Hin(Hin_), Win(Win_), Cout(Cout_), Hout(Hout_), Wout(Wout_),
        groups(groups_), pt(pt_), pl(pl_), Cg(Cin_ / groups_), Og(Cout_ / groups_), OB((Cout_ / groups_ + kMR - 1) / kMR),
        TH((Hout_ + 3) / 4), TW((Wout_ + 3) / 4), Hp(4 * TH + 2), Wp(4 * TW + 4), w(nullptr), group_stride(0), s_out(0),
        s_in(0), flip(false) {}
  // U is [group][output block][xi][Cg][kMR], each xi's panel a cache line more than Cg kMR
  // floats apart (the weight transform writes all 36 of them at once).
  int64_t u_xi() const { return Cg * kMR + 16; }
  int64_t u_size() const { return groups * OB * kXi * u_xi(); }
  int64_t u_panel(int64_t gi, int64_t xi, int64_t ob) const { return ((gi * OB + ob) * kXi + xi) * u_xi(); }
};

// U for the (group, output block) pairs [i0, i1), 8 input channels at a time: for each of the
// block's kMR outputs, the 8 kernels (each 9 contiguous taps, wherever w keeps them) are loaded
// as rows of 8 taps and transposed so the lanes are the channels (the ninth tap gathered
// alone), G g G^T is applied in registers, and each frequency's kMR vectors are interleaved
// into U's [channel][kMR] order with two shuffles per 8 floats. (The lanes were once (2
// channels x 4 outputs) filled tap by tap with scalar loads: a third of a one-image 128 ->
// 128 forward pass on one thread.)
TRIDENT_CPU_CLONES void winograd_weights(const Problem& p, float* U, int64_t i0, int64_t i1) {
  static_assert(kMR == 4, "the interleave below writes 4 outputs per channel");
  for (int64_t item = i0; item < i1; ++item) {
    const int64_t gi = item / p.OB, ob = item % p.OB;
    for (int64_t c0 = 0; c0 < p.Cg; c0 += 8) {
      const int64_t nc = std::min<int64_t>(8, p.Cg - c0);
      v8f u[kMR][kXi];  // u[r][xi]: output ob kMR + r, lanes = channels c0 + lane
      for (int r = 0; r < kMR; ++r) {
        const int64_t oo = ob * kMR + r;
        v8f rows[8], taps[8];
        alignas(32) float last[8] = {};
        for (int l = 0; l < 8; ++l) {
          if (oo >= p.Og || l >= nc) {  // padding lanes
            rows[l] = v8f{};
            continue;
          }
          const float* src = p.w + gi * p.group_stride + oo * p.s_out + (c0 + l) * p.s_in;
          rows[l] = load8(src);
          last[l] = src[8];
        }
        transpose_8x8(rows, taps);
        v8f g[9];  // g[k]: tap k of the kernels, rotated by 180 degrees when flip
        for (int k = 0; k < 9; ++k) {
          const int t = p.flip ? 8 - k : k;
          g[k] = t == 8 ? load8(last) : taps[t];
        }
        v8f a[3][6];  // a[q] = G (column q of g)
        for (int q = 0; q < 3; ++q) g_times(g[q], g[3 + q], g[6 + q], a[q]);
        for (int i = 0; i < 6; ++i) g_times(a[0][i], a[1][i], a[2][i], u[r] + i * 6);  // row i of (G g) G^T
      }
      for (int xi = 0; xi < kXi; ++xi) {
        v8f t[4];  // t[k]: channel k's kMR outputs in the low half, channel k + 4's in the high
        const v8f y[kMR] = {u[0][xi], u[1][xi], u[2][xi], u[3][xi]};
        transpose_4x8(y, t);
        float* dst = U + p.u_panel(gi, xi, ob) + c0 * kMR;
        alignas(32) float tmp[32];
        float* to = nc == 8 ? dst : tmp;  // the panel's last channels: write only theirs
        store8(to, halves02(t[0], t[1]));
        store8(to + 8, halves02(t[2], t[3]));
        store8(to + 16, halves13(t[0], t[1]));
        store8(to + 24, halves13(t[2], t[3]));
        if (nc < 8) std::memcpy(dst, tmp, sizeof(float) * static_cast<size_t>(nc * kMR));
      }
    }
  }
}

// dst[q] = plane q of src ([planes, H, W]) placed at (pt, pl) in a zeroed Hp x Wp plane
// (cropped where it does not fit).
void pad_planes(const float* src, int64_t planes, int64_t H, int64_t W, int64_t pt, int64_t pl, int64_t Hp, int64_t Wp,
                float* dst) {
  parallel_for(0, planes, std::max<int64_t>(1, 16384 / (Hp * Wp)), [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      for (int64_t r = 0; r < Hp; ++r) {
        float* row = dst + (q * Hp + r) * Wp;
        const int64_t h = r - pt;
        if (h < 0 || h >= H) {
          std::fill_n(row, Wp, 0.0f);
          continue;
        }
        const int64_t lead = std::min(pl, Wp), n = std::clamp<int64_t>(Wp - pl, 0, W);
        std::fill_n(row, lead, 0.0f);
        std::copy_n(src + (q * H + h) * W, n, row + lead);
        std::fill(row + lead + n, row + Wp, 0.0f);
      }
    }
  });
}

// V[xi][c][8 g + lane] (frequency xi v_stride floats apart, channel c ld apart) = B^T d B for
// channels [0, channels) of `planes` (plane_stride apart, rows Wp apart) and groups8 groups of
// 8 tiles, tile q's 6x6 window starting at off[q]. Per channel and group: each tile's 6 rows
// as 8-float vectors, transposed so the lanes are the tiles, B^T applied along the rows, then
// along the columns.
inline void transform_inputs(const float* planes, int64_t plane_stride, int64_t Wp, int64_t channels, const int64_t* off,
                             int groups8, float* V, int64_t v_stride, int64_t ld) {
  for (int64_t c = 0; c < channels; ++c) {
    const float* plane = planes + c * plane_stride;
    for (int g8 = 0; g8 < groups8; ++g8) {
      v8f e[6][6];  // e[r] = (row r of d) B
      for (int r = 0; r < 6; ++r) {
        v8f v[8], d[6];
        for (int q = 0; q < 8; ++q) v[q] = load8(plane + off[g8 * 8 + q] + r * Wp);
        transpose_8x6(v, d);
        bt_times(d, e[r]);
      }
      for (int l = 0; l < 6; ++l) {
        v8f col[6], t[6];
        for (int r = 0; r < 6; ++r) col[r] = e[r][l];
        bt_times(col, t);
        for (int k = 0; k < 6; ++k) store8(V + (k * 6 + l) * v_stride + c * ld + 8 * g8, t[k]);
      }
    }
  }
}

// The work of one chunk of images: its padded input, its tiles in blocks, items.
struct Chunk {
  const Problem* p;
  const float* U;
  const float* xp;  // [nb, Cin, Hp, Wp]
  int64_t n0, nb, T;
  int nv;               // 8-tile groups per block
  int64_t blocks, orr;  // tile blocks; output-channel ranges per (block, group)
  int64_t items() const { return blocks * p->groups * orr; }
};

// Per-thread scratch: V [36][Cg][8 nv], M [36][kOC][8 nv] (each frequency v_stride, m_stride
// floats apart), and the tiles of the current block.
struct Scratch {
  float* V = nullptr;
  float* M = nullptr;
  int64_t v_stride = 0, m_stride = 0;  // floats between frequencies
  int64_t block = -1, group = -1;
  int64_t in_off[8 * kMaxNV], out_off[8 * kMaxNV];
  int rows[8 * kMaxNV], cols[8 * kMaxNV];
};

// Outputs [o0, o1) of group gi for the current block, kOC at a time.
template <int NV>
inline void block_outputs(const Chunk& ch, Scratch& s, int64_t gi, int64_t ob0, int64_t ob1) {
  const Problem& p = *ch.p;
  constexpr int NR = 8 * NV;
  const int64_t out_plane = p.Hout * p.Wout;
  for (int64_t oc0 = ob0; oc0 < ob1; oc0 += kOC / kMR) {
    const int64_t oc1 = std::min(ob1, oc0 + kOC / kMR);
    for (int xi = 0; xi < kXi; ++xi)
      gemm_rows<NV, false>(
          oc0, oc1, s.V + xi * s.v_stride, p.Cg, [&](int64_t ob) { return ch.U + p.u_panel(gi, xi, ob); },
          [&](int64_t ob) { return s.M + xi * s.m_stride + (ob - oc0) * kMR * NR; });
    const int64_t o_end = std::min(p.Og, oc1 * kMR);
    for (int64_t o = oc0 * kMR; o < o_end; ++o) {
      const int64_t ol = o - oc0 * kMR, oc = gi * p.Og + o;
      const v8f b = splat(p.bias ? p.bias[oc] : 0.0f);
      float* yo = p.y + oc * out_plane;
      for (int g8 = 0; g8 < NV; ++g8) {
        v8f sA[4][6];  // A^T M, column by column
        for (int l = 0; l < 6; ++l) {
          v8f m[6], t[4];
          for (int k = 0; k < 6; ++k) m[k] = load8(s.M + (k * 6 + l) * s.m_stride + ol * NR + 8 * g8);
          at_times(m, t);
          for (int i = 0; i < 4; ++i) sA[i][l] = t[i];
        }
        for (int i = 0; i < 4; ++i) {
          v8f yv[4], r[4];
          at_times(sA[i], yv);
          for (int j = 0; j < 4; ++j) yv[j] += b;
          transpose_4x8(yv, r);
          alignas(32) float rows[4][8];
          for (int k = 0; k < 4; ++k) store8(rows[k], r[k]);
          for (int q = 0; q < 8; ++q) {
            const int tq = g8 * 8 + q;
            if (i >= s.rows[tq]) continue;
            const float* src = rows[q % 4] + 4 * (q / 4);
            float* dst = yo + s.out_off[tq] + i * p.Wout;
            if (s.cols[tq] == 4) {
              std::memcpy(dst, src, 4 * sizeof(float));
            } else {
              for (int j = 0; j < s.cols[tq]; ++j) dst[j] = src[j];
            }
          }
        }
      }
    }
  }
}

// V for every input channel of group gi and the tiles of the current block.
template <int NV>
inline void block_inputs(const Chunk& ch, Scratch& s, int64_t gi) {
  const Problem& p = *ch.p;
  const int64_t HWp = p.Hp * p.Wp;
  transform_inputs(ch.xp + gi * p.Cg * HWp, HWp, p.Wp, p.Cg, s.in_off, NV, s.V, s.v_stride, 8 * NV);
}

// The tiles of block blk: where each one's input and outputs lie (and how much of it is inside
// the output), then V for group gi when it is not already there.
template <int NV>
inline void enter_block(const Chunk& ch, Scratch& s, int64_t blk, int64_t gi) {
  const Problem& p = *ch.p;
  constexpr int NR = 8 * NV;
  const int64_t tiles_per_image = p.TH * p.TW;
  if (blk != s.block) {
    for (int q = 0; q < NR; ++q) {
      const int64_t t = blk * NR + q;
      if (t >= ch.T) {  // past the last tile: read tile 0, write nothing
        s.in_off[q] = 0;
        s.out_off[q] = 0;
        s.rows[q] = s.cols[q] = 0;
        continue;
      }
      const int64_t i = t / tiles_per_image, th = (t % tiles_per_image) / p.TW, tw = t % p.TW;
      s.in_off[q] = (i * p.Cin * p.Hp + 4 * th) * p.Wp + 4 * tw;
      s.out_off[q] = ((ch.n0 + i) * p.Cout * p.Hout + 4 * th) * p.Wout + 4 * tw;
      s.rows[q] = static_cast<int>(std::min<int64_t>(4, p.Hout - 4 * th));
      s.cols[q] = static_cast<int>(std::min<int64_t>(4, p.Wout - 4 * tw));
    }
    s.block = blk;
    s.group = -1;
  }
  if (gi != s.group) {
    block_inputs<NV>(ch, s, gi);
    s.group = gi;
  }
}

template <int NV>
inline void chunk_items(const Chunk& ch, Scratch& s, int64_t i0, int64_t i1) {
  const Problem& p = *ch.p;
  for (int64_t item = i0; item < i1; ++item) {
    const int64_t orr = item % ch.orr, gi = (item / ch.orr) % p.groups, blk = item / (ch.orr * p.groups);
    enter_block<NV>(ch, s, blk, gi);
    const int64_t ob0 = p.OB * orr / ch.orr, ob1 = p.OB * (orr + 1) / ch.orr;
    block_outputs<NV>(ch, s, gi, ob0, ob1);
  }
}

// Every block of the chunk, for the (group, output block) pairs [u0, u1) only (run_owned).
template <int NV>
inline void owned_items(const Chunk& ch, Scratch& s, int64_t u0, int64_t u1) {
  const Problem& p = *ch.p;
  for (int64_t blk = 0; blk < ch.blocks; ++blk) {
    for (int64_t gi = u0 / p.OB; gi * p.OB < u1; ++gi) {
      enter_block<NV>(ch, s, blk, gi);
      block_outputs<NV>(ch, s, gi, std::max<int64_t>(0, u0 - gi * p.OB), std::min<int64_t>(p.OB, u1 - gi * p.OB));
    }
  }
}

// Items [i0, i1) of the chunk; or, when `owned`, every block for the pairs [i0, i1).
TRIDENT_CPU_CLONES void winograd_items(const Chunk& ch, Scratch& s, int64_t i0, int64_t i1, bool owned) {
  switch (ch.nv) {
    case 1: return owned ? owned_items<1>(ch, s, i0, i1) : chunk_items<1>(ch, s, i0, i1);
    case 2: return owned ? owned_items<2>(ch, s, i0, i1) : chunk_items<2>(ch, s, i0, i1);
    case 4: return owned ? owned_items<4>(ch, s, i0, i1) : chunk_items<4>(ch, s, i0, i1);
    case 6: return owned ? owned_items<6>(ch, s, i0, i1) : chunk_items<6>(ch, s, i0, i1);
    default: return owned ? owned_items<3>(ch, s, i0, i1) : chunk_items<3>(ch, s, i0, i1);
  }
}

// Blocks of 8 nv tiles: the nv whose busiest thread has the fewest tiles to go through,
// counting narrower kernels as slower per tile (they reload the U panel more often per
// multiply-add). nv in {3, 2, 1} for the AVX2 micro-kernel; {6, 4, 2} for the AVX-512 one
// (whole 16-lane vectors; NOTE [AVX-512 micro-kernel]).
void plan_blocks(Chunk& ch, int threads) {
  const bool wide = widest_nv() == 6;
  const int candidates[2][3] = {{3, 2, 1}, {6, 4, 2}};
  const double costs[2][3] = {{1.0, 1.05, 1.25}, {1.0, 1.02, 1.1}};
  double best = 0;
  for (int c = 0; c < 3; ++c) {
    const int nv = candidates[wide][c];
    const int64_t blocks = (ch.T + 8 * nv - 1) / (8 * nv);
    const int64_t units = blocks * ch.p->groups;
    const double rounds = static_cast<double>((units + threads - 1) / threads);
    const double cost = rounds * 8.0 * nv * costs[wide][c];
    if (c == 0 || cost < best) {
      best = cost;
      ch.nv = nv;
      ch.blocks = blocks;
    }
  }
  // Too few (block, group) units to keep every thread busy for long: split the outputs.
  ch.orr = 1;
  while (ch.blocks * ch.p->groups * ch.orr < 4 * threads && ch.orr * 2 <= ch.p->OB) ch.orr *= 2;
}

// Per-thread scratch for a block of NR tiles: V and M, each frequency's panel a cache line more
// than its size apart (the 36 frequencies of a tile go to 36 places at once; panels of 4 KiB
// multiples would all map to one L1 set and evict each other).
Scratch scratch_in(float* ws, const Problem& p, int64_t NR) {
  Scratch s;
  s.v_stride = p.Cg * NR + 16;
  s.m_stride = kOC * NR + 16;
  s.V = ws;
  s.M = s.V + kXi * s.v_stride;
  return s;
}
int64_t scratch_floats(const Problem& p, int64_t NR) { return kXi * (p.Cg * NR + 16 + kOC * NR + 16); }

// NOTE [Winograd work by owner]: with at most two blocks of tiles (one or two small images) the
// three-phase form below splits the output channels into ranges so that every thread has work,
// and each thread then reads all of U, half of it written by the other thread moments before,
// and rewrites its own half on the next call while the other still holds it in its cache: cache
// lines crossing between cores by the megabyte. On the development VMs the host moves the two
// vCPUs between cores of one chiplet and cores of different ones: a cache line's round trip
// between the two threads measured 52-68 ns or 330-520 ns, switching within a second, while
// one thread's speed stayed put. In the slow placements a one-image 128 -> 128 28x28 forward
// pass on two threads took 1.5-1.7 ms against 0.65 in the fast ones (one thread: 1.1 ms
// throughout). So such passes run as one region in which each thread owns a range of (group,
// output block) pairs: it transforms their weights, pads its own copy of the input (the
// buffers are slices of one allocation made before the region, so each thread gets the same
// memory call after call) and computes every tile block of them. Nothing one thread writes is
// read by another; each thread pads and transforms the whole input, a few percent of the work.
// The two forms alternated every 0.1 s inside one process (two threads, 15-20 s): 1x128x28x28
// -> 128 new/old time 0.74 by the median slot (0.63 ms against 0.65 at best, 1.06 against 1.55
// by the median), 2x128x28x28 0.85; 8x256x14x14 (four blocks) 0.95 by the median slot but 1.07
// at best (4.56 ms against 4.28: the duplicated transforms cost more than the shared reads
// there), hence the limit of two blocks.
bool run_owned(const Problem& p, int threads) {
  const int64_t image_floats = p.Cin * p.Hp * p.Wp;
  // Every thread pads the whole input: not for many threads, nor past the copy budget.
  if (threads < 2 || threads > 8 || p.N * image_floats * static_cast<int64_t>(sizeof(float)) > conv_copy_budget_bytes() / threads)
    return false;
  Chunk ch{&p, nullptr, nullptr, 0, p.N, p.N * p.TH * p.TW, 3, 0, 1};
  if (ch.T > 16 * widest_nv()) return false;  // more than two of the widest blocks
  plan_blocks(ch, threads);
  const int64_t units = p.groups * p.OB;
  if (ch.orr == 1 || units < 2 * threads) return false;
  plan_blocks(ch, 1);  // every thread computes every block: the fewest padded tiles
  // Each thread's buffers are its slice of one allocation made here, so that it gets the same
  // memory call after call (buffers allocated on the threads would trade places between them
  // in the caching allocator as the threads race to it).
  const int64_t NR = 8 * ch.nv, mine_floats = (p.N * image_floats + scratch_floats(p, NR) + 15) / 16 * 16;
  Tensor u = empty({p.u_size()}), bufs = empty({threads * mine_floats});
  float* U = u.data<float>();
  ch.U = U;
  parallel_for(0, threads, 1, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      float* xp = bufs.data<float>() + k * mine_floats;
      Scratch s = scratch_in(xp + p.N * image_floats, p, NR);
      pad_planes(p.x, p.N * p.Cin, p.Hin, p.Win, p.pt, p.pl, p.Hp, p.Wp, xp);  // in a region: serial
      Chunk mine = ch;
      mine.xp = xp;
      const int64_t u0 = units * k / threads, u1 = units * (k + 1) / threads;
      winograd_weights(p, U, u0, u1);
      winograd_items(mine, s, u0, u1, true);
    }
  });
  return true;
}

void run(const Problem& p) {
  const int threads = get_num_threads();
  if (run_owned(p, threads)) return;
  Tensor u = empty({p.u_size()});
  float* U = u.data<float>();
  parallel_for(0, p.groups * p.OB, std::max<int64_t>(1, 2048 / (p.Cg * kMR)),
               [&](int64_t i0, int64_t i1) { winograd_weights(p, U, i0, i1); });
  const int64_t image_floats = p.Cin * p.Hp * p.Wp;
  const int64_t chunk = std::clamp<int64_t>(conv_copy_budget_bytes() / static_cast<int64_t>(sizeof(float) * image_floats), 1, p.N);
  Tensor xpad = empty({std::min(chunk, p.N) * image_floats});
  for (int64_t n0 = 0; n0 < p.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, p.N - n0);
    pad_planes(p.x + n0 * p.Cin * p.Hin * p.Win, nb * p.Cin, p.Hin, p.Win, p.pt, p.pl, p.Hp, p.Wp, xpad.data<float>());
    Chunk ch{&p, U, xpad.data<float>(), n0, nb, nb * p.TH * p.TW, 3, 0, 1};
    plan_blocks(ch, threads);
    const int64_t NR = 8 * ch.nv;
    parallel_for(0, ch.items(), 1, [&](int64_t i0, int64_t i1) {
      Tensor ws = empty({scratch_floats(p, NR)});
      Scratch s = scratch_in(ws.data<float>(), p, NR);
      winograd_items(ch, s, i0, i1, false);
    });
  }
}

// ---- weight gradient ----------------------------------------------------------------------
// The forward pass is linear in U = G g G^T through M = sum_c U_c (.) V_c, so for an output
// gradient gy: d U_c = sum over tiles of Z (.) V_c with Z = A gy_tile A^T (the 4x4 output
// gradient of the tile, zero past the output's edge), and d g = G^T (d U) G. Per frequency
// that is dU[xi] (O x C) = Z[xi] (O x tiles) @ V[xi]^T (tiles x C): 36 GEMMs through cpu::gemm
// with the tiles as the long inner dimension.

// Z[xi][o][8 g + lane] = A gy A^T for channels [0, channels) of the padded gradient planes
// (rows Wg apart) and groups8 groups of 8 tiles at off[q].
inline void transform_grads(const float* planes, int64_t plane_stride, int64_t Wg, int64_t channels, const int64_t* off,
                            int groups8, float* Z, int64_t z_stride, int64_t ld) {
  for (int64_t o = 0; o < channels; ++o) {
    const float* plane = planes + o * plane_stride;
    for (int g8 = 0; g8 < groups8; ++g8) {
      v8f e[4][6];  // e[i] = A (row i of gy)
      for (int i = 0; i < 4; ++i) {
        v8f v[8], d[6];
        for (int q = 0; q < 8; ++q) v[q] = load8(plane + off[g8 * 8 + q] + i * Wg);
        transpose_8x6(v, d);
        a_times(d, e[i]);
      }
      for (int l = 0; l < 6; ++l) {
        v8f col[4], z[6];
        for (int i = 0; i < 4; ++i) col[i] = e[i][l];
        a_times(col, z);
        for (int k = 0; k < 6; ++k) store8(Z + (k * 6 + l) * z_stride + o * ld + 8 * g8, z[k]);
      }
    }
  }
}

struct WgradChunk {
  const Problem* p;
  const float* xp;  // [nb, C, Hp, Wp]
  const float* gp;  // [nb, O, Hg, Wg]
  int64_t Hg, Wg, t0, T;  // tiles [t0, t0 + T) of the images in xp and gp
  float *V, *Z;       // [C][36][.], [O][36][.]
  int64_t xs, cs;      // floats between frequencies, between channels
};

// V and Z for the groups of 8 tiles [g0, g1) of a chunk, channel by channel: the groups'
// windows lie side by side in each plane, so the loads stream through it.
TRIDENT_CPU_CLONES void winograd_wgrad_transforms(const WgradChunk& ch, int64_t g0, int64_t g1) {
  const Problem& p = *ch.p;
  const int64_t tiles_per_image = p.TH * p.TW;
  std::vector<int64_t> in_off(static_cast<size_t>(8 * (g1 - g0))), gy_off(in_off.size());
  for (int64_t q = 0; q < 8 * (g1 - g0); ++q) {
    const int64_t t = ch.t0 + std::min(g0 * 8 + q, ch.T - 1);  // lanes past the end repeat the last tile
    const int64_t i = t / tiles_per_image, th = (t % tiles_per_image) / p.TW, tw = t % p.TW;
    in_off[static_cast<size_t>(q)] = (i * p.Cin * p.Hp + 4 * th) * p.Wp + 4 * tw;
    gy_off[static_cast<size_t>(q)] = (i * p.Cout * ch.Hg + 4 * th) * ch.Wg + 4 * tw;
  }
  const int groups8 = static_cast<int>(g1 - g0);
  transform_inputs(ch.xp, p.Hp * p.Wp, p.Wp, p.Cin, in_off.data(), groups8, ch.V + g0 * 8, ch.xs, ch.cs);
  transform_grads(ch.gp, ch.Hg * ch.Wg, ch.Wg, p.Cout, gy_off.data(), groups8, ch.Z + g0 * 8, ch.xs, ch.cs);
}

// gw[gi Og + o][c][3x3] = G^T dU G for the (group, output) pairs [i0, i1), 8 input channels at
// a time (lanes = channels); dU[gi][o][xi][c] with frequencies du_xi floats apart.
TRIDENT_CPU_CLONES void winograd_wgrad_finish(const Problem& p, const float* dU, int64_t du_xi, float* gw, int64_t i0, int64_t i1) {
  for (int64_t item = i0; item < i1; ++item) {
    const int64_t gi = item / p.Og, o = item % p.Og;
    for (int64_t c0 = 0; c0 < p.Cg; c0 += 8) {
      const int64_t n = std::min<int64_t>(8, p.Cg - c0);
      v8f h[6][3];  // h[k] = G^T (row k of dU)
      for (int k = 0; k < 6; ++k) {
        v8f m[6];
        for (int l = 0; l < 6; ++l) {
          const float* src = dU + ((gi * p.Og + o) * kXi + k * 6 + l) * du_xi + c0;
          if (n == 8) {
            m[l] = load8(src);
          } else {
            alignas(32) float tmp[8] = {};
            for (int64_t e = 0; e < n; ++e) tmp[e] = src[e];
            m[l] = load8(tmp);
          }
        }
        gt_times(m, h[k]);
      }
      alignas(32) float out[9][8];
      for (int b = 0; b < 3; ++b) {
        v8f col[6], r[3];
        for (int k = 0; k < 6; ++k) col[k] = h[k][b];
        gt_times(col, r);
        for (int a = 0; a < 3; ++a) store8(out[a * 3 + b], r[a]);
      }
      float* dst = gw + ((gi * p.Og + o) * p.Cg + c0) * 9;
      for (int64_t c = 0; c < n; ++c)
        for (int t = 0; t < 9; ++t) dst[c * 9 + t] = out[t][c];
    }
  }
}

// F(4x4, 3x3) computes 36 products per 4x4 tile: worth it while that is at most half the
// direct method's 9 per output, edge tiles included, and with enough channels that the GEMMs
// dominate the transforms.
bool worth_it(int64_t Cg, int64_t Og, int64_t OH, int64_t OW) {
  if (Cg < 8 || Og < 8 || OH < 1 || OW < 1) return false;
  const double tiles = static_cast<double>((OH + 3) / 4) * static_cast<double>((OW + 3) / 4);
  return 36.0 * tiles <= 0.5 * 9.0 * static_cast<double>(OH) * static_cast<double>(OW);
}

bool winograd_shape(const Conv2dGeometry& g) {
  return g.kH == 3 && g.kW == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && !g.depthwise();
}

}  // namespace

bool winograd_forward_applies(const Conv2dGeometry& g) {
  return winograd_shape(g) && worth_it(g.in_per_group(), g.out_per_group(), g.OH, g.OW);
}

bool winograd_backward_input_applies(const Conv2dGeometry& g) {
  // gx = gy (*) w' with padding 2 - p: its "input channels" are O / groups, "outputs" C / groups.
  return winograd_shape(g) && g.ph <= 2 && g.pw <= 2 && worth_it(g.out_per_group(), g.in_per_group(), g.H, g.W);
}

void winograd_forward(const float* x, const float* w, const float* bias, float* y, const Conv2dGeometry& g) {
  Problem p(x, y, bias, g.N, g.C, g.H, g.W, g.O, g.OH, g.OW, g.groups, g.ph, g.pw);
  // w [O, C/g, 3, 3]: output oo of group gi is row gi Og + oo.
  p.w = w;
  p.group_stride = p.Og * p.Cg * 9;
  p.s_out = p.Cg * 9;
  p.s_in = 9;
  run(p);
}

void winograd_backward_weight(const float* gy, const float* x, float* gw, const Conv2dGeometry& g) {
  Problem p(x, nullptr, nullptr, g.N, g.C, g.H, g.W, g.O, g.OH, g.OW, g.groups, g.ph, g.pw);
  // The gradient planes padded with zeros to whole tiles, plus 4 columns for the 8-float loads.
  const int64_t Hg = 4 * p.TH, Wg = 4 * p.TW + 4, tiles_per_image = p.TH * p.TW;
  const int64_t image_floats = p.Cin * p.Hp * p.Wp + p.Cout * Hg * Wg;
  const int64_t chunk = std::clamp<int64_t>(conv_copy_budget_bytes() / static_cast<int64_t>(sizeof(float) * image_floats), 1, p.N);
  const int64_t nb_max = std::min(chunk, p.N);
  // The tiles of a chunk of images go through the GEMMs ld at a time, so that their V and Z
  // (36 (C + O) ld floats, about kTransformBytes) stay in cache between the transforms and the
  // GEMMs. Layout [channel][xi][ld]: a tile's 36 frequencies of one channel go to one
  // compact region (few pages), each frequency a line more than ld floats apart so they
  // do not share an L1 set.
  const int64_t budget = kTransformBytes / static_cast<int64_t>(sizeof(float) * kXi * (p.Cin + p.Cout));
  const int64_t ld = std::min(std::clamp<int64_t>(budget / 8 * 8, 32, 512), (nb_max * tiles_per_image + 7) / 8 * 8);
  const int64_t xs = ld + 16, cs = kXi * xs;
  Tensor ws = empty({nb_max * image_floats + (p.Cin + p.Cout) * cs});
  // dU [group][output][xi][Cg], frequencies a line more than Cg floats apart: G^T dU G reads
  // all 36 of an output at once.
  const int64_t du_xi = p.Cg + 16;
  Tensor du = empty({p.groups * p.Og * kXi * du_xi});
  float* xp = ws.data<float>();
  float* gp = xp + nb_max * p.Cin * p.Hp * p.Wp;
  float* V = gp + nb_max * p.Cout * Hg * Wg;
  float* Z = V + p.Cin * cs;
  float* dU = du.data<float>();
  bool first = true;
  for (int64_t n0 = 0; n0 < p.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, p.N - n0);
    pad_planes(x + n0 * p.Cin * p.Hin * p.Win, nb * p.Cin, p.Hin, p.Win, p.pt, p.pl, p.Hp, p.Wp, xp);
    pad_planes(gy + n0 * p.Cout * p.Hout * p.Wout, nb * p.Cout, p.Hout, p.Wout, 0, 0, Hg, Wg, gp);
    for (int64_t t0 = 0; t0 < nb * tiles_per_image; t0 += ld) {
      WgradChunk ch{&p, xp, gp, Hg, Wg, t0, std::min(ld, nb * tiles_per_image - t0), V, Z, xs, cs};
      parallel_for(0, (ch.T + 7) / 8, 1, [&](int64_t g0, int64_t g1) { winograd_wgrad_transforms(ch, g0, g1); });
      // dU[gi][xi] (+)= Z[xi] (group rows) @ V[xi]^T (group rows), one GEMM per thread at a
      // time; the inner dimension is the tile count exactly (lanes past it are not read).
      const float beta = first ? 0.0f : 1.0f;
      parallel_for(0, p.groups * kXi, 1, [&](int64_t i0, int64_t i1) {
        for (int64_t it = i0; it < i1; ++it) {
          const int64_t gi = it / kXi, xi = it % kXi;
          gemm<float>(false, true, p.Og, p.Cg, ch.T, 1.0f, Z + xi * xs + gi * p.Og * cs, cs, V + xi * xs + gi * p.Cg * cs, cs, beta,
                      dU + (gi * p.Og * kXi + xi) * du_xi, kXi * du_xi);
        }
      });
      first = false;
    }
  }
  parallel_for(0, p.groups * p.Og, std::max<int64_t>(1, 256 / p.Cg),
               [&](int64_t i0, int64_t i1) { winograd_wgrad_finish(p, dU, du_xi, gw, i0, i1); });
}

void winograd_backward_input(const float* gy, const float* w, float* gx, const Conv2dGeometry& g) {
  Problem p(gy, gx, nullptr, g.N, g.O, g.OH, g.OW, g.C, g.H, g.W, g.groups, 2 - g.ph, 2 - g.pw);
  // w'[c][o] = w[o][c] rotated: "output" c of group gi reads w[gi Og_f + o][c], flipped.
  p.w = w;
  p.group_stride = g.out_per_group() * g.in_per_group() * 9;
  p.s_out = 9;
  p.s_in = g.in_per_group() * 9;
  p.flip = true;
  run(p);
}

}  // namespace trident::cpu
