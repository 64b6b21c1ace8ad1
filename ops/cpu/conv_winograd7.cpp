// Winograd F(2, 7) for f32 1x7 and 7x1 convolutions, inside the blocked im2col path's blocks
// and threads (NOTE [Conv2d algorithms] in ops/cpu/conv.cpp; the shared machinery in
// ops/cpu/conv_blocked_internal.h).
#include <algorithm>
#include <utility>

#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/conv_blocked.h"
#include "ops/cpu/conv_blocked_internal.h"
#include "ops/cpu/conv_simd.h"
#include "ops/cpu/isa.h"

namespace trident::cpu {
namespace blocked {
namespace {

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

// t[0..7] = B^T d for the 8-vector d (of vectors of 8 or 16 lanes).
template <typename Vec>
inline void bt7_times(const Vec* d, Vec* t) {
  t[0] = (d[0] - d[6]) * 4.0f + (d[4] - d[2]) * 21.0f;
  t[7] = (d[7] - d[1]) * 4.0f + (d[3] - d[5]) * 21.0f;
  const Vec a = d[4] * 17.0f - (d[2] + d[6]) * 4.0f, b = d[3] * 17.0f - (d[1] + d[5]) * 4.0f;
  t[1] = a + b;
  t[2] = a - b;
  const Vec c = d[2] - d[4] * 5.0f + d[6] * 4.0f, e = d[1] * 2.0f - d[3] * 10.0f + d[5] * 8.0f;
  t[3] = c + e;
  t[4] = c - e;
  const Vec f = d[2] * 8.0f - d[4] * 10.0f + d[6] * 2.0f, h = d[1] * 4.0f - d[3] * 5.0f + d[5];
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

// Items [i0, i1): V is kW7Xi x slice_rows(nr) x nr floats, M kW7Xi x OB x kMR x nr (nr = 8 NV),
// the transforms on vectors of 8 lanes (Vec = v8f) or 16 (v16f, AVX-512 CPUs: NV = 6, a block
// of 48 lanes is 3 vectors; its outputs go from the registers to their rows through
// store_lanes, where a copy out of a buffer took a memcpy call per run, 5% of a 1x7 forward).
template <int NV, typename Vec>
inline void winograd7_items_nv(const W7Chunk& ch, float* V, float* M, int64_t i0, int64_t i1) {
  constexpr int NR = 8 * NV, L = kLanes<Vec>, NVEC = NR / L;
  static_assert(NR % L == 0, "a block is whole vectors");
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
    int64_t off[8];  // local: the stores into V (memcpy) could alias w7.off, reloaded every time
    std::copy_n(w7.off, 8, off);
    for (int64_t c0 = 0; c0 < p.Cg; c0 += kc) {
      const int64_t cn = std::min(kc, p.Cg - c0);
      for (int64_t c = 0; c < cn; ++c) {
        const float* src = base + (c0 + c) * q.Lc;
        for (int v = 0; v < NVEC; ++v) {
          Vec d[8], t[8];
          for (int e = 0; e < 8; ++e) d[e] = vload<Vec>(src + off[e] + L * v);
          bt7_times(d, t);
          for (int xi = 0; xi < kW7Xi; ++xi) vstore(V + xi * v_stride + c * NR + L * v, t[xi]);
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
        const Vec b = vsplat<Vec>(p.bias ? p.bias[oc] : 0.0f);
        Vec y0[NVEC], y1[NVEC];
        for (int v = 0; v < NVEC; ++v) {
          Vec m[8];
          for (int xi = 0; xi < kW7Xi; ++xi) m[xi] = vload<Vec>(M + xi * m_stride + ((ob - ob0) * kMR + r) * NR + L * v);
          y0[v] = m[0] + m[1] + m[2] + m[3] + m[4] + m[5] + m[6] + b;
          y1[v] = (m[1] - m[2]) + (m[3] - m[4]) * 2.0f + (m[5] - m[6]) * 0.5f + m[7] + b;
        }
        float* yo = ch.y + (i * p.Cout + oc) * out_plane;
        for (int k = 0; k < rn.count; ++k) {
          const int64_t oh = 2 * rn.row[k];
          float* d0 = yo + oh * p.OW + rn.col[k];
          store_lanes(d0, y0, rn.lane[k], rn.len[k]);
          if (oh + 1 < p.OH) store_lanes(d0 + p.OW, y1, rn.lane[k], rn.len[k]);
        }
      }
  }
}

TRIDENT_CPU_CLONES void winograd7_items(const W7Chunk& ch, float* V, float* M, int64_t i0, int64_t i1) {
  if (ch.p->nr == 48) return winograd7_items_nv<6, v8f>(ch, V, M, i0, i1);
  winograd7_items_nv<3, v8f>(ch, V, M, i0, i1);
}

#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
// The 16-lane form, for AVX-512 CPUs (their blocks are always 48 wide: conv_simd::widest_nv).
TRIDENT_CPU_AVX512 void winograd7_items_avx512(const W7Chunk& ch, float* V, float* M, int64_t i0, int64_t i1) {
  winograd7_items_nv<6, v16f>(ch, V, M, i0, i1);
}
#endif

// winograd7_items in the widest form the CPU runs.
void winograd7_items_best(const W7Chunk& ch, float* V, float* M, int64_t i0, int64_t i1) {
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
  if (ch.p->nr == 48 && cpu_avx512_kernels()) return winograd7_items_avx512(ch, V, M, i0, i1);
#endif
  winograd7_items(ch, V, M, i0, i1);
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

}  // namespace

bool winograd7_applies(const Problem& p) {
  return g_winograd7_enabled && p.kH == 7 && p.kW == 1 && p.sh == 1 && p.sw == 1 && p.dh == 1 && p.dw == 1 &&
         p.Cin / p.groups >= 8 && p.Cout / p.groups >= 8 && p.OH >= 2;
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
      winograd7_items_best(ch, ws.data<float>(), ws.data<float>() + v, i0, i1);
    });
  });
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

}  // namespace blocked

using namespace blocked;

bool set_conv_winograd7_enabled_for_testing(bool enabled) { return std::exchange(g_winograd7_enabled, enabled); }

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

}  // namespace trident::cpu
