#include "ops/cpu/conv.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/copy.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/bgemm_amx.h"
#include "ops/cpu/blas.h"
#include "ops/cpu/conv_amx.h"
#include "ops/cpu/conv_blocked.h"
#include "ops/cpu/conv_depthwise.h"
#include "ops/cpu/conv_direct.h"
#include "ops/cpu/conv_narrow.h"
#include "ops/cpu/conv_winograd.h"
#include "ops/cpu/isa.h"

namespace trident::cpu {

// NOTE [Conv2d algorithms]
// Chosen per pass from the geometry and dtype (conv2d_forward / _backward_input /
// _backward_weight below); f64 (the gradchecks' dtype) always takes the exact paths, the
// depthwise kernels or im2col + GEMM.
// - Depthwise (groups == C, one input channel per group, O = C x multiplier): each output
//   plane is a weighted sum of kH x kW shifted copies of one input plane. im2col would build a
//   [kH kW, OH OW] matrix per channel only to multiply it by a 1 x kH kW row; the direct loops
//   of ops/cpu/conv_depthwise.cpp (NOTE [Depthwise planes]) instead make every tap a fixed
//   offset into a padded, stride-phase-split copy of the input plane. The f32 forward keeps a
//   block of 4 x 16 or 8 x 8 outputs in registers through all the taps and reuses each loaded
//   input vector for every output row of the block (NOTE [Depthwise register blocks]); f64
//   and the gradients apply a kernel row's taps in one vectorized pass over the whole plane.
//   Threads take whole planes (the weight gradient: whole channels).
// - f32 3x3, stride 1, dilation 1, at least 8 input and output channels per group and an
//   output large enough (at least about 3x3): Winograd F(4x4, 3x3) for the forward pass, the
//   weight gradient and, when the padding is at most 2, the input gradient (NOTE [Conv2d
//   Winograd] in ops/cpu/conv_winograd.cpp): 4x fewer multiply-adds than the direct sum. Its
//   f32 error is bounded by the transforms' growth rather than by the plain dot-product bound;
//   the note says how, and tests/ops/conv_test.cpp checks that bound on every output.
//   Measured on a 2-core AMD EPYC (Zen 3), single thread, against the im2col + OpenBLAS path
//   it replaces: 8x64x56x56->64 forward 10 ms instead of 25, forward + backward 32 instead
//   of 70.
// - f32 7x1 and 1x7 (AmoebaNet's factorized 7x7), stride 1, dilation 1, at least 8 input and
//   output channels per group: Winograd F(2, 7) along the kernel for the forward pass, the
//   input gradient (NOTE [Conv2d Winograd F(2,7)] in ops/cpu/conv_winograd7.cpp, which runs it
//   inside the blocked path below), and its adjoint for the weight gradient: 1.75x fewer
//   multiply-adds, about 2x the direct kernel's rounding error.
// - Pointwise (1x1, stride 1, no padding): the input of sample n, group g *is* its im2col
//   matrix [C/g, H W], so forward and both backward passes are one GEMM each, no copies.
// - On CPUs with the AVX-512 micro-kernel, the other f32 passes of column stride 1 or 2 whose
//   channels fill the vector lanes (forward and weight gradient: a multiple of 16 output
//   channels per group; input gradient: of input channels): direct loops with 16 channels in
//   each vector's lanes and every output pixel broadcasting its input value from the NCHW
//   input where it lies (NOTE [Conv2d direct] in ops/cpu/conv_direct.cpp), so a stride costs
//   nothing and no phase split or tile is copied. 3x3 stride 2, 8x64x56x56->128 on an Emerald
//   Rapids Xeon, one thread: 6.6-6.7 ms instead of 8.2-8.3 by the blocked kernels (alternating
//   runs). The weight gradient puts the output channels in the lanes against gy transposed
//   once (NOTE [Conv2d direct weight gradient]), when there are at least 2 (group, input
//   channel, block of 48 output channels) items per thread: forward + backward of that
//   convolution 36.4 ms instead of 42.1 with the forward pass and weight gradient direct (one
//   thread, best of 5 alternating rounds, a busier minute than the forward's figures). The
//   input gradient is the forward kernel run on gy, one stride phase of the input's columns at
//   a time (NOTE [Conv2d direct input gradient]); for the convolution above 12.5 ms instead of
//   15.1 by im2col + GEMM + col2im on one thread, 6.4-6.5 against 6.2-6.4 on two (best of 40
//   alternating rounds, three runs). Column stride 1: the note has the figures (1.0x to 1.3x
//   the blocked kernels).
// - Other f32 forward passes and weight gradients, and input gradients of other stride-1
//   convolutions (a forward convolution of gy with the flipped kernel): blocked im2col (NOTE
//   [Conv2d blocked im2col] in ops/cpu/conv_blocked.cpp), a 24-output im2col tile at a time
//   kept in cache and multiplied by the register-blocked micro-kernel of ops/cpu/conv_simd.h,
//   so the im2col matrix never goes through memory.
//   Where OpenBLAS runs AVX-512 kernels the blocked kernels step aside for im2col + GEMM, which
//   is faster there, except under F(2, 7) (NOTE [Blocked or GEMM] in ops/cpu/conv_blocked.h).
// - Everything else (f64; f32 pointwise; f32 input gradients of strided convolutions the
//   direct kernel does not take): im2col
//   into a [C/g kH kW, OH OW] matrix per (sample, group) unit
//   and GEMM with the [O/g, C/g kH kW] weight; backward input is the transposed GEMM then
//   col2im (the adjoint scatter), backward weight is gy @ col^T accumulated over the batch.
//   Both copy each input plane into a zero-padded buffer first, so their loops need no bounds
//   checks.
// GEMMs run in the tensor's type (f32 or f64), so f32 accumulates in f32 like every BLAS-based
// convolution (PyTorch's and cuDNN's included); sums over the batch in the weight gradient
// accumulate in f32 through GEMM's beta = 1 (Winograd's too). The gradients that sum N OH OW
// terms without a GEMM accumulate in f64 so that long batches do not drift: the depthwise
// weight gradient adds per-plane f32 sums into f64, the bias gradient sums in f64 directly.
//
// NOTE [bf16 convolutions]
// bf16 passes (autocast's convolutions on the CPU) run on the bf16 GEMM kernels where the CPU has
// one chosen (NOTE [AMX bf16 GEMM]), never through an f32 copy:
// - with AMX and one group, the direct kernels of ops/cpu/conv_amx.cpp (NOTE [AMX direct
//   convolution]): no im2col matrix; the input planes, laid out once per pass as the tiles read
//   them, are loaded at each tap's offset (stride-phase planes for strided convolutions); the
//   input gradient is the same kernel on gy (a strided one by phases of gx);
// - otherwise (groups, the VDPBF16PS kernel): im2col in bf16 (a
//   pointwise convolution's input of one sample is its own column matrix, several are gathered
//   side by side) and gemm_bf16 into f32 sums, in chunks of images within the copy budget; the
//   input gradient's col2im adds in f32; the weight gradient adds each chunk's product in f32.
// Every result is rounded to bf16 once, as the f32 route rounds it: products of bf16 values are
// exact in f32 either way, so the routes differ only in the order of the f32 sums (and in AMX's
// flushing of subnormals). The bias gradient sums the bf16 values in f64 without a copy.
// f16, and non-depthwise bf16 passes on CPUs with neither kernel, convert to f32, compute there
// and round once. On the AMX Xeon (2 threads, bench_cpu_ops, TRIDENT_CPU_BF16_GEMM=off against
// auto, alternating): 3x3 8x256x14x14 -> 256 forward 3.97 -> 1.32 ms, forward + backward 15.2 ->
// 5.8; 3x3 8x64x56x56 -> 64 16.7 -> 5.8; 3x3 stride 2 8x64x56x56 -> 128 12.6 -> 6.8; 1x7
// 14.5 -> 4.7; 1x1 32x128x30x30 -> 64 9.5 -> 4.3. The im2col route on AMX had reached 2.6,
// 11.1, 23.1, 10.5, 9.4 and 6.5 ms on those (a busier hour): it copied each input twice (im2col,
// then gemm_bf16's packing of B) and the 3x3 input gradient's f32 col2im alone was 16% of its
// time.
//
// NOTE [bf16 depthwise convolutions]: bf16 depthwise passes (any CPU) run the f32 depthwise
// kernels a plane at a time, each input plane widened into an f32 plane of the thread's and
// each output plane rounded from one (NOTE [bf16 depthwise planes] in ops/cpu/conv_depthwise.cpp):
// the same f32 arithmetic as converting whole tensors first, so the same bits. The weight
// gradient's f64 sums round to f32 and then to bf16, as the f32 route rounds them and then its
// result. Whole-tensor conversions in chunks of images (the route before) cost AmoebaNet-B(6,
// 32)'s 30 x 30 maps 1.6-1.9x the f32 passes' time in the step, and an earlier form reading bf16
// inside the kernels (widened as a plane was laid out, rounded as a 16-lane block was stored)
// had lost to them on small maps.
//
// NOTE [Conv2d threads]
// All parallelism is OpenMP's (NOTE [Threads]): cpu::gemm splits a large GEMM into panels
// across the threads and runs a GEMM called inside a parallel region on its own thread.
// - Winograd and blocked im2col split each pass into work items, a block of tiles (Winograd:
//   8, 16 or 24 4x4 tiles, numbered across the images) or of 24 outputs (blocked im2col) with
//   all its output channels, and hand threads contiguous ranges of items; each thread
//   transforms or copies its block's input once and keeps it in its cache. When there are
//   fewer than 4 items per thread (batch 1, small maps) the output channels of each block are
//   split into ranges as well, each range's thread redoing the block's input side. The
//   Winograd weight gradient alternates two parallel loops per few hundred tiles: the
//   transforms (threads take tiles) and the 36 frequencies' GEMMs (threads take frequencies).
// - The direct kernel (NOTE [Conv2d direct]) hands threads contiguous ranges of output rows
//   (image, group, range of output channels whose weights fit in L2, row; the input gradient's
//   rows the same with input channels), and its weight gradient (group, input channel, block
//   of output channels) items that each go through every image.
// - The im2col + GEMM paths choose between:
//   - "parallel units": (sample, group) units on parallel_for threads, each with its own
//     im2col workspace and one GEMM on its thread, when each GEMM is small (m n k <= 65536 x
//     4: too little work to split) or there are at least as many units as threads;
//   - otherwise "chunks": samples go in chunks whose buffers fit a 32 MiB workspace, each
//     chunk in phases: im2col of the whole chunk in parallel, then its GEMMs (each split
//     across the threads), then col2im (or the copy to the output) in parallel. The chunk's
//     im2col matrices are "batched": its samples sit side by side in each row, so each group
//     needs one wide GEMM per chunk ([O/g, K] x [K, nb OH OW]) instead of nb narrow ones, and
//     the result is copied from its [O, nb, OH OW] layout into the output (a copy O / K the
//     size of the im2col);
//   - pointwise convolutions need no im2col, so outside the parallel-units case they run one
//     GEMM per sample and group straight on the tensors, back to back. (Copying them into
//     batched columns for wider GEMMs, measured single-threaded, won on one of five shapes, a
//     512-channel 7x7 layer, and lost on the other four.)
// The direct depthwise kernels make no BLAS calls and always parallelize over planes.

namespace {

constexpr double kSmallGemmMnk = 65536.0 * 4.0;

bool parallel_over_units(int64_t units, int64_t m, int64_t n, int64_t k) {
  const int threads = get_num_threads();
  if (threads <= 1 || units <= 1) return false;
  const double mnk = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (mnk <= kSmallGemmMnk) return true;
  // Larger GEMMs are split across the threads by cpu::gemm itself (NOTE [Threads]); running
  // units in parallel still wins when there are enough of them to share out evenly.
  return units >= threads;
}

// Units per parallel_for chunk in the parallel-units schedule: enough multiply-adds (about
// 2^18) that a thread's share outweighs waking it.
int64_t unit_grain(int64_t m, int64_t n, int64_t k) {
  const double mnk = std::max(1.0, static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k));
  return std::max<int64_t>(1, static_cast<int64_t>(262144.0 / mnk));
}

// A scratch buffer from the CPU allocator (so it shows in memory statistics), uninitialized.
template <typename T>
Tensor workspace(int64_t n) {
  return empty({std::max<int64_t>(n, 1)}, dtype_of<T>);
}

// ---- im2col and its adjoint --------------------------------------------------------------

// Where im2col puts the row of tap t of plane q (planes numbered from the first plane of the
// call, q = i C + c for sample i, channel c). Per unit: rows one after another,
// [planes kH kW, P]. Batched (NOTE [Conv2d threads]): the nb samples of a chunk side by side in
// every row, so row (c, t) is [sample 0's P columns | sample 1's | ...] with pitch nb P, and
// group g's rows c in [g C/g, (g + 1) C/g) form one [K, nb P] matrix.
struct ColLayout {
  int64_t khw, P, nb = 1, C = 1;
  bool batched = false;
  int64_t offset(int64_t q, int64_t t) const {
    if (!batched) return (q * khw + t) * P;
    return ((q % C) * khw + t) * (nb * P) + (q / C) * P;
  }
};

ColLayout unit_layout(const Conv2dGeometry& g) { return {g.kH * g.kW, g.OH * g.OW}; }
ColLayout batched_layout(const Conv2dGeometry& g, int64_t nb) { return {g.kH * g.kW, g.OH * g.OW, nb, g.C, true}; }

// A thread's zero-padded copy of one input plane ((H + 2 ph) x (W + 2 pw)), so that the
// im2col copies and col2im sums below need no bounds checks. Without padding the plane is
// used in place.
template <typename T>
struct PaddedPlane {
  const Conv2dGeometry& g;
  int64_t Wp;
  std::vector<T> buf;  // its border is written by nobody, so it stays zero
  explicit PaddedPlane(const Conv2dGeometry& geo)
      : g(geo), Wp(geo.W + 2 * geo.pw), buf(geo.ph || geo.pw ? static_cast<size_t>((geo.H + 2 * geo.ph) * Wp) : 0, T(0)) {}
  bool padded() const { return !buf.empty(); }
  const T* load(const T* x) {
    if (!padded()) return x;
    for (int64_t h = 0; h < g.H; ++h) std::copy_n(x + h * g.W, g.W, buf.data() + (h + g.ph) * Wp + g.pw);
    return buf.data();
  }
};

// col[(c, kh, kw), (oh, ow)] = x[c, oh sh + kh dh - ph, ow sw + kw dw - pw], 0 in the padding,
// for `planes` planes of H x W starting at x, placed by `layout`.
template <typename T>
void im2col(const T* x, int64_t planes, const Conv2dGeometry& g, const ColLayout& layout, T* col, bool parallel) {
  const int64_t khw = g.kH * g.kW, P = g.OH * g.OW;
  auto body = [&](int64_t q0, int64_t q1) {
    PaddedPlane<T> pad(g);
    const int64_t Wp = pad.padded() ? pad.Wp : g.W;
    for (int64_t q = q0; q < q1; ++q) {
      const T* src = pad.load(x + q * g.H * g.W);
      for (int64_t t = 0; t < khw; ++t) {
        const T* base = src + (t / g.kW) * g.dh * Wp + (t % g.kW) * g.dw;
        T* dst = col + layout.offset(q, t);
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          const T* s = base + oh * g.sh * Wp;
          T* d = dst + oh * g.OW;
          if (g.sw == 1) {
            std::copy_n(s, g.OW, d);
          } else {
            for (int64_t ow = 0; ow < g.OW; ++ow) d[ow] = s[ow * g.sw];
          }
        }
      }
    }
  };
  if (parallel) {
    parallel_for(0, planes, std::max<int64_t>(1, 16384 / (khw * P)), body);
  } else {
    body(0, planes);
  }
}

// x[c, ih, iw] = sum of col[(c, kh, kw), (oh, ow)] over the taps that read (ih, iw): the
// adjoint of im2col (same layout), so backward input = col2im(W^T gy). Overwrites the planes.
// With a stride the sums go into the plane split by stride phase (NOTE [Depthwise planes] in
// ops/cpu/conv_depthwise.cpp), where each tap's rows are contiguous runs (vectorized adds, not
// one scattered element every sw), and the phases are interleaved into x at the end: 3x3
// stride 2's col2im took 6.5% of its forward + backward with the scattered adds.
template <typename T>
void col2im_phases(const T* col, const Conv2dGeometry& g, const ColLayout& layout, T* x, int64_t q0, int64_t q1) {
  const int64_t khw = g.kH * g.kW, HW = g.H * g.W;
  const int64_t Hq = (g.H + 2 * g.ph + g.sh - 1) / g.sh, Wq = (g.W + 2 * g.pw + g.sw - 1) / g.sw, plane = Hq * Wq;
  std::vector<T> acc(static_cast<size_t>(g.sh * g.sw * plane));
  for (int64_t q = q0; q < q1; ++q) {
    std::fill(acc.begin(), acc.end(), T(0));
    for (int64_t t = 0; t < khw; ++t) {
      const int64_t kh = (t / g.kW) * g.dh, kw = (t % g.kW) * g.dw;
      T* base = acc.data() + ((kh % g.sh) * g.sw + kw % g.sw) * plane + (kh / g.sh) * Wq + kw / g.sw;
      const T* src = col + layout.offset(q, t);
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        T* __restrict d = base + oh * Wq;
        const T* __restrict s = src + oh * g.OW;
        for (int64_t ow = 0; ow < g.OW; ++ow) d[ow] += s[ow];
      }
    }
    // x[h, w] is padded element (h + ph, w + pw): phase ((h + ph) % sh, (w + pw) % sw).
    for (int64_t h = 0; h < g.H; ++h) {
      const int64_t r = h + g.ph;
      const T* row = acc.data() + (r % g.sh) * g.sw * plane + (r / g.sh) * Wq;
      T* __restrict out = x + q * HW + h * g.W;
      if (g.sw == 2) {
        const T* even = row + (g.pw % 2) * plane + g.pw / 2;        // columns w = 0, 2, ...
        const T* odd = row + ((g.pw + 1) % 2) * plane + (g.pw + 1) / 2;  // w = 1, 3, ...
        for (int64_t k = 0; k < g.W / 2; ++k) {
          out[2 * k] = even[k];
          out[2 * k + 1] = odd[k];
        }
        if (g.W % 2) out[g.W - 1] = even[g.W / 2];
      } else {
        for (int64_t w = 0; w < g.W; ++w) out[w] = row[((w + g.pw) % g.sw) * plane + (w + g.pw) / g.sw];
      }
    }
  }
}

template <typename T>
void col2im(const T* col, int64_t planes, const Conv2dGeometry& g, const ColLayout& layout, T* x, bool parallel) {
  const int64_t khw = g.kH * g.kW, P = g.OH * g.OW, HW = g.H * g.W;
  // Threads take whole planes: the taps of one plane all add into it (or its padded copy).
  auto body = [&](int64_t q0, int64_t q1) {
    if (g.sh > 1 || g.sw > 1) {
      col2im_phases(col, g, layout, x, q0, q1);
      return;
    }
    PaddedPlane<T> pad(g);  // stride 1 from here on
    const int64_t Wp = pad.padded() ? pad.Wp : g.W;
    for (int64_t q = q0; q < q1; ++q) {
      T* acc = pad.padded() ? pad.buf.data() : x + q * HW;
      std::fill_n(acc, pad.padded() ? static_cast<int64_t>(pad.buf.size()) : HW, T(0));
      for (int64_t t = 0; t < khw; ++t) {
        T* base = acc + (t / g.kW) * g.dh * Wp + (t % g.kW) * g.dw;
        const T* src = col + layout.offset(q, t);
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          T* d = base + oh * Wp;
          const T* s = src + oh * g.OW;
          for (int64_t ow = 0; ow < g.OW; ++ow) d[ow] += s[ow];
        }
      }
      if (pad.padded())
        for (int64_t h = 0; h < g.H; ++h) std::copy_n(acc + (h + g.ph) * Wp + g.pw, g.W, x + q * HW + h * g.W);
    }
  };
  if (parallel) {
    parallel_for(0, planes, std::max<int64_t>(1, 16384 / (khw * P)), body);
  } else {
    body(0, planes);
  }
}

// ---- GEMM-based convolution: forward, backward input, backward weight ---------------------
// The schedules of NOTE [Conv2d threads] for each pass: parallel units; pointwise as one GEMM
// per sample and group straight on the tensors; otherwise chunks with batched columns.

constexpr int64_t kWorkspaceBytes = int64_t{32} << 20;
struct GemmShapes {
  int64_t Cg, Og, K, P, HW;
  explicit GemmShapes(const Conv2dGeometry& g)
      : Cg(g.in_per_group()), Og(g.out_per_group()), K(g.in_per_group() * g.kH * g.kW), P(g.OH * g.OW), HW(g.H * g.W) {}
};

// Samples per chunk: as many as keep the chunk's columns and its [O, nb P] output (or
// gradient) buffer within the budget (at least one).
template <typename T>
int64_t samples_per_chunk(const Conv2dGeometry& g, const GemmShapes& s) {
  const int64_t per_sample = (g.groups * s.K + g.O) * s.P * static_cast<int64_t>(sizeof(T));
  return std::clamp<int64_t>(kWorkspaceBytes / std::max<int64_t>(per_sample, 1), 1, std::max<int64_t>(g.N, 1));
}

// buf[o, i P + p] = t[n0 + i, o, p] for the nb samples of a chunk (t has O channels of P).
template <typename T>
void gather_chunk(const T* t, int64_t n0, int64_t nb, int64_t O, int64_t P, T* buf) {
  parallel_for(0, nb * O, std::max<int64_t>(1, 16384 / P), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) std::copy_n(t + ((n0 + r / O) * O + r % O) * P, P, buf + (r % O) * nb * P + (r / O) * P);
  });
}

template <typename T>
void forward_gemm(const T* x, const T* w, const T* bias, T* y, const Conv2dGeometry& g) {
  const GemmShapes s(g);
  const bool direct = g.pointwise();
  auto fill_bias = [&](int64_t n, int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) std::fill_n(y + (n * g.O + o) * s.P, s.P, bias[o]);
  };
  // y[n, group gi] (+)= W_g @ b, b an [K, P] matrix with row pitch ldb.
  auto unit_gemm = [&](int64_t n, int64_t gi, const T* b, int64_t ldb) {
    gemm<T>(false, false, s.Og, s.P, s.K, T(1), w + gi * s.Og * s.K, s.K, b, ldb, bias ? T(1) : T(0),
            y + (n * g.O + gi * s.Og) * s.P, s.P);
  };
  auto input_of = [&](int64_t n, int64_t gi) { return x + (n * g.C + gi * s.Cg) * s.HW; };
  if (parallel_over_units(g.N * g.groups, s.Og, s.P, s.K)) {
    parallel_for(0, g.N * g.groups, unit_grain(s.Og, s.P, s.K), [&](int64_t u0, int64_t u1) {
      Tensor ws = workspace<T>(direct ? 0 : s.K * s.P);
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t n = u / g.groups, gi = u % g.groups;
        if (bias) fill_bias(n, gi * s.Og, (gi + 1) * s.Og);
        if (!direct) im2col(input_of(n, gi), s.Cg, g, unit_layout(g), ws.data<T>(), false);
        unit_gemm(n, gi, direct ? input_of(n, gi) : ws.data<T>(), s.P);
      }
    });
    return;
  }
  if (g.pointwise()) {
    if (bias) {
      parallel_for(0, g.N * g.O, std::max<int64_t>(1, 16384 / s.P), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) fill_bias(r / g.O, r % g.O, r % g.O + 1);
      });
    }
    for (int64_t u = 0; u < g.N * g.groups; ++u) unit_gemm(u / g.groups, u % g.groups, input_of(u / g.groups, u % g.groups), s.P);
    return;
  }
  const int64_t chunk = samples_per_chunk<T>(g, s);
  Tensor ws = workspace<T>(chunk * (g.groups * s.K + g.O) * s.P);
  T* col = ws.data<T>();
  T* out = col + chunk * g.groups * s.K * s.P;
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0), ld = nb * s.P;
    im2col(x + n0 * g.C * s.HW, nb * g.C, g, batched_layout(g, nb), col, true);
    for (int64_t gi = 0; gi < g.groups; ++gi)
      gemm<T>(false, false, s.Og, ld, s.K, T(1), w + gi * s.Og * s.K, s.K, col + gi * s.K * ld, ld, T(0), out + gi * s.Og * ld, ld);
    parallel_for(0, nb * g.O, std::max<int64_t>(1, 16384 / s.P), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t i = r / g.O, o = r % g.O;
        const T* src = out + o * ld + i * s.P;
        T* dst = y + ((n0 + i) * g.O + o) * s.P;
        const T b = bias ? bias[o] : T(0);
        for (int64_t p = 0; p < s.P; ++p) dst[p] = src[p] + b;
      }
    });
  }
}

template <typename T>
void backward_input_gemm(const T* gy, const T* w, T* gx, const Conv2dGeometry& g) {
  const GemmShapes s(g);
  const bool direct = g.pointwise();  // then K == Cg and P == HW: gx_g = W_g^T gy_g in place
  auto unit_gemm = [&](int64_t n, int64_t gi, T* out) {
    gemm<T>(true, false, s.K, s.P, s.Og, T(1), w + gi * s.Og * s.K, s.K, gy + (n * g.O + gi * s.Og) * s.P, s.P, T(0), out, s.P);
  };
  auto input_of = [&](int64_t n, int64_t gi) { return gx + (n * g.C + gi * s.Cg) * s.HW; };
  if (parallel_over_units(g.N * g.groups, s.K, s.P, s.Og)) {
    parallel_for(0, g.N * g.groups, unit_grain(s.K, s.P, s.Og), [&](int64_t u0, int64_t u1) {
      Tensor ws = workspace<T>(direct ? 0 : s.K * s.P);
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t n = u / g.groups, gi = u % g.groups;
        unit_gemm(n, gi, direct ? input_of(n, gi) : ws.data<T>());
        if (!direct) col2im(ws.data<T>(), s.Cg, g, unit_layout(g), input_of(n, gi), false);
      }
    });
    return;
  }
  if (g.pointwise()) {
    for (int64_t u = 0; u < g.N * g.groups; ++u) unit_gemm(u / g.groups, u % g.groups, input_of(u / g.groups, u % g.groups));
    return;
  }
  const int64_t chunk = samples_per_chunk<T>(g, s);
  Tensor ws = workspace<T>(chunk * (g.groups * s.K + g.O) * s.P);
  T* col = ws.data<T>();
  T* gyb = col + chunk * g.groups * s.K * s.P;
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0), ld = nb * s.P;
    gather_chunk(gy, n0, nb, g.O, s.P, gyb);
    for (int64_t gi = 0; gi < g.groups; ++gi)
      gemm<T>(true, false, s.K, ld, s.Og, T(1), w + gi * s.Og * s.K, s.K, gyb + gi * s.Og * ld, ld, T(0), col + gi * s.K * ld, ld);
    col2im(col, nb * g.C, g, batched_layout(g, nb), gx + n0 * g.C * s.HW, true);
  }
}

template <typename T>
void backward_weight_gemm(const T* gy, const T* x, T* gw, const Conv2dGeometry& g) {
  const GemmShapes s(g);
  const bool direct = g.pointwise();
  const int64_t units = g.N * g.groups, gw_elems = g.O * s.K;
  // gw_g += gy_g [Og, P] @ b^T, b an [K, P] matrix with row pitch ldb, into acc ([O, K]).
  auto unit_gemm = [&](int64_t n, int64_t gi, const T* b, T* acc) {
    gemm<T>(false, true, s.Og, s.K, s.P, T(1), gy + (n * g.O + gi * s.Og) * s.P, s.P, b, s.P, T(1), acc + gi * s.Og * s.K, s.K);
  };
  auto input_of = [&](int64_t n, int64_t gi) { return x + (n * g.C + gi * s.Cg) * s.HW; };
  std::fill_n(gw, gw_elems, T(0));
  if (parallel_over_units(units, s.Og, s.K, s.P)) {
    // Each thread sums its units into a private gradient; the partial sums are added in the
    // order of their first unit, so a result does not depend on thread timing.
    std::mutex mu;
    std::vector<std::pair<int64_t, Tensor>> partials;
    parallel_for(0, units, unit_grain(s.Og, s.K, s.P), [&](int64_t u0, int64_t u1) {
      Tensor ws = workspace<T>(direct ? 0 : s.K * s.P);
      Tensor acc = zeros({gw_elems}, dtype_of<T>);
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t n = u / g.groups, gi = u % g.groups;
        if (!direct) im2col(input_of(n, gi), s.Cg, g, unit_layout(g), ws.data<T>(), false);
        unit_gemm(n, gi, direct ? input_of(n, gi) : ws.data<T>(), acc.data<T>());
      }
      std::lock_guard<std::mutex> lock(mu);
      partials.emplace_back(u0, acc);
    });
    std::sort(partials.begin(), partials.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [first, acc] : partials) {
      const T* a = acc.template data<T>();
      for (int64_t i = 0; i < gw_elems; ++i) gw[i] += a[i];
    }
    return;
  }
  if (g.pointwise()) {
    for (int64_t u = 0; u < units; ++u) unit_gemm(u / g.groups, u % g.groups, input_of(u / g.groups, u % g.groups), gw);
    return;
  }
  const int64_t chunk = samples_per_chunk<T>(g, s);
  Tensor ws = workspace<T>(chunk * (g.groups * s.K + g.O) * s.P);
  T* col = ws.data<T>();
  T* gyb = col + chunk * g.groups * s.K * s.P;
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0), ld = nb * s.P;
    im2col(x + n0 * g.C * s.HW, nb * g.C, g, batched_layout(g, nb), col, true);
    gather_chunk(gy, n0, nb, g.O, s.P, gyb);
    for (int64_t gi = 0; gi < g.groups; ++gi)
      gemm<T>(false, true, s.Og, s.K, ld, T(1), gyb + gi * s.Og * ld, ld, col + gi * s.K * ld, ld, T(1), gw + gi * s.Og * s.K, s.K);
  }
}

// ---- bf16 on the bf16 GEMM kernels (NOTE [bf16 convolutions]) -------------------------------

using BF = BFloat16;
const uint16_t* bits(const BF* p) { return reinterpret_cast<const uint16_t*>(p); }

// Samples per chunk of a bf16 pass whose buffers take `per_sample` bytes per sample: as many as
// fit the copy budget (at least one).
int64_t bf16_samples_per_chunk(const Conv2dGeometry& g, int64_t per_sample) {
  return std::clamp<int64_t>(conv_copy_budget_bytes() / std::max<int64_t>(per_sample, 1), 1, std::max<int64_t>(g.N, 1));
}

// The columns [groups K, nb P] of samples [n0, n0 + nb): a pointwise convolution's input of one
// sample is its own column matrix; of several, their planes side by side; otherwise im2col.
const BF* bf16_columns(const BF* x, int64_t n0, int64_t nb, const Conv2dGeometry& g, const GemmShapes& s, BF* col) {
  if (g.pointwise()) {
    if (nb == 1) return x + n0 * g.C * s.HW;
    gather_chunk(x, n0, nb, g.C, s.HW, col);
  } else {
    im2col(x + n0 * g.C * s.HW, nb * g.C, g, batched_layout(g, nb), col, true);
  }
  return col;
}

// gy of samples [n0, n0 + nb) as [O, nb P]: in place for one sample, else gathered into buf.
const BF* bf16_gradient_rows(const BF* gy, int64_t n0, int64_t nb, const Conv2dGeometry& g, const GemmShapes& s, BF* buf) {
  if (nb == 1) return gy + n0 * g.O * s.P;
  gather_chunk(gy, n0, nb, g.O, s.P, buf);
  return buf;
}

// y = W col per group, summed in f32, plus the bias, rounded once into y's NCHW planes.
void forward_bf16(Bf16Gemm kernel, const BF* x, const BF* w, const BF* bias, BF* y, const Conv2dGeometry& g) {
  const GemmShapes s(g);
  const int64_t col_elems = g.groups * s.K * s.P;
  const int64_t chunk = bf16_samples_per_chunk(g, col_elems * 2 + g.O * s.P * 4);
  Tensor col_ws = workspace<BF>(chunk * col_elems), out_ws = workspace<float>(chunk * g.O * s.P);
  float* out = out_ws.data<float>();
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0), ld = nb * s.P;
    const BF* col = bf16_columns(x, n0, nb, g, s, col_ws.data<BF>());
    for (int64_t gi = 0; gi < g.groups; ++gi)
      gemm_bf16(kernel, false, false, s.Og, ld, s.K, bits(w + gi * s.Og * s.K), s.K, bits(col + gi * s.K * ld), ld, nullptr,
                out + gi * s.Og * ld, ld);
    parallel_for(0, nb * g.O, std::max<int64_t>(1, 16384 / s.P), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t i = r / g.O, o = r % g.O;
        float* src = out + o * ld + i * s.P;
        if (bias) {
          const float b = static_cast<float>(bias[o]);
          for (int64_t p = 0; p < s.P; ++p) src[p] += b;
        }
        convert_f32_to_bf16(src, y + ((n0 + i) * g.O + o) * s.P, s.P);
      }
    });
  }
}

// col = W^T gy per group in f32, then col2im's sums in f32 (a pointwise convolution's col is
// the gradient itself), rounded once.
void backward_input_bf16(Bf16Gemm kernel, const BF* gy, const BF* w, BF* gx, const Conv2dGeometry& g) {
  const GemmShapes s(g);
  const int64_t col_elems = g.groups * s.K * s.P, plane_elems = g.pointwise() ? 0 : g.C * s.HW;
  const int64_t chunk = bf16_samples_per_chunk(g, g.O * s.P * 2 + (col_elems + plane_elems) * 4);
  Tensor gy_ws = workspace<BF>(chunk * g.O * s.P), col_ws = workspace<float>(chunk * col_elems),
         gx_ws = workspace<float>(chunk * plane_elems);
  float* col = col_ws.data<float>();
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0), ld = nb * s.P;
    const BF* gyb = bf16_gradient_rows(gy, n0, nb, g, s, gy_ws.data<BF>());
    for (int64_t gi = 0; gi < g.groups; ++gi)
      gemm_bf16(kernel, true, false, s.K, ld, s.Og, bits(w + gi * s.Og * s.K), s.K, bits(gyb + gi * s.Og * ld), ld, nullptr,
                col + gi * s.K * ld, ld);
    if (g.pointwise()) {  // col [C, nb HW]
      parallel_for(0, nb * g.C, std::max<int64_t>(1, 16384 / s.HW), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t i = r / g.C, c = r % g.C;
          convert_f32_to_bf16(col + c * ld + i * s.HW, gx + ((n0 + i) * g.C + c) * s.HW, s.HW);
        }
      });
      continue;
    }
    float* planes = gx_ws.data<float>();
    col2im(col, nb * g.C, g, batched_layout(g, nb), planes, true);
    parallel_for(0, nb * g.C * s.HW, 16384, [&](int64_t e0, int64_t e1) {
      convert_f32_to_bf16(planes + e0, gx + n0 * g.C * s.HW + e0, e1 - e0);
    });
  }
}

// gw = sum over the samples of gy col^T per group, in f32 (each chunk's product added by the
// GEMM to the sums of the chunks before it), rounded once.
void backward_weight_bf16(Bf16Gemm kernel, const BF* gy, const BF* x, BF* gw, const Conv2dGeometry& g) {
  const GemmShapes s(g);
  const int64_t col_elems = g.groups * s.K * s.P, gw_elems = g.O * s.K;
  const int64_t chunk = bf16_samples_per_chunk(g, (col_elems + g.O * s.P) * 2);
  Tensor col_ws = workspace<BF>(chunk * col_elems), gy_ws = workspace<BF>(chunk * g.O * s.P);
  Tensor acc_ws = workspace<float>(gw_elems);
  float* acc = acc_ws.data<float>();
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0), ld = nb * s.P;
    const BF* col = bf16_columns(x, n0, nb, g, s, col_ws.data<BF>());
    const BF* gyb = bf16_gradient_rows(gy, n0, nb, g, s, gy_ws.data<BF>());
    for (int64_t gi = 0; gi < g.groups; ++gi)
      gemm_bf16(kernel, false, true, s.Og, s.K, ld, bits(gyb + gi * s.Og * ld), ld, bits(col + gi * s.K * ld), ld, nullptr,
                acc + gi * s.Og * s.K, s.K, /*accumulate=*/n0 > 0);
  }
  convert_f32_to_bf16(acc, gw, gw_elems);
}

// sum x[0, n) in f64 with 16 independent partial sums (four 4-lane vectors under AVX2), so the
// adds do not wait on each other: one f64 accumulator took 2% of a 3x3 stride-2 forward +
// backward pass, its dependent adds the bottleneck.
template <typename T>  // float, or bf16 read as float
inline double sum16_in_f64(const T* x, int64_t n) {
  double part[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) part[k] += static_cast<double>(static_cast<float>(x[i + k]));
  double tail = 0.0;
  for (; i < n; ++i) tail += static_cast<double>(static_cast<float>(x[i]));
  for (int w = 8; w > 0; w /= 2)
    for (int k = 0; k < w; ++k) part[k] += part[k + w];
  return part[0] + tail;
}
TRIDENT_CPU_CLONES double sum_in_f64(const float* x, int64_t n) { return sum16_in_f64(x, n); }
// bf16 gradients summed as their f32 values are (exactly), without a converted copy of gy.
TRIDENT_CPU_CLONES double sum_in_f64(const BFloat16* x, int64_t n) { return sum16_in_f64(x, n); }
double sum_in_f64(const double* x, int64_t n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

template <typename T>
void backward_bias(const T* gy, T* gb, int64_t N, int64_t O, int64_t P) {
  using A = acc_t<T>;  // f64: N OH OW terms per channel
  // Image by image, so that each thread reads one contiguous run of its channels' rows per
  // image (channel by channel, the runs were single rows a whole image apart, and the reads ran
  // at a few GB/s).
  parallel_for(0, O, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, N * P)), [&](int64_t o0, int64_t o1) {
    std::vector<A> s(static_cast<size_t>(o1 - o0), A(0));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = o0; o < o1; ++o) s[static_cast<size_t>(o - o0)] += sum_in_f64(gy + (n * O + o) * P, P);
    for (int64_t o = o0; o < o1; ++o) gb[o] = static_cast<T>(s[static_cast<size_t>(o - o0)]);
  });
}

// Reduced floats are computed in f32 and rounded once at the end, except bf16 passes on the
// bf16 GEMM kernels (NOTE [bf16 convolutions]).
Tensor upcast(const Tensor& t) { return t.defined() && is_reduced_float(t.dtype()) ? t.to(DType::F32) : t; }

// Whether a bf16 pass takes the depthwise kernels a plane at a time (NOTE [bf16 depthwise
// convolutions]).
bool bf16_depthwise(DType dt, const Conv2dGeometry& g) {
  return dt == DType::BF16 && g.depthwise() && g.N > 0 && g.C > 0 && g.OH > 0 && g.OW > 0;
}

// NOTE [Strided pointwise convolutions]: a 1x1 convolution with a stride and no padding (ResNet's
// downsampling shortcuts, AmoebaNet's factorized reductions) reads only the pixels (i sh, j sw):
// it is the pointwise convolution of those pixels, gathered once into a contiguous tensor of
// OH x OW planes, and its input gradient is that pointwise convolution's, scattered back among
// zeros. The pointwise passes are GEMMs on the planes as they lie (no im2col); the strided
// kernels' own routes gathered or scattered per pass: on 8x256x56x56 -> 512 stride 2 in f32
// the direct kernel, im2col + GEMM and col2im took 11.6, 18.8 and 15.2 ms for the forward pass,
// weight and input gradients, 46.7 ms against PyTorch's 26.2 for all three.
bool strided_pointwise(const Conv2dGeometry& g) { return g.sampled_pointwise() && !g.depthwise() && g.N > 0 && g.OH > 0 && g.OW > 0; }
Conv2dGeometry sampled_geometry(const Conv2dGeometry& g) {
  Conv2dGeometry p = g;
  p.H = g.OH, p.W = g.OW, p.sh = p.sw = 1, p.dh = p.dw = 1;
  return p;
}
// The view of x [N, C, H, W] at the pixels a strided pointwise convolution reads.
Tensor sampled_view(const Tensor& x, const Conv2dGeometry& g) {
  const Shape st = x.strides();
  return x.as_strided({g.N, g.C, g.OH, g.OW}, {st[0], st[1], st[2] * g.sh, st[3] * g.sw}, x.storage_offset());
}
// dst [N, C, H, W] = src [N, C, OH, OW] at the sampled pixels, zero elsewhere, each row written
// once while in cache (zeros, then the values), where zeros over the whole of gx and then a
// strided copy wrote it twice: 32x128x30x30 -> 32 stride 2 forward + backward 2.34-2.47 ->
// 2.15-2.24 ms in f32, 1.92-2.06 -> 1.62-1.73 in bf16.
template <typename U>
void scatter_sampled(const U* src, U* dst, const Conv2dGeometry& g) {
  parallel_for(0, g.N * g.C, std::max<int64_t>(1, 16384 / std::max<int64_t>(g.H * g.W, 1)), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      for (int64_t h = 0; h < g.H; ++h) {
        U* row = dst + (p * g.H + h) * g.W;
        std::memset(static_cast<void*>(row), 0, static_cast<size_t>(g.W) * sizeof(U));
        if (h % g.sh != 0 || h / g.sh >= g.OH) continue;
        const U* s = src + (p * g.OH + h / g.sh) * g.OW;
        for (int64_t j = 0; j < g.OW; ++j) row[j * g.sw] = s[j];
      }
    }
  });
}

// The kernel a pass of dtype dt runs on: a bf16 GEMM kernel for bf16 passes with something to
// compute that are not depthwise, else None (f32 after the conversion).
Bf16Gemm bf16_conv_kernel(DType dt, const Conv2dGeometry& g) {
  if (dt != DType::BF16 || g.depthwise() || g.N == 0 || g.O == 0 || g.in_per_group() == 0 || g.OH <= 0 || g.OW <= 0)
    return Bf16Gemm::None;
  return bf16_gemm_kernel();
}

}  // namespace

namespace {
constexpr int64_t kDefaultCopyBudget = int64_t{32} << 20;
std::atomic<int64_t> g_copy_budget{kDefaultCopyBudget};
}  // namespace

int64_t conv_copy_budget_bytes() { return g_copy_budget.load(std::memory_order_relaxed); }
void set_conv_copy_budget_bytes_for_testing(int64_t bytes) { g_copy_budget.store(bytes > 0 ? bytes : kDefaultCopyBudget); }

Tensor conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dGeometry& g) {
  const DType dt = input.dtype();
  if (strided_pointwise(g)) return conv2d_forward(sampled_view(input, g).contiguous(), weight, bias, sampled_geometry(g));
  if (const Bf16Gemm kernel = bf16_conv_kernel(dt, g); kernel != Bf16Gemm::None) {
    const Tensor x = input.contiguous(), w = weight.contiguous(), b = bias.defined() ? bias.contiguous() : Tensor();
    Tensor y = empty({g.N, g.O, g.OH, g.OW}, dt);
    const BF* bp = b.defined() ? b.data<BF>() : nullptr;
    if (amx_conv_applies(g)) {
      amx_conv_forward(x.data<BF>(), w.data<BF>(), bp, y.data<BF>(), g);
    } else {
      forward_bf16(kernel, x.data<BF>(), w.data<BF>(), bp, y.data<BF>(), g);
    }
    return y;
  }
  if (bf16_depthwise(dt, g)) {
    const Tensor x = input.contiguous(), w = weight.to(DType::F32).contiguous();
    const Tensor b = bias.defined() ? bias.to(DType::F32).contiguous() : Tensor();
    Tensor y = empty({g.N, g.O, g.OH, g.OW}, dt);
    depthwise_forward(x.data<BF>(), w.data<float>(), b.defined() ? b.data<float>() : nullptr, y.data<BF>(), g);
    return y;
  }
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
      depthwise_forward(x.data<scalar_t>(), w.data<scalar_t>(), bp, yp, g);
    } else if (std::is_same_v<scalar_t, float> && winograd_forward_applies(g)) {
      winograd_forward(reinterpret_cast<const float*>(x.data<scalar_t>()), reinterpret_cast<const float*>(w.data<scalar_t>()),
                       reinterpret_cast<const float*>(bp), reinterpret_cast<float*>(yp), g);
    } else if (std::is_same_v<scalar_t, float> && direct_forward_applies(g)) {
      direct_forward(reinterpret_cast<const float*>(x.data<scalar_t>()), reinterpret_cast<const float*>(w.data<scalar_t>()),
                     reinterpret_cast<const float*>(bp), reinterpret_cast<float*>(yp), g);
    } else if (std::is_same_v<scalar_t, float> && !g.pointwise() && (blocked_kernels_preferred() || winograd7_forward_applies(g))) {
      blocked_forward(reinterpret_cast<const float*>(x.data<scalar_t>()), reinterpret_cast<const float*>(w.data<scalar_t>()),
                      reinterpret_cast<const float*>(bp), reinterpret_cast<float*>(yp), g);
    } else {
      forward_gemm(x.data<scalar_t>(), w.data<scalar_t>(), bp, yp, g);
    }
  });
  return y;
}

Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Conv2dGeometry& g) {
  const DType dt = weight.dtype();
  if (strided_pointwise(g)) {
    const Tensor sampled = conv2d_backward_input(grad_out, weight, sampled_geometry(g)).contiguous();
    Tensor gx = empty({g.N, g.C, g.H, g.W}, dt);
    switch (sampled.element_size()) {
      case 2: scatter_sampled(static_cast<const uint16_t*>(sampled.data_ptr()), static_cast<uint16_t*>(gx.data_ptr()), g); break;
      case 4: scatter_sampled(static_cast<const uint32_t*>(sampled.data_ptr()), static_cast<uint32_t*>(gx.data_ptr()), g); break;
      default: scatter_sampled(static_cast<const uint64_t*>(sampled.data_ptr()), static_cast<uint64_t*>(gx.data_ptr()), g); break;
    }
    return gx;
  }
  if (const Bf16Gemm kernel = bf16_conv_kernel(dt, g); kernel != Bf16Gemm::None) {
    const Tensor gy = grad_out.contiguous(), w = weight.contiguous();
    Tensor gx = empty({g.N, g.C, g.H, g.W}, dt);
    if (amx_conv_applies(g)) {
      amx_conv_backward_input(gy.data<BF>(), w.data<BF>(), gx.data<BF>(), g);
    } else {
      backward_input_bf16(kernel, gy.data<BF>(), w.data<BF>(), gx.data<BF>(), g);
    }
    return gx;
  }
  if (bf16_depthwise(dt, g)) {
    const Tensor gy = grad_out.contiguous(), w = weight.to(DType::F32).contiguous();
    Tensor gx = empty({g.N, g.C, g.H, g.W}, dt);
    depthwise_backward_input(gy.data<BF>(), w.data<float>(), gx.data<BF>(), g);
    return gx;
  }
  if (is_reduced_float(dt)) return conv2d_backward_input(upcast(grad_out), upcast(weight), g).to(dt);
  const Tensor gy = grad_out.contiguous(), w = weight.contiguous();
  Tensor gx = empty({g.N, g.C, g.H, g.W}, dt);
  if (gx.numel() == 0) return gx;
  TRIDENT_DISPATCH_F32_F64(dt, "conv2d_backward_input", [&] {
    scalar_t* gxp = gx.data<scalar_t>();
    if (g.O == 0) {
      std::fill_n(gxp, gx.numel(), scalar_t(0));
    } else if (g.depthwise()) {
      depthwise_backward_input(gy.data<scalar_t>(), w.data<scalar_t>(), gxp, g);
    } else if (std::is_same_v<scalar_t, float> && winograd_backward_input_applies(g)) {
      winograd_backward_input(reinterpret_cast<const float*>(gy.data<scalar_t>()), reinterpret_cast<const float*>(w.data<scalar_t>()),
                              reinterpret_cast<float*>(gxp), g);
    } else if (std::is_same_v<scalar_t, float> && direct_backward_input_applies(g)) {
      direct_backward_input(reinterpret_cast<const float*>(gy.data<scalar_t>()), reinterpret_cast<const float*>(w.data<scalar_t>()),
                            reinterpret_cast<float*>(gxp), g);
    } else if (std::is_same_v<scalar_t, float> && !g.pointwise() && blocked_backward_input_applies(g) &&
               (blocked_kernels_preferred() || winograd7_backward_input_applies(g))) {
      blocked_backward_input(reinterpret_cast<const float*>(gy.data<scalar_t>()), reinterpret_cast<const float*>(w.data<scalar_t>()),
                             reinterpret_cast<float*>(gxp), g);
    } else {
      backward_input_gemm(gy.data<scalar_t>(), w.data<scalar_t>(), gxp, g);
    }
  });
  return gx;
}

Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& input, const Conv2dGeometry& g) {
  const DType dt = input.dtype();
  if (strided_pointwise(g)) return conv2d_backward_weight(grad_out, sampled_view(input, g).contiguous(), sampled_geometry(g));
  if (const Bf16Gemm kernel = bf16_conv_kernel(dt, g); kernel != Bf16Gemm::None) {
    const Tensor gy = grad_out.contiguous(), x = input.contiguous();
    Tensor gw = empty({g.O, g.in_per_group(), g.kH, g.kW}, dt);
    if (narrow_backward_weight_applies(g, true)) {
      narrow_backward_weight(gy.data<BF>(), x.data<BF>(), gw.data<BF>(), g);
    } else if (amx_conv_applies(g)) {
      amx_conv_backward_weight(gy.data<BF>(), x.data<BF>(), gw.data<BF>(), g);
    } else {
      backward_weight_bf16(kernel, gy.data<BF>(), x.data<BF>(), gw.data<BF>(), g);
    }
    return gw;
  }
  if (bf16_depthwise(dt, g)) {
    std::vector<double> sums(static_cast<size_t>(g.O * g.kH * g.kW), 0.0);
    const Tensor gy = grad_out.contiguous(), x = input.contiguous();
    depthwise_backward_weight_sums(gy.data<BF>(), x.data<BF>(), sums.data(), g);
    // f64 -> f32 -> bf16, as the f32 route rounds its sums and then its result.
    return from_vector<double>(sums, {g.O, g.in_per_group(), g.kH, g.kW}).to(DType::F32).to(dt);
  }
  if (is_reduced_float(dt)) return conv2d_backward_weight(upcast(grad_out), upcast(input), g).to(dt);
  const Tensor gy = grad_out.contiguous(), x = input.contiguous();
  Tensor gw = empty({g.O, g.in_per_group(), g.kH, g.kW}, dt);
  if (gw.numel() == 0) return gw;
  TRIDENT_DISPATCH_F32_F64(dt, "conv2d_backward_weight", [&] {
    scalar_t* gwp = gw.data<scalar_t>();
    if (g.N == 0) {
      std::fill_n(gwp, gw.numel(), scalar_t(0));
    } else if (g.depthwise()) {
      depthwise_backward_weight(gy.data<scalar_t>(), x.data<scalar_t>(), gwp, g);
    } else if (std::is_same_v<scalar_t, float> && narrow_backward_weight_applies(g, false)) {
      narrow_backward_weight(reinterpret_cast<const float*>(gy.data<scalar_t>()), reinterpret_cast<const float*>(x.data<scalar_t>()),
                             reinterpret_cast<float*>(gwp), g);
    } else if (std::is_same_v<scalar_t, float> && winograd_forward_applies(g)) {
      winograd_backward_weight(reinterpret_cast<const float*>(gy.data<scalar_t>()), reinterpret_cast<const float*>(x.data<scalar_t>()),
                               reinterpret_cast<float*>(gwp), g);
    } else if (std::is_same_v<scalar_t, float> && direct_backward_weight_applies(g)) {
      direct_backward_weight(reinterpret_cast<const float*>(gy.data<scalar_t>()), reinterpret_cast<const float*>(x.data<scalar_t>()),
                             reinterpret_cast<float*>(gwp), g);
    } else if (std::is_same_v<scalar_t, float> && !g.pointwise() && (blocked_kernels_preferred() || winograd7_forward_applies(g))) {
      blocked_backward_weight(reinterpret_cast<const float*>(gy.data<scalar_t>()), reinterpret_cast<const float*>(x.data<scalar_t>()),
                              reinterpret_cast<float*>(gwp), g);
    } else {
      backward_weight_gemm(gy.data<scalar_t>(), x.data<scalar_t>(), gwp, g);
    }
  });
  return gw;
}

Tensor conv2d_backward_bias(const Tensor& grad_out) {
  const DType dt = grad_out.dtype();
  if (dt == DType::F16) return conv2d_backward_bias(upcast(grad_out)).to(dt);
  const Tensor gy = grad_out.contiguous();
  const int64_t N = gy.size(0), O = gy.size(1), P = gy.size(2) * gy.size(3);
  Tensor gb = empty({O}, dt);
  if (dt == DType::BF16) {
    backward_bias(gy.data<BF>(), gb.data<BF>(), N, O, P);
    return gb;
  }
  TRIDENT_DISPATCH_F32_F64(dt, "conv2d_backward_bias", [&] { backward_bias(gy.data<scalar_t>(), gb.data<scalar_t>(), N, O, P); });
  return gb;
}

}  // namespace trident::cpu
