// Blocked im2col convolution for f32 (NOTE [Conv2d algorithms] in ops/cpu/conv.cpp).
//
// NOTE [Conv2d blocked im2col]: every input plane is copied once into zero-padded planes
// split by stride phase, as for the depthwise kernels (NOTE [Depthwise planes]): then tap
// (kh, kw) of output j = oh Wq + ow (outputs numbered at the phase planes' pitch Wq) reads
// element j + off[tap] of the channel's phase buffer, a fixed offset. Threads take work
// items, a block of 24 consecutive outputs j of one image and group (and a range of its
// output channels when there are fewer than 4 blocks per thread): the item copies its im2col
// tile, the 24 inputs each (channel, tap) row reads (three vector copies per row, K = C/g kH
// kW rows), and runs the register-blocked micro-kernel of ops/cpu/conv_simd.h over it for
// every block of 4 output channels, against the weights packed once per call as [group]
// [block of 4][K][4]; K goes in slices of 256 rows (24 KiB of tile, in L1 while every output
// block uses it), the blocks' sums accumulating in a small buffer. The results go to the
// output with the bias, skipping the Wq - OW columns per row that fall between output rows
// (computed and dropped: the price of a fixed offset per tap, (kW - 1) dw / Wq of the work;
// a 1 x k kernel runs on transposed planes instead, where it has none: see
// transpose_if_row_kernel). Unlike im2col of whole images followed by a BLAS GEMM, nothing of
// size K x OH OW is written to memory and read back, and there is no packing beyond the tile
// itself. Measured single-threaded (CPU time, min of 3) on 8x128x28x28 -> 128 (2-core Zen 3)
// against the im2col + OpenBLAS path: 7x1 forward 19 ms instead of 24, 1x7 forward 23.6
// instead of 24 and forward + backward 60 instead of 73 (the weight gradient still im2col);
// the micro-kernel alone runs at 48 GMAC/s, in here at about 40.
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

constexpr int kNV = 3, kNR = 8 * kNV;  // outputs per block
constexpr int64_t kKc = 256;  // tile rows per slice: 24 KiB

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

  Problem(const float* x_, float* y_, const float* bias_, int64_t N_, int64_t Cin_, int64_t H_, int64_t W_, int64_t Cout_,
          int64_t OH_, int64_t OW_, int64_t kH_, int64_t kW_, int64_t sh_, int64_t sw_, int64_t ph_, int64_t pw_, int64_t dh_,
          int64_t dw_, int64_t groups_)
      : x(x_), y(y_), bias(bias_), N(N_), Cin(Cin_), H(H_), W(W_), Cout(Cout_), OH(OH_), OW(OW_), kH(kH_), kW(kW_), sh(sh_),
        sw(sw_), ph(ph_), pw(pw_), dh(dh_), dw(dw_), groups(groups_) {}

  // Derived: channels per group, 4-output blocks, taps, K = Cg taps; the phase planes (Hq x Wq
  // each, sh sw of them per channel, then kNR zeros of slack: Lc floats per channel); the
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
    Lc = sh * sw * plane + kNR;
    flat = (OH - 1) * Wq + OW;
    blocks = (flat + kNR - 1) / kNR;
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

// The phase planes of images [n0, n0 + nb): channel q's phase (a, b) row i holds padded row
// i sh + a, columns j sw + b. Each channel's buffer is zeroed right before its rows are
// copied in, while it is in cache.
void split_phases(const Problem& p, int64_t n0, int64_t nb, float* buf) {
  parallel_for(0, nb * p.Cin, std::max<int64_t>(1, 16384 / (p.H * p.W)), [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      const float* src = p.x + (n0 * p.Cin + q) * p.H * p.W;
      float* dst = buf + q * p.Lc;
      std::fill_n(dst, p.Lc, 0.0f);
      if (p.transposed) {  // stride 1: x's row h is the problem's column h
        for (int64_t h = 0; h < p.W; ++h)
          for (int64_t w = 0; w < p.H; ++w) dst[(w + p.ph) * p.Wq + h + p.pw] = src[h * p.H + w];
        continue;
      }
      for (int64_t h = 0; h < p.H; ++h) {
        const int64_t r = h + p.ph;
        for (int64_t b = 0; b < p.sw; ++b) {
          const int64_t w0 = ((b - p.pw) % p.sw + p.sw) % p.sw;  // first w with (w + pw) % sw == b
          if (w0 >= p.W) continue;
          float* d = dst + ((r % p.sh) * p.sw + b) * p.plane + (r / p.sh) * p.Wq + (w0 + p.pw) / p.sw;
          const float* s = src + h * p.W + w0;
          const int64_t n = (p.W - w0 + p.sw - 1) / p.sw;
          if (p.sw == 1) {
            std::memcpy(d, s, static_cast<size_t>(n) * sizeof(float));
          } else if (p.sw == 2) {  // a constant stride: vectorized with shuffles
            for (int64_t i = 0; i < n; ++i) d[i] = s[2 * i];
          } else {
            for (int64_t i = 0; i < n; ++i) d[i] = s[i * p.sw];
          }
        }
      }
    }
  });
}

struct Chunk {
  const Problem* p;
  const float* Wp;
  const float* phases;  // [nb, Cin, Lc]
  int64_t n0, nb, orr;  // images; output-channel ranges per block
  int64_t items() const { return nb * p->groups * p->blocks * orr; }
};

// The outputs of the block of kNR starting at j0, in runs of one output row: lanes [lane,
// lane + len) are outputs out, out + step, ... of the image plane (step 1, or OH' when the
// problem is transposed: the plane's column).
struct Runs {
  int64_t lane[kNR], len[kNR], out[kNR];
  int count = 0;
  void find(const Problem& p, int64_t j0) {
    count = 0;
    for (int64_t l = 0; l < kNR && j0 + l < p.flat;) {
      const int64_t j = j0 + l, oh = j / p.Wq, ow = j % p.Wq;
      if (ow >= p.OW) {
        l += p.Wq - ow;
        continue;
      }
      const int64_t n = std::min(p.OW - ow, std::min<int64_t>(kNR - l, p.flat - j));
      lane[count] = l;
      len[count] = n;
      out[count] = p.transposed ? ow * p.OH + oh : oh * p.OW + ow;
      ++count;
      l += n;
    }
  }
};

// Items [i0, i1) of a chunk; tile is K x kNR floats, out OB x 4 x kNR.
TRIDENT_CPU_CLONES void blocked_items(const Chunk& ch, float* tile, float* out, int64_t i0, int64_t i1) {
  const Problem& p = *ch.p;
  const int64_t* off = p.off.data();
  int64_t loaded = -1;
  for (int64_t item = i0; item < i1; ++item) {
    const int64_t unit = item / ch.orr, orr = item % ch.orr;  // unit = (image, group, block)
    const int64_t jb = unit % p.blocks, gi = (unit / p.blocks) % p.groups, i = unit / (p.blocks * p.groups);
    const int64_t j0 = jb * kNR;
    if (unit != loaded) {
      const float* base = ch.phases + (i * p.Cin + gi * p.Cg) * p.Lc + j0;
      float* dst = tile;
      for (int64_t c = 0; c < p.Cg; ++c, base += p.Lc)
        for (int64_t t = 0; t < p.taps; ++t, dst += kNR)
          for (int v = 0; v < kNV; ++v) store8(dst + 8 * v, load8(base + off[t] + 8 * v));
      loaded = unit;
    }
    Runs rn;
    rn.find(p, j0);
    const int runs = rn.count;
    const int64_t *run_lane = rn.lane, *run_len = rn.len, *run_out = rn.out;
    const int64_t ob0 = p.OB * orr / ch.orr, ob1 = p.OB * (orr + 1) / ch.orr;
    const int64_t out_plane = p.OH * p.OW;
    // K in slices of kKc tile rows, so the slice stays in L1 while every output block uses it.
    for (int64_t k0 = 0; k0 < p.K; k0 += kKc) {
      const int64_t kn = std::min(kKc, p.K - k0);
      for (int64_t ob = ob0; ob < ob1; ++ob) {
        const float* up = ch.Wp + ((gi * p.OB + ob) * p.K + k0) * kMR;
        float* mp = out + (ob - ob0) * kMR * kNR;
        if (k0 == 0) {
          gemm_kernel<kNV, false>(up, tile + k0 * kNR, kn, mp);
        } else {
          gemm_kernel<kNV, true>(up, tile + k0 * kNR, kn, mp);
        }
      }
    }
    for (int64_t ob = ob0; ob < ob1; ++ob) {
      const float* ob_out = out + (ob - ob0) * kMR * kNR;
      for (int r = 0; r < kMR; ++r) {
        const int64_t o = ob * kMR + r;
        if (o >= p.Og) break;
        const int64_t oc = gi * p.Og + o;
        const float b = p.bias ? p.bias[oc] : 0.0f;
        float* yo = p.y + ((ch.n0 + i) * p.Cout + oc) * out_plane;
        for (int k = 0; k < runs; ++k) {
          const float* s = ob_out + r * kNR + run_lane[k];
          float* d = yo + run_out[k];
          if (!p.transposed) {
            for (int64_t e = 0; e < run_len[k]; ++e) d[e] = s[e] + b;
          } else {
            for (int64_t e = 0; e < run_len[k]; ++e) d[e * p.OH] = s[e] + b;
          }
        }
      }
    }
  }
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

void run(Problem& p) {
  transpose_if_row_kernel(p);
  p.derive();
  const int threads = get_num_threads();
  Tensor wp = empty({p.groups * p.OB * p.K * kMR});
  pack_weights(p, wp.data<float>());
  const int64_t chunk = std::clamp<int64_t>(conv_copy_budget_bytes() / static_cast<int64_t>(sizeof(float) * p.Cin * p.Lc), 1, p.N);
  Tensor phases = empty({std::min(chunk, p.N) * p.Cin * p.Lc});
  for (int64_t n0 = 0; n0 < p.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, p.N - n0);
    split_phases(p, n0, nb, phases.data<float>());
    Chunk ch{&p, wp.data<float>(), phases.data<float>(), n0, nb, 1};
    // Too few blocks to keep every thread busy for long: split the output channels too.
    while (nb * p.groups * p.blocks * ch.orr < 4 * threads && ch.orr * 2 <= p.OB) ch.orr *= 2;
    parallel_for(0, ch.items(), 1, [&](int64_t i0, int64_t i1) {
      Tensor ws = empty({p.K * kNR + p.OB * kMR * kNR});
      blocked_items(ch, ws.data<float>(), ws.data<float>() + p.K * kNR, i0, i1);
    });
  }
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

TRIDENT_CPU_CLONES void blocked_wgrad_items(const WgradChunk& ch, float* tileT, float* gyP, float* dW, int64_t i0, int64_t i1) {
  const Problem& p = *ch.p;
  const int64_t* off = p.off.data();
  const int64_t out_plane = p.OH * p.OW, step = p.transposed ? p.OH : 1;
  constexpr int64_t kLanes = kWgradBlocks * kNR;  // buffer pitch: the longest item
  for (int64_t item = i0; item < i1; ++item) {
    const int64_t run = item % ch.runs, gi = (item / ch.runs) % p.groups, i = item / (ch.runs * p.groups);
    const int64_t b0 = run * kWgradBlocks, nblk = std::min(kWgradBlocks, p.blocks - b0), L = nblk * kNR;
    const int64_t j0 = b0 * kNR;
    // gy: gyP[ob][lane][r] = gy[ob 4 + r][output at lane], lanes of the item's blocks in order.
    std::fill_n(gyP, p.OB * kLanes * kMR, 0.0f);
    const float* gimg = ch.gy + ((ch.n0 + i) * p.Cout + gi * p.Og) * out_plane;
    for (int64_t bk = 0; bk < nblk; ++bk) {
      Runs rn;
      rn.find(p, j0 + bk * kNR);
      for (int64_t o = 0; o < p.Og; ++o) {
        float* dst = gyP + (o / kMR) * kLanes * kMR + bk * kNR * kMR + o % kMR;
        const float* src = gimg + o * out_plane;
        for (int k = 0; k < rn.count; ++k)
          for (int64_t e = 0; e < rn.len[k]; ++e) dst[(rn.lane[k] + e) * kMR] = src[rn.out[k] + e * step];
      }
    }
    // The tile transposed, 8 rows at a time through 8x8 transposes (the rows of a tile block
    // of 24 start at multiples of 8), the last K % 8 rows one by one.
    const float* base = ch.phases + (i * p.Cin + gi * p.Cg) * p.Lc + j0;
    const float* rows[8];
    int64_t k = 0;
    for (int64_t c = 0; c < p.Cg; ++c, base += p.Lc)
      for (int64_t t = 0; t < p.taps; ++t, ++k) {
        rows[k % 8] = base + off[t];
        if (k % 8 != 7) continue;
        float* dst = tileT + (k / kNR) * kLanes * kNR + (k - 7) % kNR;
        for (int64_t l0 = 0; l0 < L; l0 += 8) {
          v8f v[8], d[8];
          for (int q = 0; q < 8; ++q) v[q] = load8(rows[q] + l0);
          transpose_8x8(v, d);
          for (int l = 0; l < 8; ++l) store8(dst + (l0 + l) * kNR, d[l]);
        }
      }
    for (int64_t kt = k - k % 8; kt < k; ++kt) {
      float* dst = tileT + (kt / kNR) * kLanes * kNR + kt % kNR;
      for (int64_t l = 0; l < L; ++l) dst[l * kNR] = rows[kt % 8][l];
    }
    for (int64_t kb = 0; kb < ch.KB; ++kb)
      for (int64_t ob = 0; ob < p.OB; ++ob)
        gemm_kernel<kNV, true>(gyP + ob * kLanes * kMR, tileT + kb * kLanes * kNR, L,
                               dW + ((gi * p.OB + ob) * ch.KB + kb) * kMR * kNR);
  }
}

void run_wgrad(Problem& p, const float* gy, float* gw) {
  transpose_if_row_kernel(p);
  p.derive();
  const int64_t KB = (p.K + kNR - 1) / kNR, dw_size = p.groups * p.OB * KB * kMR * kNR;
  const int64_t runs = (p.blocks + kWgradBlocks - 1) / kWgradBlocks, lanes = kWgradBlocks * kNR;
  Tensor total = zeros({dw_size}, kF32);
  float* tot = total.data<float>();
  const int64_t chunk = std::clamp<int64_t>(conv_copy_budget_bytes() / static_cast<int64_t>(sizeof(float) * p.Cin * p.Lc), 1, p.N);
  Tensor phases = empty({std::min(chunk, p.N) * p.Cin * p.Lc});
  for (int64_t n0 = 0; n0 < p.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, p.N - n0);
    split_phases(p, n0, nb, phases.data<float>());
    const WgradChunk ch{&p, phases.data<float>(), gy, n0, KB, runs};
    std::mutex mu;
    std::vector<std::pair<int64_t, Tensor>> partials;
    parallel_for(0, nb * p.groups * runs, 1, [&](int64_t i0, int64_t i1) {
      Tensor ws = zeros({KB * kNR * lanes + p.OB * lanes * kMR + dw_size}, kF32);  // tile rows past K stay zero
      float* tileT = ws.data<float>();
      blocked_wgrad_items(ch, tileT, tileT + KB * kNR * lanes, tileT + KB * kNR * lanes + p.OB * lanes * kMR, i0, i1);
      std::lock_guard<std::mutex> lock(mu);
      partials.emplace_back(i0, ws);
    });
    // The threads' sums in the order of their first item, so the result does not depend on
    // thread timing.
    std::sort(partials.begin(), partials.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [first, ws] : partials) {
      const float* part = ws.template data<float>() + KB * kNR * lanes + p.OB * lanes * kMR;
      for (int64_t e = 0; e < dw_size; ++e) tot[e] += part[e];
    }
  }
  // gw[gi Og + o][k] from the [group][output block][k / 24][4][24] layout.
  parallel_for(0, p.groups * p.Og, std::max<int64_t>(1, 4096 / p.K), [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      const int64_t gi = row / p.Og, o = row % p.Og, ob = o / kMR, r = o % kMR;
      for (int64_t k = 0; k < p.K; ++k) gw[row * p.K + k] = tot[(((gi * p.OB + ob) * KB + k / kNR) * kMR + r) * kNR + k % kNR];
    }
  });
}

}  // namespace

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
