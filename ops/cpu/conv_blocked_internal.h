// The machinery the blocked im2col kernels (ops/cpu/conv_blocked.cpp, NOTE [Conv2d blocked
// im2col]) share with Winograd F(2, 7) (ops/cpu/conv_winograd7.cpp, NOTE [Conv2d Winograd
// F(2,7)]), which runs inside their blocks, threads and phase planes: the problem's geometry,
// the phase split, the runs of a block's lanes, and the chunk drivers. Internal to those two
// files.
#pragma once

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/conv.h"
#include "ops/cpu/conv_simd.h"

namespace trident::cpu::blocked {

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

// The phase planes of images [n0, n0 + nb) of p.x, one channel after another (p.Lc floats each).
void split_phases(const Problem& p, int64_t n0, int64_t nb, float* buf);

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

// dst[c][r] = src[r][c] for planes [rows, cols] -> [cols, rows], on the threads, whole planes each.
void transpose_planes_parallel(const float* src, float* dst, int64_t planes, int64_t rows, int64_t cols);

// A 1 x k stride-1 problem becomes the k x 1 problem on transposed planes (p.transposed),
// which computes no padded columns (ops/cpu/conv_blocked.cpp says why).
void transpose_if_row_kernel(Problem& p);

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

// Blocks of nr outputs per weight-gradient work item (NOTE [Conv2d blocked im2col], "weight
// gradient").
constexpr int64_t kWgradBlocks = 4;

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

// Winograd F(2, 7) (ops/cpu/conv_winograd7.cpp): whether it takes the derived problem p (a 7 x 1
// kernel after transpose_if_row_kernel), its forward pass (or input gradient, p flipped) into
// p.y, and its weight gradient from gy into gw.
bool winograd7_applies(const Problem& p);
void run_winograd7(const Problem& p);
void run_winograd7_wgrad(const Problem& p, const float* gy, float* gw);

}  // namespace trident::cpu::blocked
