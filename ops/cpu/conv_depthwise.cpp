// Direct depthwise convolution kernels (NOTE [Conv2d algorithms] in ops/cpu/conv.cpp).
//
// NOTE [Depthwise planes]: a thread copies each input plane it works on into a zero-padded
// buffer split into stride phases: phase (a, b) holds the padded elements at rows i sh + a
// and columns j sw + b, as a plane of Hq x Wq (Hq = ceil(Hp / sh), Wq = ceil(Wp / sw), Hp and
// Wp the padded sizes). Tap (kh, kw) of output (oh, ow) reads padded element
// (oh sh + kh dh, ow sw + kw dw), which is element (oh + kh dh / sh, ow + kw dw / sw) of phase
// ((kh dh) % sh, (kw dw) % sw): in the flattened phase buffer, a fixed offset from position
// oh Wq + ow. So with outputs laid out at pitch Wq, every tap is one long unit-stride pass
// over the whole plane with no bounds checks; a kernel row's taps go in one pass (unrolled),
// which the compiler vectorizes. The Wq - OW columns per row that fall between output rows
// are computed and dropped (their reads stay inside the buffer: OW - 1 + kw dw / sw < Wq).
// With stride 1 there is one phase, the padded plane itself.
#include "ops/cpu/conv_depthwise.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/copy.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/parallel.h"
#include "ops/cpu/conv_simd.h"
#include "ops/cpu/isa.h"

#ifdef __x86_64__
#include <immintrin.h>
#endif

namespace trident::cpu {
namespace {

// dst[j] += sum_t w[t] src[j + off[t]] for j in [lo, hi), K taps unrolled.
template <int K, typename T>
void taps(T* __restrict dst, const T* __restrict src, const T* w, const int64_t* off, int64_t lo, int64_t hi) {
  T wk[K];
  int64_t ok[K];
  for (int t = 0; t < K; ++t) {
    wk[t] = w[t];
    ok[t] = off[t];
  }
  for (int64_t j = lo; j < hi; ++j) {
    T acc = dst[j];
    for (int t = 0; t < K; ++t) acc += wk[t] * src[j + ok[t]];
    dst[j] = acc;
  }
}

template <typename T>
void apply_taps(T* dst, const T* src, const T* w, const int64_t* off, int64_t k, int64_t lo, int64_t hi) {
  switch (k) {
    case 0: return;
    case 1: return taps<1>(dst, src, w, off, lo, hi);
    case 2: return taps<2>(dst, src, w, off, lo, hi);
    case 3: return taps<3>(dst, src, w, off, lo, hi);
    case 4: return taps<4>(dst, src, w, off, lo, hi);
    case 5: return taps<5>(dst, src, w, off, lo, hi);
    case 6: return taps<6>(dst, src, w, off, lo, hi);
    case 7: return taps<7>(dst, src, w, off, lo, hi);
    default:
      for (int64_t t = 0; t < k; t += 7) apply_taps(dst, src, w + t, off + t, std::min<int64_t>(7, k - t), lo, hi);
  }
}

// sum_j a[j] b[j] for j in [0, n) in T. The range is cut in four quarters summed side by side:
// four independent vector accumulators, so the loop runs at the adder's throughput rather than
// waiting on one accumulator's latency.
// Inlined into its callers (with the weight gradient's two instantiations GCC stopped inlining
// it, and the out-of-line call cost AmoebaNet-B's weight gradients 4-10%).
template <typename T>
__attribute__((always_inline)) inline T dot(const T* __restrict a, const T* __restrict b, int64_t n) {
  const int64_t q = n / 4;
  T s0 = T(0), s1 = T(0), s2 = T(0), s3 = T(0);
#pragma omp simd reduction(+ : s0, s1, s2, s3)
  for (int64_t j = 0; j < q; ++j) {
    s0 += a[j] * b[j];
    s1 += a[j + q] * b[j + q];
    s2 += a[j + 2 * q] * b[j + 2 * q];
    s3 += a[j + 3 * q] * b[j + 3 * q];
  }
  for (int64_t j = 4 * q; j < n; ++j) s0 += a[j] * b[j];
  return (s0 + s1) + (s2 + s3);
}

// The phase layout of NOTE [Depthwise planes], and the taps of each kernel row grouped by the
// phase they read (taps of one group share a source and go in one pass).
struct PhaseLayout {
  int64_t Hp, Wp, Hq, Wq, plane, phases;
  int64_t flat;  // outputs at pitch Wq: the last is at (OH - 1) Wq + OW - 1
  struct Group {
    int64_t kh, phase;
    std::vector<int64_t> kw;   // taps of kernel row kh in this phase
    std::vector<int64_t> off;  // their offsets from the phase's start (da Wq + db)
  };
  std::vector<Group> groups;
  int64_t max_off = 0;

  explicit PhaseLayout(const Conv2dGeometry& g)
      : Hp(g.H + 2 * g.ph), Wp(g.W + 2 * g.pw), Hq((Hp + g.sh - 1) / g.sh), Wq((Wp + g.sw - 1) / g.sw), plane(Hq * Wq),
        phases(g.sh * g.sw), flat((g.OH - 1) * Wq + g.OW) {
    for (int64_t kh = 0; kh < g.kH; ++kh) {
      const int64_t a = (kh * g.dh) % g.sh, da = (kh * g.dh) / g.sh;
      for (int64_t b = 0; b < g.sw; ++b) {
        Group gr{kh, a * g.sw + b, {}, {}};
        for (int64_t kw = 0; kw < g.kW; ++kw) {
          if ((kw * g.dw) % g.sw != b) continue;
          gr.kw.push_back(kw);
          gr.off.push_back(da * Wq + (kw * g.dw) / g.sw);
          max_off = std::max(max_off, gr.off.back());
        }
        if (!gr.kw.empty()) groups.push_back(std::move(gr));
      }
    }
  }
};

// NOTE [bf16 depthwise planes]: bf16 tensors go through the f32 kernels a plane at a time: a
// thread widens each input plane it reads into an f32 plane of its own (exact) and rounds each
// output plane it computes from an f32 plane of its own (once, by convert_f32_to_bf16, copy_'s
// own rounding), so the arithmetic, and every bit of the results, are those of the f32 kernels
// on the tensors converted first, without converting or holding whole f32 tensors. Whole-tensor
// conversions (in chunks of images kept in L2) went through memory on AmoebaNet-B(6, 32)'s
// 30 x 30 maps (32 x 32 planes, 3.7 MB in f32): its bf16 depthwise passes took 1.6-1.9x as long
// as its f32 ones in the step. Converting row by row as the kernels lay the planes out was
// slower on small planes (rows of 8 or 15 elements: mostly vector tails).
template <typename T>
struct PlaneIn {
  const T* f = nullptr;
  const BFloat16* b = nullptr;  // bf16 planes (T = float only) when f is null
  int64_t size = 0;             // elements a plane
  bool bf16() const { return f == nullptr; }
  // Plane p as T: in the tensor, or widened into buf (size elements).
  const T* get(int64_t p, T* buf) const {
    if (f) return f + p * size;
    if constexpr (std::is_same_v<T, float>) {
      const BFloat16* src = b + p * size;
      for (int64_t i = 0; i < size; ++i) buf[i] = detail::bf16_bits_to_f32(src[i].bits);
    }
    return buf;
  }
  // The plane's first byte and its size in bytes (for prefetching).
  const char* bytes(int64_t p) const {
    return f ? reinterpret_cast<const char*>(f + p * size) : reinterpret_cast<const char*>(b + p * size);
  }
  int64_t plane_bytes() const { return size * static_cast<int64_t>(f ? sizeof(T) : sizeof(BFloat16)); }
};
template <typename T>
struct PlaneOut {
  T* f = nullptr;
  BFloat16* b = nullptr;  // as in PlaneIn
  int64_t size = 0;
  // Where plane p is computed: in the tensor, or in buf (size elements) until put(p, buf).
  T* get(int64_t p, T* buf) const { return f ? f + p * size : buf; }
  void put(int64_t p, const T* data) const {
    if constexpr (std::is_same_v<T, float>)
      if (!f) convert_f32_to_bf16(data, b + p * size, size);
  }
};

// Per-thread scratch: the phase buffer of one padded input plane, and a plane at pitch Wq.
template <typename T>
struct PhasePlanes {
  const Conv2dGeometry& g;
  const PhaseLayout& L;
  std::vector<T> phased, pitched;

  // `slack` zeros after the phases let a block of outputs run past the last one.
  PhasePlanes(const Conv2dGeometry& geo, const PhaseLayout& layout, int64_t pitched_elems, int64_t slack = 0)
      : g(geo), L(layout), phased(static_cast<size_t>(layout.phases * layout.plane + slack), T(0)),
        pitched(static_cast<size_t>(std::max<int64_t>(pitched_elems, 1)), T(0)) {
    // For input row h and each column phase b: the phase row's element for input column w0, w0
    // and the count, where w0, w0 + sw, ... are the input columns in phase b. Computed once: with
    // five divisions per row the f32 forward + backward passes on 8 x 8 and 15 x 15 planes took
    // 6-9% longer.
    for (int64_t h = 0; h < g.H; ++h) {
      const int64_t r = h + g.ph;
      for (int64_t b = 0; b < g.sw; ++b) {
        const int64_t w0 = ((b - g.pw) % g.sw + g.sw) % g.sw;  // first w with (w + pw) % sw == b
        if (w0 >= g.W) continue;
        const int64_t n = (g.W - w0 + g.sw - 1) / g.sw;
        runs_.push_back({((r % g.sh) * g.sw + b) * L.plane + (r / g.sh) * L.Wq + (w0 + g.pw) / g.sw, h * g.W + w0, n});
      }
    }
  }

  // Splits plane x [H, W] into the phases (the padding stays zero).
  // Writes the same positions for every plane: the padding stays zero from construction.
  void load(const T* x) {
    for (const Run& run : runs_) {
      T* dst = phased.data() + run.phase;
      const T* row = x + run.plane;
      for (int64_t i = 0; i < run.n; ++i) dst[i] = row[i * g.sw];
    }
  }
  // The inverse for a gradient: gx [H, W] = the input positions of the phases.
  void store(T* gx) {
    for (const Run& run : runs_) {
      const T* src = phased.data() + run.phase;
      T* row = gx + run.plane;
      for (int64_t i = 0; i < run.n; ++i) row[i * g.sw] = src[i];
    }
  }

 private:
  struct Run {
    int64_t phase, plane, n;  // the first element in the phases and in the plane, the count
  };
  std::vector<Run> runs_;
};

// The weights of a group's taps, contiguous (taps of a phase need not be adjacent in w).
template <typename T>
const T* group_weights(const PhaseLayout::Group& gr, const T* wp, int64_t kW, std::vector<T>& buf) {
  buf.resize(gr.kw.size());
  for (size_t i = 0; i < gr.kw.size(); ++i) buf[i] = wp[gr.kh * kW + gr.kw[i]];
  return buf.data();
}

// ---- forward ------------------------------------------------------------------------------
// f64 (and the reference for the f32 kernel's layout): per output plane, each group of taps in
// one unrolled pass over the plane at pitch Wq, accumulating in memory.
template <typename T>
void forward_planes_by_passes(const T* x, const T* w, const T* bias, T* y, const Conv2dGeometry& g, const PhaseLayout& L,
                              int64_t p0, int64_t p1) {
  const int64_t mult = g.O / g.C, khw = g.kH * g.kW, HW = g.H * g.W, P = g.OH * g.OW;
  PhasePlanes<T> pl(g, L, L.flat);
  std::vector<T> wbuf;
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t n = p / g.C, c = p % g.C;
    pl.load(x + p * HW);
    for (int64_t j = 0; j < mult; ++j) {
      const int64_t o = c * mult + j;
      T* out = pl.pitched.data();
      std::fill_n(out, L.flat, bias ? bias[o] : T(0));
      for (const PhaseLayout::Group& gr : L.groups)
        apply_taps(out, pl.phased.data() + gr.phase * L.plane, group_weights(gr, w + o * khw, g.kW, wbuf), gr.off.data(),
                   static_cast<int64_t>(gr.kw.size()), 0, L.flat);
      T* yp = y + (n * g.O + o) * P;
      for (int64_t oh = 0; oh < g.OH; ++oh) std::copy_n(out + oh * L.Wq, g.OW, yp + oh * g.OW);
    }
  }
}

// f32, NOTE [Depthwise register blocks]: a block of R output rows x L V columns (L the vector
// lanes) stays in registers while every tap is applied, and each loaded input vector serves
// every output row of the block it reaches: with stride 1, input row i at column offset kw
// meets output row r through tap (i - r, kw). So per kernel column kw the block loads its
// R + kH - 1 input rows once (V vectors each) and applies the column's kH weights to R of them
// each: about (R + kH - 1) / (R kH) loads per multiply-add (0.4 for 5x5 at R = 4) instead of
// one, and the outputs are written once. With stride s the input is split into s x s phases
// (NOTE [Depthwise planes]); in phase (a, b) the taps kh = a, a + s, ... read consecutive rows,
// so each phase is the same computation with a smaller kernel. Larger or dilated kernels use
// dw_flat_block below. The phase planes have zero rows and columns of slack so blocks may run
// past the output's edge; those outputs are dropped.
// - 8 lanes (AVX2, 16 registers): (R, V) = (4, 2) for up to 5 taps per phase column, (8, 1)
//   for 6 or 7; the weights are broadcast from L1 at each use, which leaves the registers to
//   the accumulators.
// - 16 lanes (AVX-512 CPUs, 32 registers, NOTE [Depthwise AVX-512]): V = 2 for rows wider than
//   16 outputs, else 1; R = 7 when that divides the output height and 8 does not (28 and 14
//   rows, AmoebaNet's 28 x 28 and 14 x 14 planes), else 8: at most 16 accumulators, the kernel
//   column's weights held in registers, and half the instructions of the 8-lane kernel.
// Each input vector is loaded once into a register and the accumulators are indexed by
// constants only (the row loops unrolled), so they stay in registers for all the phases of a
// block: with the loads folded into the multiply-adds (up to KH loads of each vector, two
// cache lines each when unaligned) and the accumulators stored and reloaded around each
// phase's taps, the 5x5 stride-2 forward pass ran at about a third of the FMA peak on Zen 4
// (1.7 ms on one thread for 8 x 128 planes of 56 x 56; 0.95-1.05 ms now, AVX2 form 1.6 -> 1.15).
using namespace conv_simd;

// acc[r][v] += sum over taps (i, t) of wk[i nkw + t] src[(r + i) Wr + db[t] + L v].
template <int KH, int R, int V, typename Vec>
inline void dw_rows(const float* src, int64_t Wr, const float* wk, const int64_t* db, int nkw, Vec (&acc_io)[R][V]) {
  constexpr int L = kLanes<Vec>;
  constexpr bool hold = L == 16;  // the column's weights in registers (32 of them)
  // Local accumulators: stores through acc_io could alias the float loads (a vector type may
  // alias its element type), which would force a store after every multiply-add.
  Vec acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = acc_io[r][v];
  // Fully unrolled (the pragmas): every register index is a constant.
  for (int t = 0; t < nkw; ++t) {
    const float* s = src + db[t];
    const float* wt = wk + t;
    Vec wh[KH];
    if constexpr (hold)
#pragma GCC unroll 8
      for (int kh = 0; kh < KH; ++kh) wh[kh] = vsplat<Vec>(wt[kh * nkw]);
#pragma GCC unroll 16
    for (int i = 0; i < R + KH - 1; ++i, s += Wr) {
      Vec xv[V];
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) {
        // Loaded once into a register (the empty asm): GCC otherwise folds the load into each
        // multiply-add that uses it, up to KH loads of one vector, and the 16-lane kernel ran
        // load-bound (NOTE [Depthwise register blocks]).
        Vec t = vload<Vec>(s + L * v);
        __asm__("" : "+v"(t));
        xv[v] = t;
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const int kh = i - r;
        if (kh < 0 || kh >= KH) continue;
        const Vec wv = hold ? wh[kh] : vsplat<Vec>(wt[kh * nkw]);
#pragma GCC unroll 2
        for (int v = 0; v < V; ++v) acc[r][v] += wv * xv[v];
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc_io[r][v] = acc[r][v];
}

// The taps of one phase: kH_a consecutive rows, kernel columns kw[] at offsets db[].
struct DwPhaseTaps {
  int64_t phase, rows;
  std::vector<int64_t> kh, kw, db;
};

// Input row segment -> phase row: dst[i] = x[src + i sw] for i < n.
struct DwCopy {
  int64_t dst, src, n;
};

struct DwForwardArgs {
  PlaneIn<float> x;  // planes of H W
  const float *w, *bias;
  PlaneOut<float> y;  // planes of OH OW
  const Conv2dGeometry* g;
  const std::vector<DwPhaseTaps>* taps;
  const std::vector<DwCopy>* copies;
  int64_t Hr, Wr;  // phase planes
  int R, V;
};

template <int R, int V, typename Vec>
inline void dw_phase_rows(int kh, const float* src, int64_t Wr, const float* wk, const int64_t* db, int nkw, Vec (&acc)[R][V]) {
  // The 8-lane kernel takes 6 or 7 rows only in its (8, 1) form (16 registers).
  constexpr bool tall = kLanes<Vec> == 16 || V == 1;
  switch (kh) {
    case 1: return dw_rows<1, R, V>(src, Wr, wk, db, nkw, acc);
    case 2: return dw_rows<2, R, V>(src, Wr, wk, db, nkw, acc);
    case 3: return dw_rows<3, R, V>(src, Wr, wk, db, nkw, acc);
    case 4: return dw_rows<4, R, V>(src, Wr, wk, db, nkw, acc);
    case 5: return dw_rows<5, R, V>(src, Wr, wk, db, nkw, acc);
    case 6: if constexpr (tall) return dw_rows<6, R, V>(src, Wr, wk, db, nkw, acc); else return;
    default: if constexpr (tall) return dw_rows<7, R, V>(src, Wr, wk, db, nkw, acc); else return;
  }
}

template <int R, int V, typename Vec>
inline void dw_forward_planes(const DwForwardArgs& a, int64_t p0, int64_t p1) {
  constexpr int L = kLanes<Vec>;
  const Conv2dGeometry& g = *a.g;
  const std::vector<DwPhaseTaps>& taps = *a.taps;
  const int64_t mult = g.O / g.C, khw = g.kH * g.kW, HW = g.H * g.W, P = g.OH * g.OW, plane = a.Hr * a.Wr;
  std::vector<float> phases(static_cast<size_t>(g.sh * g.sw * plane), 0.0f);  // slack and padding stay zero
  std::vector<float> wk(static_cast<size_t>(khw));
  std::vector<float> xbuf(a.x.bf16() ? static_cast<size_t>(HW) : 0), ybuf(a.y.f ? 0 : static_cast<size_t>(P));
  const DwCopy* copies = a.copies->data();
  const int64_t ncopies = static_cast<int64_t>(a.copies->size());
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t n = p / g.C, c = p % g.C;
    const float* x = a.x.get(p, xbuf.data());
    // NOTE [Depthwise prefetch]: the copy of a plane into its phases used to wait on reading
    // it (the hardware prefetchers do not run far ahead of a stream that pauses for the
    // compute), a third of the 5x5 stride-2 forward pass on one thread. Prefetching the whole
    // next plane at once (about 200 lines) stalled the core, 10-15% slower; prefetched into L2
    // (hint 2; into L1, hint 3, measured slower) a share per block of output rows, spread over
    // the compute, the 3x3 and 5x5 stride-2 passes ran 10-20% faster on one thread, 5-10% on
    // two (Zen 4, docs/performance.md).
    const char* next = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(a.x.bytes(p) + a.x.plane_bytes()) & ~uintptr_t{63});
    const int64_t next_lines = p + 1 < p1 ? (a.x.bytes(p) + 2 * a.x.plane_bytes() - next + 63) / 64 : 0;
    if (g.sw == 1) {
      for (int64_t k = 0; k < ncopies; ++k) copy_floats<Vec>(phases.data() + copies[k].dst, x + copies[k].src, copies[k].n);
    } else if (g.sw == 2) {  // both column phases of an input row in one pass (deinterleave2)
      for (int64_t k = 0; k + 1 < ncopies; k += 2)
        deinterleave2_vec<Vec>(x + copies[k].src, g.W, phases.data() + copies[k].dst, phases.data() + copies[k + 1].dst);
    } else {
      for (int64_t k = 0; k < ncopies; ++k) {
        float* dst = phases.data() + copies[k].dst;
        const float* src = x + copies[k].src;
        for (int64_t i = 0; i < copies[k].n; ++i) dst[i] = src[i * g.sw];
      }
    }
    for (int64_t j = 0; j < mult; ++j) {
      const int64_t o = c * mult + j;
      // Each phase's weights as a [rows][columns] matrix.
      int64_t at = 0;
      for (const DwPhaseTaps& pt : taps)
        for (int64_t kh : pt.kh)
          for (int64_t kw : pt.kw) wk[static_cast<size_t>(at++)] = a.w[o * khw + kh * g.kW + kw];
      const float b = a.bias ? a.bias[o] : 0.0f;
      float* yo = a.y.get(n * g.O + o, ybuf.data());
      // The next input plane is requested into L2 a share per row block while this one is
      // computed (NOTE [Depthwise prefetch]).
      const int64_t blocks = (g.OH + R - 1) / R, share = (next_lines + blocks - 1) / blocks;
      for (int64_t oh0 = 0; oh0 < g.OH; oh0 += R) {
        if (j == 0) {
          const int64_t l0 = oh0 / R * share, l1 = std::min(next_lines, l0 + share);
          for (int64_t l = l0; l < l1; ++l) __builtin_prefetch(next + 64 * l, 0, 2);
        }
        for (int64_t jb = 0; jb < g.OW; jb += L * V) {
          // A last block that would stick out moves left to end at the edge (recomputing a
          // few outputs) when the row is wide enough, so its stores are whole vectors.
          const int64_t j0 = jb + L * V > g.OW && g.OW >= L * V ? g.OW - L * V : jb;
          Vec acc[R][V];
          for (int r = 0; r < R; ++r)
            for (int v = 0; v < V; ++v) acc[r][v] = vsplat<Vec>(b);
          const float* wp = wk.data();
          for (const DwPhaseTaps& pt : taps) {
            const int nkw = static_cast<int>(pt.kw.size());
            dw_phase_rows<R, V>(static_cast<int>(pt.rows), phases.data() + pt.phase * plane + oh0 * a.Wr + j0, a.Wr, wp,
                                pt.db.data(), nkw, acc);
            wp += pt.rows * nkw;
          }
          const int64_t rows = std::min<int64_t>(R, g.OH - oh0), cols = std::min<int64_t>(L * V, g.OW - j0);
          // Constant indices (the loops unrolled, the row count a test): indexing acc by a
          // run-time row would keep it in memory, stored and reloaded around every phase's taps.
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            if (r >= rows) break;
            float* dst = yo + (oh0 + r) * g.OW + j0;
#pragma GCC unroll 2
            for (int v = 0; v < V; ++v) {
              const int64_t left = cols - L * v;
              if (left >= L) {
                std::memcpy(dst + L * v, &acc[r][v], sizeof(Vec));
              } else if (left > 0) {  // rows narrower than a block
                store_first(dst + L * v, acc[r][v], left);
              }
            }
          }
        }
      }
      a.y.put(n * g.O + o, yo);
    }
  }
}

TRIDENT_CPU_CLONES void depthwise_forward_f32_planes(const DwForwardArgs& a, int64_t p0, int64_t p1) {
  if (a.V == 2) {
    dw_forward_planes<4, 2, v8f>(a, p0, p1);
  } else {
    dw_forward_planes<8, 1, v8f>(a, p0, p1);
  }
}

#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
// NOTE [Depthwise AVX-512]: the 16-lane form of the register blocks, compiled for x86-64-v4
// (everything inlined into it: flatten) and chosen at run time on CPUs with AVX-512
// (cpu_avx512_kernels() in ops/cpu/isa.h; set_cpu_avx512_kernels_enabled_for_testing(false)
// turns it off to test the 8-lane form on the same machine). A row's last partial vector goes
// out as one masked store (store_first in ops/cpu/conv_simd.h).
__attribute__((TRIDENT_TARGET_V4, flatten)) void depthwise_forward_f32_planes_avx512(const DwForwardArgs& a, int64_t p0,
                                                                                         int64_t p1) {
  if (a.V == 2) {
    if (a.R == 7) return dw_forward_planes<7, 2, v16f>(a, p0, p1);
    return dw_forward_planes<8, 2, v16f>(a, p0, p1);
  }
  if (a.R == 7) return dw_forward_planes<7, 1, v16f>(a, p0, p1);
  dw_forward_planes<8, 1, v16f>(a, p0, p1);
}
#endif

// Dilated kernels, or more than 7 taps per phase column: every tap in one pass over blocks of 8
// vectors at pitch Wq (one load per multiply-add), through the PhaseLayout buffers.
constexpr int64_t kDwBlock = 64;

inline void dw_flat_block(const float* src, const float* wt, const int64_t* off, int64_t taps, float b, float* out) {
  v8f acc[8];
  for (int r = 0; r < 8; ++r) acc[r] = splat(b);
  for (int64_t t = 0; t < taps; ++t) {
    const v8f ws = splat(wt[t]);
    const float* s = src + off[t];
    for (int r = 0; r < 8; ++r) acc[r] += ws * load8(s + 8 * r);
  }
  std::memcpy(out, acc, sizeof acc);
}

struct DwFlatArgs {
  PlaneIn<float> x;
  const float *w, *bias;
  PlaneOut<float> y;
  const Conv2dGeometry* g;
  const PhaseLayout* L;
  const int64_t* off;  // per tap (kh kW + kw): phase start + da Wq + db
};

TRIDENT_CPU_CLONES void depthwise_forward_f32_flat(const DwFlatArgs& a, int64_t p0, int64_t p1) {
  const Conv2dGeometry& g = *a.g;
  const PhaseLayout& L = *a.L;
  const int64_t mult = g.O / g.C, khw = g.kH * g.kW, HW = g.H * g.W, P = g.OH * g.OW;
  const int64_t blocks = (L.flat + kDwBlock - 1) / kDwBlock;
  PhasePlanes<float> pl(g, L, blocks * kDwBlock, kDwBlock);
  std::vector<float> xbuf(a.x.bf16() ? static_cast<size_t>(HW) : 0), ybuf(a.y.f ? 0 : static_cast<size_t>(P));
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t n = p / g.C, c = p % g.C;
    pl.load(a.x.get(p, xbuf.data()));
    for (int64_t j = 0; j < mult; ++j) {
      const int64_t o = c * mult + j;
      const float b = a.bias ? a.bias[o] : 0.0f;
      float* out = pl.pitched.data();
      for (int64_t blk = 0; blk < blocks; ++blk)
        dw_flat_block(pl.phased.data() + blk * kDwBlock, a.w + o * khw, a.off, khw, b, out + blk * kDwBlock);
      float* yp = a.y.get(n * g.O + o, ybuf.data());
      for (int64_t oh = 0; oh < g.OH; ++oh) std::memcpy(yp + oh * g.OW, out + oh * L.Wq, static_cast<size_t>(g.OW) * sizeof(float));
      a.y.put(n * g.O + o, yp);
    }
  }
}

void forward_planes(const PlaneIn<float>& x, const float* w, const float* bias, const PlaneOut<float>& y, const Conv2dGeometry& g,
                    const PhaseLayout& L, int64_t p0, int64_t p1) {
  // The taps of each phase: rows kh = a, a + sh, ... are consecutive phase rows when dh == 1.
  std::vector<DwPhaseTaps> taps;
  int64_t max_rows = 0, max_da = 0, max_db = 0;
  for (int64_t a0 = 0; a0 < g.sh && g.dh == 1; ++a0)
    for (int64_t b0 = 0; b0 < g.sw; ++b0) {
      DwPhaseTaps pt{a0 * g.sw + b0, 0, {}, {}, {}};
      for (int64_t kh = a0; kh < g.kH; kh += g.sh) pt.kh.push_back(kh);
      for (int64_t kw = 0; kw < g.kW; ++kw)
        if ((kw * g.dw) % g.sw == b0) {
          pt.kw.push_back(kw);
          pt.db.push_back((kw * g.dw) / g.sw);
          max_db = std::max(max_db, pt.db.back());
        }
      pt.rows = static_cast<int64_t>(pt.kh.size());
      if (pt.rows == 0 || pt.kw.empty()) continue;
      max_rows = std::max(max_rows, pt.rows);
      max_da = std::max(max_da, pt.rows - 1);
      taps.push_back(std::move(pt));
    }
  if (g.dh == 1 && max_rows <= 7) {
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
    const bool wide = cpu_avx512_kernels();
#else
    constexpr bool wide = false;
#endif
    const int lanes = wide ? 16 : 8;
    const int V = wide ? (g.OW > 16 ? 2 : 1) : (max_rows <= 5 ? 2 : 1);
    const int R = wide ? (g.OH % 7 == 0 && g.OH % 8 != 0 ? 7 : 8) : 8 / V;
    // Phase planes hold rows up to the last block's (OH rounded up to R, plus the taps) and
    // columns up to the last block's L V (plus the taps), all at least the phase's own size.
    const int64_t Hr = std::max(L.Hq, (g.OH + R - 1) / R * R + max_da);
    const int64_t Wr = std::max(L.Wq, (g.OW + lanes * V - 1) / (lanes * V) * (lanes * V) + max_db);
    std::vector<DwCopy> copies;
    // Per input row, sw entries in the order of their first column w0 = 0, 1, ... (which goes to
    // column phase (w0 + pw) % sw), empty where w0 >= W: with sw == 2 entry pairs are a row's
    // even and odd columns.
    for (int64_t h = 0; h < g.H; ++h) {
      const int64_t r = h + g.ph;
      for (int64_t w0 = 0; w0 < g.sw; ++w0) {
        const int64_t b = (w0 + g.pw) % g.sw;
        copies.push_back({((r % g.sh) * g.sw + b) * Hr * Wr + (r / g.sh) * Wr + (w0 + g.pw) / g.sw, h * g.W + w0,
                          w0 < g.W ? (g.W - w0 + g.sw - 1) / g.sw : 0});
      }
    }
    const DwForwardArgs a{x, w, bias, y, &g, &taps, &copies, Hr, Wr, R, V};
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
    if (wide) return depthwise_forward_f32_planes_avx512(a, p0, p1);
#endif
    depthwise_forward_f32_planes(a, p0, p1);
    return;
  }
  std::vector<int64_t> off(static_cast<size_t>(g.kH * g.kW));
  for (const PhaseLayout::Group& gr : L.groups)
    for (size_t i = 0; i < gr.kw.size(); ++i) off[static_cast<size_t>(gr.kh * g.kW + gr.kw[i])] = gr.phase * L.plane + gr.off[i];
  const DwFlatArgs a{x, w, bias, y, &g, &L, off.data()};
  depthwise_forward_f32_flat(a, p0, p1);
}
void forward_planes(const PlaneIn<double>& x, const double* w, const double* bias, const PlaneOut<double>& y,
                    const Conv2dGeometry& g, const PhaseLayout& L, int64_t p0, int64_t p1) {
  forward_planes_by_passes(x.f, w, bias, y.f, g, L, p0, p1);
}

template <typename T>
void forward_impl(const PlaneIn<T>& x, const T* w, const T* bias, const PlaneOut<T>& y, const Conv2dGeometry& g) {
  const int64_t mult = g.O / g.C, khw = g.kH * g.kW, P = g.OH * g.OW;
  const PhaseLayout L(g);
  // Threads take input planes (n, c): each is split once for its `mult` output planes.
  parallel_for(0, g.N * g.C, std::max<int64_t>(1, 32768 / (mult * P * khw)),
               [&](int64_t p0, int64_t p1) { forward_planes(x, w, bias, y, g, L, p0, p1); });
}

}  // namespace

template <typename T>
void depthwise_forward(const T* x, const T* w, const T* bias, T* y, const Conv2dGeometry& g) {
  forward_impl<T>({x, nullptr, g.H * g.W}, w, bias, {y, nullptr, g.OH * g.OW}, g);
}
void depthwise_forward(const BFloat16* x, const float* w, const float* bias, BFloat16* y, const Conv2dGeometry& g) {
  forward_impl<float>({nullptr, x, g.H * g.W}, w, bias, {nullptr, y, g.OH * g.OW}, g);
}

namespace {

template <typename T>
void backward_input_impl(const PlaneIn<T>& gy, const T* w, const PlaneOut<T>& gx, const Conv2dGeometry& g) {
  const int64_t mult = g.O / g.C, khw = g.kH * g.kW, HW = g.H * g.W, P = g.OH * g.OW;
  const PhaseLayout L(g);
  // The adjoint gathers: phase element q receives w * gyp[q - off] from each tap of its
  // phase, with gy laid out at pitch Wq after max_off zeros (zeros between rows and after
  // the last), so every index is valid and out-of-range outputs contribute zero.
  parallel_for(0, g.N * g.C, std::max<int64_t>(1, 32768 / (mult * P * khw)), [&](int64_t p0, int64_t p1) {
    PhasePlanes<T> pl(g, L, L.max_off + L.plane);
    std::vector<T> wbuf, gybuf(gy.bf16() ? static_cast<size_t>(P) : 0), gxbuf(gx.f ? 0 : static_cast<size_t>(HW));
    std::vector<int64_t> neg;
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t n = p / g.C, c = p % g.C;
      std::fill(pl.phased.begin(), pl.phased.end(), T(0));
      for (int64_t j = 0; j < mult; ++j) {
        const int64_t o = c * mult + j;
        const T* gyo = gy.get(n * g.O + o, gybuf.data());
        T* base = pl.pitched.data() + L.max_off;
        for (int64_t oh = 0; oh < g.OH; ++oh) std::copy_n(gyo + oh * g.OW, g.OW, base + oh * L.Wq);
        for (const PhaseLayout::Group& gr : L.groups) {
          neg.resize(gr.off.size());
          for (size_t i = 0; i < gr.off.size(); ++i) neg[i] = -gr.off[i];
          apply_taps(pl.phased.data() + gr.phase * L.plane, base, group_weights(gr, w + o * khw, g.kW, wbuf), neg.data(),
                     static_cast<int64_t>(gr.kw.size()), 0, L.plane);
        }
      }
      T* gxp = gx.get(p, gxbuf.data());
      pl.store(gxp);
      gx.put(p, gxp);
    }
  });
}

// NOTE [Depthwise input gradient as a forward pass]: with stride 1 and one output channel per
// input channel, gx is the depthwise forward pass of gy with each kernel turned by 180 degrees
// and padded by (k - 1) d - p on each side (gx[i] = sum_t w[t] gy[i + p - t d] = sum_t'
// w[k - 1 - t'] gy[i - ((k - 1) d - p) + t' d]): the forward pass's register blocks (NOTE
// [Depthwise register blocks], 16 lanes on AVX-512) instead of the gathers above, whose passes
// over the plane keep every output in memory. f32 only: f64, the reference, keeps the gathers.
// bench_cpu_ops forward + backward, f32 (the binaries alternating): 3x3 32x32x30x30 1.03-1.08 ->
// 0.78-0.86 ms, 32x128x8x8 0.63-0.67 -> 0.51-0.54, 5x5 8x128x28x28 1.57-1.61 -> 1.18-1.26, 7x7
// 1x256x14x14 0.25-0.27 -> 0.17-0.19.
bool backward_input_as_forward(const Conv2dGeometry& g) {
  return g.O == g.C && g.OH > 0 && g.OW > 0 && g.sh == 1 && g.sw == 1 && g.ph <= (g.kH - 1) * g.dh && g.pw <= (g.kW - 1) * g.dw;
}

void backward_input_by_forward(const PlaneIn<float>& gy, const float* w, const PlaneOut<float>& gx, const Conv2dGeometry& g) {
  Conv2dGeometry f = g;
  f.H = g.OH, f.W = g.OW, f.OH = g.H, f.OW = g.W;
  f.ph = (g.kH - 1) * g.dh - g.ph, f.pw = (g.kW - 1) * g.dw - g.pw;
  const int64_t khw = g.kH * g.kW;
  std::vector<float> turned(static_cast<size_t>(g.O * khw));
  for (int64_t o = 0; o < g.O; ++o)
    for (int64_t t = 0; t < khw; ++t) turned[static_cast<size_t>(o * khw + t)] = w[o * khw + khw - 1 - t];
  forward_impl<float>(gy, turned.data(), nullptr, gx, f);
}

}  // namespace

template <typename T>
void depthwise_backward_input(const T* gy, const T* w, T* gx, const Conv2dGeometry& g) {
  if constexpr (std::is_same_v<T, float>) {
    if (backward_input_as_forward(g)) return backward_input_by_forward({gy, nullptr, g.OH * g.OW}, w, {gx, nullptr, g.H * g.W}, g);
  }
  backward_input_impl<T>({gy, nullptr, g.OH * g.OW}, w, {gx, nullptr, g.H * g.W}, g);
}
void depthwise_backward_input(const BFloat16* gy, const float* w, BFloat16* gx, const Conv2dGeometry& g) {
  if (backward_input_as_forward(g)) return backward_input_by_forward({nullptr, gy, g.OH * g.OW}, w, {nullptr, gx, g.H * g.W}, g);
  backward_input_impl<float>({nullptr, gy, g.OH * g.OW}, w, {nullptr, gx, g.H * g.W}, g);
}

namespace {

// NOTE [Depthwise weight-gradient blocks]: the f32 weight gradient of one plane, every tap at
// once: with gy at pitch Wq (zero-padded to whole vectors) and the input's phase planes, tap t's
// sum is sum_j gy[j] x[off_t + j], so each loaded vector of gy serves a group of up to 16 taps
// whose accumulators stay in registers, and each tap's lanes are summed once per plane. Nine
// separate dot products of a 15 x 15 plane (each with its own loads of gy and its own reduction)
// were 38% of a depthwise 3x3 forward + backward on 32x64x15x15 (perf), slower than PyTorch's.
template <int NT, typename Vec>
inline void tap_sums_group(const float* g, const float* src, const int64_t* off, int64_t n, float* out) {
  constexpr int L = kLanes<Vec>;
  Vec acc[NT];
#pragma GCC unroll 16
  for (int t = 0; t < NT; ++t) acc[t] = vsplat<Vec>(0.0f);
  for (int64_t j = 0; j < n; j += L) {
    const Vec gv = vload<Vec>(g + j);
#pragma GCC unroll 16
    for (int t = 0; t < NT; ++t) acc[t] += gv * vload<Vec>(src + off[t] + j);
  }
  for (int t = 0; t < NT; ++t) {
    alignas(sizeof(Vec)) float lanes[L];
    std::memcpy(lanes, &acc[t], sizeof(Vec));
    float sum = 0.0f;
    for (int l = 0; l < L; ++l) sum += lanes[l];
    out[t] = sum;
  }
}

template <typename Vec>
inline void plane_tap_sums(const float* g, const float* src, const int64_t* off, int64_t taps, int64_t n, float* out) {
  for (int64_t t0 = 0; t0 < taps; t0 += 16) {
    const int64_t k = std::min<int64_t>(16, taps - t0);
    const int64_t* o = off + t0;
    float* r = out + t0;
    switch (k) {
      case 1: tap_sums_group<1, Vec>(g, src, o, n, r); break;
      case 2: tap_sums_group<2, Vec>(g, src, o, n, r); break;
      case 3: tap_sums_group<3, Vec>(g, src, o, n, r); break;
      case 4: tap_sums_group<4, Vec>(g, src, o, n, r); break;
      case 5: tap_sums_group<5, Vec>(g, src, o, n, r); break;
      case 6: tap_sums_group<6, Vec>(g, src, o, n, r); break;
      case 7: tap_sums_group<7, Vec>(g, src, o, n, r); break;
      case 8: tap_sums_group<8, Vec>(g, src, o, n, r); break;
      case 9: tap_sums_group<9, Vec>(g, src, o, n, r); break;
      case 10: tap_sums_group<10, Vec>(g, src, o, n, r); break;
      case 11: tap_sums_group<11, Vec>(g, src, o, n, r); break;
      case 12: tap_sums_group<12, Vec>(g, src, o, n, r); break;
      case 13: tap_sums_group<13, Vec>(g, src, o, n, r); break;
      case 14: tap_sums_group<14, Vec>(g, src, o, n, r); break;
      case 15: tap_sums_group<15, Vec>(g, src, o, n, r); break;
      default: tap_sums_group<16, Vec>(g, src, o, n, r); break;
    }
  }
}

// n: a multiple of 16 (the pitched gy zero-padded, the phase planes with 16 floats of slack).
TRIDENT_CPU_CLONES void plane_tap_sums_f32(const float* g, const float* src, const int64_t* off, int64_t taps, int64_t n,
                                           float* out) {
  plane_tap_sums<v8f>(g, src, off, taps, n, out);
}
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
__attribute__((TRIDENT_TARGET_V4, flatten)) void plane_tap_sums_f32_avx512(const float* g, const float* src, const int64_t* off,
                                                                         int64_t taps, int64_t n, float* out) {
  plane_tap_sums<v16f>(g, src, off, taps, n, out);
}
#endif

#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
// NOTE [Depthwise weight-gradient register blocks]: with stride 1, no dilation and a 3x3 or 5x5
// kernel, AVX-512 CPUs sum a plane's taps as the forward pass computes its outputs (NOTE
// [Depthwise register blocks]): a block of R gy rows x 16 columns stays in registers with the
// kH kW taps' accumulators, and each input vector loaded (R + kH - 1 rows per kernel column)
// serves every gy row it meets: tap (kh, kw) of gy row r reads input row r + kh at column kw.
// About (R + kH - 1) / (R kH) loads per multiply-add (0.42 for 3x3 at R = 8) where the flat
// sums above load once per multiply-add, and gy is read where it lies (its last columns by a
// masked load, zero lanes past the row) instead of being copied to pitch Wq. R = 8 for 3x3 (9
// accumulators and 8 gy vectors), 4 for 5x5 (25 and 4). x is copied into a zero-padded plane of
// Hr x Wr (whole blocks of rows and columns, plus the taps) once per plane.
template <int KH, int R>
__attribute__((TRIDENT_TARGET_V4)) inline void dw_weight_block_sums(const float* x, const float* gy, float* xp, int64_t Wr,
                                                                      const Conv2dGeometry& g, float* out) {
  for (int64_t h = 0; h < g.H; ++h) copy_floats<v16f>(xp + (h + g.ph) * Wr + g.pw, x + h * g.W, g.W);
  __m512 acc[KH * KH];
#pragma GCC unroll 25
  for (int t = 0; t < KH * KH; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t oh0 = 0; oh0 < g.OH; oh0 += R) {
    const int64_t rows = std::min<int64_t>(R, g.OH - oh0);
    for (int64_t j0 = 0; j0 < g.OW; j0 += 16) {
      const int64_t left = g.OW - j0;
      const __mmask16 m = left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
      __m512 gv[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) gv[r] = r < rows ? _mm512_maskz_loadu_ps(m, gy + (oh0 + r) * g.OW + j0) : _mm512_setzero_ps();
      const float* xb = xp + oh0 * Wr + j0;
#pragma GCC unroll 5
      for (int kw = 0; kw < KH; ++kw) {
#pragma GCC unroll 12
        for (int i = 0; i < R + KH - 1; ++i) {
          const __m512 xv = _mm512_loadu_ps(xb + i * Wr + kw);
#pragma GCC unroll 5
          for (int kh = 0; kh < KH; ++kh) {
            const int r = i - kh;
            if (r < 0 || r >= R) continue;
            acc[kh * KH + kw] = _mm512_fmadd_ps(gv[r], xv, acc[kh * KH + kw]);
          }
        }
      }
    }
  }
  for (int t = 0; t < KH * KH; ++t) {  // the lanes in order, as tap_sums_group sums them
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, acc[t]);
    float sum = 0.0f;
    for (int l = 0; l < 16; ++l) sum += lanes[l];
    out[t] = sum;
  }
}

// R for a kernel of k x k; the zero-padded plane's rows and columns.
constexpr int dw_weight_rows(int64_t k) { return k == 3 ? 8 : 4; }
int64_t dw_weight_plane_rows(const Conv2dGeometry& g) {
  const int R = dw_weight_rows(g.kH);
  return (g.OH + R - 1) / R * R + g.kH - 1;
}
int64_t dw_weight_plane_cols(const Conv2dGeometry& g) { return (g.OW + 15) / 16 * 16 + g.kW - 1; }

__attribute__((TRIDENT_TARGET_V4, flatten)) void dw_weight_plane_sums_avx512(const float* x, const float* gy, float* xp, int64_t Wr,
                                                                              const Conv2dGeometry& g, float* out) {
  if (g.kH == 3) return dw_weight_block_sums<3, 8>(x, gy, xp, Wr, g, out);
  dw_weight_block_sums<5, 4>(x, gy, xp, Wr, g, out);
}

bool dw_weight_blocks_apply(const Conv2dGeometry& g) {
  return cpu_avx512_kernels() && g.O == g.C && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.kH == g.kW &&
         (g.kH == 3 || g.kH == 5) && g.OH > 0 && g.OW > 0;
}
#endif

// Each tap's sum over one plane is a dot product in T; the planes' sums are added in acc_t
// (f64 for f32), so long batches do not drift (NOTE [Conv2d algorithms]). Channel c's mult kH kW
// sums start from seed(c, acc) and end in sink(c, acc).
template <typename T, typename Seed, typename Sink>
void depthwise_weight_sums(const PlaneIn<T>& gy, const PlaneIn<T>& x, const Conv2dGeometry& g, const Seed& seed, const Sink& sink) {
  using A = acc_t<T>;
  const int64_t mult = g.O / g.C, khw = g.kH * g.kW, HW = g.H * g.W, P = g.OH * g.OW;
  // Threads take input channels c (and with them output channels c mult .. c mult + mult - 1).
  constexpr bool blocks = std::is_same_v<T, float>;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, g.N * mult * P * khw));
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
  if constexpr (blocks) {
    if (dw_weight_blocks_apply(g)) {  // NOTE [Depthwise weight-gradient register blocks]
      const int64_t Hr = dw_weight_plane_rows(g), Wr = dw_weight_plane_cols(g);
      parallel_for(0, g.C, grain, [&](int64_t c0, int64_t c1) {
        std::vector<float> xp(static_cast<size_t>(Hr * Wr), 0.0f), plane_sums(static_cast<size_t>(khw));
        std::vector<A> acc(static_cast<size_t>(khw));
        std::vector<T> xbuf(x.bf16() ? static_cast<size_t>(HW) : 0), gybuf(gy.bf16() ? static_cast<size_t>(P) : 0);
        for (int64_t c = c0; c < c1; ++c) {
          seed(c, acc.data());
          for (int64_t n = 0; n < g.N; ++n) {
            dw_weight_plane_sums_avx512(x.get(n * g.C + c, xbuf.data()), gy.get(n * g.O + c, gybuf.data()), xp.data(), Wr, g,
                                        plane_sums.data());
            for (int64_t t = 0; t < khw; ++t) acc[static_cast<size_t>(t)] += static_cast<A>(plane_sums[static_cast<size_t>(t)]);
          }
          sink(c, acc.data());
        }
      });
      return;
    }
  }
#endif
  // f32: every tap of a plane at once (NOTE [Depthwise weight-gradient blocks]), over the flat
  // outputs rounded up to whole vectors; the taps' offsets in the phase planes, in tap order.
  const PhaseLayout L(g);
  const int64_t padded = blocks ? (L.flat + 15) / 16 * 16 : L.flat;
  std::vector<int64_t> tap_off(static_cast<size_t>(khw));
  for (const PhaseLayout::Group& gr : L.groups)
    for (size_t i = 0; i < gr.kw.size(); ++i) tap_off[static_cast<size_t>(gr.kh * g.kW + gr.kw[i])] = gr.phase * L.plane + gr.off[i];
  parallel_for(0, g.C, grain, [&](int64_t c0, int64_t c1) {
    PhasePlanes<T> pl(g, L, padded, blocks ? 16 : 0);
    std::vector<A> acc(static_cast<size_t>(mult * khw));
    std::vector<float> plane_sums(blocks ? static_cast<size_t>(khw) : 0);
    std::vector<T> xbuf(x.bf16() ? static_cast<size_t>(HW) : 0), gybuf(gy.bf16() ? static_cast<size_t>(P) : 0);
    for (int64_t c = c0; c < c1; ++c) {
      seed(c, acc.data());
      for (int64_t n = 0; n < g.N; ++n) {
        pl.load(x.get(n * g.C + c, xbuf.data()));
        for (int64_t j = 0; j < mult; ++j) {
          const int64_t o = c * mult + j;
          const T* gyo = gy.get(n * g.O + o, gybuf.data());
          T* gyp = pl.pitched.data();  // gy at pitch Wq, zeros between rows
          for (int64_t oh = 0; oh < g.OH; ++oh) {
            std::copy_n(gyo + oh * g.OW, g.OW, gyp + oh * L.Wq);
            if (oh + 1 < g.OH) std::fill_n(gyp + oh * L.Wq + g.OW, L.Wq - g.OW, T(0));
          }
          A* a = acc.data() + j * khw;
          if constexpr (blocks) {
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
            if (cpu_avx512_kernels()) {
              plane_tap_sums_f32_avx512(gyp, pl.phased.data(), tap_off.data(), khw, padded, plane_sums.data());
            } else {
              plane_tap_sums_f32(gyp, pl.phased.data(), tap_off.data(), khw, padded, plane_sums.data());
            }
#else
            plane_tap_sums_f32(gyp, pl.phased.data(), tap_off.data(), khw, padded, plane_sums.data());
#endif
            for (int64_t t = 0; t < khw; ++t) a[t] += static_cast<A>(plane_sums[static_cast<size_t>(t)]);
          } else {
            for (int64_t t = 0; t < khw; ++t)
              a[t] += static_cast<A>(dot(gyp, pl.phased.data() + tap_off[static_cast<size_t>(t)], L.flat));
          }
        }
      }
      sink(c, acc.data());
    }
  });
}

}  // namespace

template <typename T>
void depthwise_backward_weight(const T* gy, const T* x, T* gw, const Conv2dGeometry& g) {
  const int64_t n = (g.O / g.C) * g.kH * g.kW;
  depthwise_weight_sums<T>(
      {gy, nullptr, g.OH * g.OW}, {x, nullptr, g.H * g.W}, g, [n](int64_t, acc_t<T>* acc) { std::fill_n(acc, n, acc_t<T>(0)); },
      [&](int64_t c, const acc_t<T>* acc) {
        for (int64_t t = 0; t < n; ++t) gw[c * n + t] = static_cast<T>(acc[t]);
      });
}

void depthwise_backward_weight_sums(const BFloat16* gy, const BFloat16* x, double* sums, const Conv2dGeometry& g) {
  const int64_t n = (g.O / g.C) * g.kH * g.kW;
  depthwise_weight_sums<float>(
      {nullptr, gy, g.OH * g.OW}, {nullptr, x, g.H * g.W}, g, [&](int64_t, double* acc) { std::fill_n(acc, n, 0.0); },
      [&](int64_t c, const double* acc) { std::copy_n(acc, n, sums + c * n); });
}

template void depthwise_forward<float>(const float*, const float*, const float*, float*, const Conv2dGeometry&);
template void depthwise_forward<double>(const double*, const double*, const double*, double*, const Conv2dGeometry&);
template void depthwise_backward_input<float>(const float*, const float*, float*, const Conv2dGeometry&);
template void depthwise_backward_input<double>(const double*, const double*, double*, const Conv2dGeometry&);
template void depthwise_backward_weight<float>(const float*, const float*, float*, const Conv2dGeometry&);
template void depthwise_backward_weight<double>(const double*, const double*, double*, const Conv2dGeometry&);

}  // namespace trident::cpu
