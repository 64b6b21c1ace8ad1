#include "ops/cpu/conv_amx.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <span>
#include <vector>

#include "core/copy.h"
#include "core/error.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/amx_internal.h"
#include "ops/cpu/bgemm_amx.h"

namespace trident::cpu {

bool amx_conv_applies(const Conv2dGeometry& g) { return g.groups == 1 && bf16_gemm_kernel() == Bf16Gemm::Amx; }

namespace {
std::atomic<int> g_shift_mode{-1};  // set_amx_shifted_columns_for_testing
}  // namespace
int set_amx_shifted_columns_for_testing(int mode) { return g_shift_mode.exchange(mode < 0 ? -1 : mode > 0 ? 1 : 0); }

#ifdef TRIDENT_HAVE_AMX
namespace {
using namespace amx;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Whether a stride-1 pass's kW shifted copies of copy_pixels pixels each (instead of one plane)
// pay for the `saved` computed pixels per image with out_p output channels (NOTE [AMX shifted
// columns]), unless set_amx_shifted_columns_for_testing forces them.
bool shift_pays(int64_t saved, int64_t copy_pixels, int64_t kH, int64_t kW, int64_t out_p) {
  if (const int mode = g_shift_mode.load(std::memory_order_relaxed); mode >= 0) return mode == 1 && saved >= 0;
  return saved > 0 && saved / 32 * kH * kW * out_p >= 16 * (kW - 1) * copy_pixels;
}

// Whether g's passes may run its images' pixels as one row (NOTE [AMX pointwise blocks]): a 1x1
// of stride 1 without padding.
bool pointwise_rows(const Conv2dGeometry& g) { return g.kH == 1 && g.kW == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0; }

// A convolution as the direct kernels run it (NOTE [AMX direct convolution]): `in` channels of
// Hin x Win planes zero-padded by (pt, pl) on each side, read with stride (sh, sw), `out`
// channels of Hout x Wout planes. With a stride the padded input is split into sh sw phase planes
// (phase (a, b) holds padded pixels (i sh + a, j sw + b) at (i, j)), so that every tap reads one
// phase plane at a fixed offset; the output is computed on the phase planes' grid, row pitch Wp.
// With `shifted` (stride 1 only, NOTE [AMX shifted columns]) the planes are instead kW copies of
// the padded input, copy s shifted left by s dw columns and cut to Wout (rounded up to even)
// columns, and tap (kh, kw) reads copy kw at kh dh rows down.
struct Plan {
  int64_t in, out, Hin, Win, kH, kW, dh, dw, pt, pl, sh, sw;
  int64_t Hp, Wp, Hout, Wout;  // Hp x Wp: a phase plane (the padded input itself for stride 1)
  bool shifted = false;
  int64_t phases;
  int64_t Qout;   // output pixels computed per image: Hout Wp rounded up to whole 32-pixel blocks
  int64_t pitch;  // pixels per laid-out phase plane: Hp Wp and what the last blocks read past it
  int64_t in_p, out_p, taps;
  // may_shift: lay the planes out shifted where NOTE [AMX shifted columns] says it pays.
  Plan(int64_t in_, int64_t out_, int64_t hin, int64_t win, const Conv2dGeometry& g, int64_t pt_, int64_t pl_, int64_t sh_,
       int64_t sw_, bool may_shift)
      : in(in_), out(out_), Hin(hin), Win(win), kH(g.kH), kW(g.kW), dh(g.dh), dw(g.dw), pt(pt_), pl(pl_), sh(sh_), sw(sw_) {
    Hp = (Hin + 2 * pt + sh - 1) / sh;
    Wp = round_up((Win + 2 * pl + sw - 1) / sw, 2);  // even: a row's pixel pairs never straddle two rows
    Hout = (Hin + 2 * pt - (kH - 1) * dh - 1) / sh + 1;
    Wout = (Win + 2 * pl - (kW - 1) * dw - 1) / sw + 1;
    phases = sh * sw;
    Qout = round_up(Hout * Wp, 32);
    // The last block reads up to pixel Qout - 1 + the largest offset, below
    // (Hout + (kH - 1) dh / sh) Wp + (kW - 1) dw / sw + 31.
    pitch = std::max(Hp, Hout + (kH - 1) * dh / sh) * Wp + (kW - 1) * dw / sw + 32;
    const int64_t Ws = round_up(Wout, 2), Qs = round_up(Hout * Ws, 32);
    if (may_shift && sh == 1 && sw == 1 && kW > 1 && shift_pays(Qout - Qs, Hp * Ws, kH, kW, round_up(out, 32))) {
      shifted = true;
      Wp = Ws;
      phases = kW;
      Qout = Qs;
      pitch = Hp * Wp + 32;  // Hp = Hout + (kH - 1) dh rows
    }
    in_p = round_up(in, 32);
    out_p = round_up(out, 32);
    taps = kH * kW;
  }
  // Tap t reads phase plane phase(t) at pixel q + offset(t) for output pixel q.
  int64_t phase(int64_t t) const { return shifted ? t % kW : ((t / kW) * dh % sh) * sw + (t % kW) * dw % sw; }
  int64_t offset(int64_t t) const { return shifted ? (t / kW) * dh * Wp : ((t / kW) * dh / sh) * Wp + (t % kW) * dw / sw; }
  // Padded row i of phase plane ph is input row i sh + ph / sw - pt (column j: j sw + ph % sw - pl;
  // shifted: row i - pt, column j + ph dw - pl).
  int64_t input_row(int64_t ph, int64_t i) const { return shifted ? i - pt : i * sh + ph / sw - pt; }
  int64_t input_col(int64_t ph, int64_t j) const { return shifted ? j + ph * dw - pl : j * sw + ph % sw - pl; }
  // A pointwise convolution of one row of pixels (pointwise passes are run on their images'
  // pixels as one row): pixel q of a block reads input pixel q alone, so a block's input can be
  // laid out where it is used (NOTE [AMX pointwise blocks]).
  bool one_row_pointwise() const { return taps == 1 && phases == 1 && Hin == 1 && pt == 0 && pl == 0 && in_p <= 256; }
  // The columns [j_lo, j_hi) of a stride-1 plane that hold input columns (j + col0, col0 =
  // input_col(ph, 0)).
  std::pair<int64_t, int64_t> unit_columns(int64_t ph) const {
    const int64_t col0 = input_col(ph, 0);
    return {std::max<int64_t>(0, -col0), std::clamp<int64_t>(Win - col0, 0, Wp)};
  }
};

// One tap of a pass: the weights' tile a[weight], read against phase plane `phase` at pixel
// q + offset for computed pixel q.
struct Tap {
  int64_t weight, phase, offset;
};
// Where a pass's computed pixel (i, j) (i < Hout, j < Wout) goes: pixel (i row_step + row_off,
// j col_step + col_off) of the destination planes, H x W, when it lies inside them; rows
// [i_lo, i_hi) and columns [j_lo, j_hi) do.
struct Output {
  int64_t H, W, row_step, row_off, col_step, col_off, i_lo, i_hi, j_lo, j_hi;
  Output(const Plan& p, int64_t h, int64_t w, int64_t rs, int64_t ro, int64_t cs, int64_t co)
      : H(h), W(w), row_step(rs), row_off(ro), col_step(cs), col_off(co) {
    i_lo = ro >= 0 ? 0 : (-ro + rs - 1) / rs;
    i_hi = ro >= H ? 0 : std::min(p.Hout, (H - ro - 1) / rs + 1);
    j_lo = co >= 0 ? 0 : (-co + cs - 1) / cs;
    j_hi = co >= W ? 0 : std::min(p.Wout, (W - co - 1) / cs + 1);
  }
};
// A convolution of the laid-out input: its taps and where its output goes. The forward pass and
// a stride-1 input gradient are one pass of every tap; a strided input gradient is one pass per
// phase of gx (NOTE [AMX direct convolution]).
struct Pass {
  std::vector<Tap> taps;
  Output out;
};
// Every tap of p, tap t reading a[t], written to planes of the computed size.
Pass every_tap(const Plan& p) {
  Pass pass{{}, Output(p, p.Hout, p.Wout, 1, 0, 1, 0)};
  for (int64_t t = 0; t < p.taps; ++t) pass.taps.push_back({t, p.phase(t), p.offset(t)});
  return pass;
}

// Images per chunk when each takes `per_image` bytes of laid-out copies.
int64_t images_per_chunk(int64_t N, int64_t per_image) {
  return std::clamp<int64_t>(conv_copy_budget_bytes() / std::max<int64_t>(per_image, 1), 1, std::max<int64_t>(N, 1));
}

uint16_t* bits(Tensor& t) { return static_cast<uint16_t*>(t.data_ptr()); }

// The columns j of a stride-2 phase plane's row that hold input pixels w = 2 j + first of a row of
// Win: [j_lo, j_hi) within [0, Wp).
struct EveryOther {
  int64_t first, j_lo, j_hi;
  EveryOther(int64_t first_, int64_t Win, int64_t Wp) : first(first_) {
    j_lo = first >= 0 ? 0 : (1 - first) / 2;
    j_hi = first >= Win ? 0 : std::min(Wp, (Win - 1 - first) / 2 + 1);
  }
};
// Input pixels 2 (j + l) + first of a row, l < 16 where `lanes` says, in the low halves of the
// 32-bit lanes (the high halves zero): the low halves of 32 pixels loaded from 2 j + first.
TRIDENT_AMX inline __m512i every_other(const uint16_t* row, const EveryOther& e, int64_t j, __mmask16 lanes) {
  const int64_t count = std::min<int64_t>(16, e.j_hi - j);
  const __m512i v = _mm512_maskz_loadu_epi16(static_cast<__mmask32>((uint32_t{1} << (2 * count - 1)) - 1u), row + 2 * j + e.first);
  return _mm512_maskz_and_epi32(lanes, v, _mm512_set1_epi32(0xffff));
}
const uint16_t* bits(const BFloat16* p) { return reinterpret_cast<const uint16_t*>(p); }

// Input planes [images][in][Hin][Win] -> [images][phases][in_p / 2][pitch][2]: channel pairs
// interleaved at their positions in the phase planes, zero elsewhere; items (image, phase,
// channel pair) [i0, i1).
TRIDENT_AMX void pack_pairs(const uint16_t* src, const Plan& p, int64_t i0, int64_t i1, uint16_t* dst) {
  const int64_t pairs = p.in_p / 2, plane = p.Hin * p.Win;
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t n = i / (p.phases * pairs), ph = i / pairs % p.phases, c = 2 * (i % pairs);
    uint16_t* d = dst + i * p.pitch * 2;
    std::memset(d, 0, static_cast<size_t>(p.pitch * 2) * sizeof(uint16_t));
    if (c >= p.in) continue;
    const bool has_hi = c + 1 < p.in;
    const uint16_t* s = src + (n * p.in + c) * plane;
    for (int64_t r = 0; r < p.Hp; ++r) {
      const int64_t h = p.input_row(ph, r);
      if (h < 0 || h >= p.Hin) continue;
      uint16_t* row = d + r * p.Wp * 2;
      if (p.sw == 1) {
        const auto [j_lo, j_hi] = p.unit_columns(ph);
        const int64_t col0 = p.input_col(ph, 0);
        for (int64_t j = j_lo; j < j_hi; j += 16) {
          const __mmask16 m = first_lanes(j_hi - j);
          _mm512_mask_storeu_epi32(row + j * 2, m, interleave_rows(s + h * p.Win + j + col0, plane, m, has_hi));
        }
        continue;
      }
      if (p.sw == 2) {  // every other pixel of the row, 16 at a time, the pair's two in a lane
        const EveryOther e(p.input_col(ph, 0), p.Win, p.Wp);
        for (int64_t j = e.j_lo; j < e.j_hi; j += 16) {
          const __mmask16 m = first_lanes(e.j_hi - j);
          __m512i v = every_other(s + h * p.Win, e, j, m);
          if (has_hi) v = _mm512_or_si512(v, _mm512_slli_epi32(every_other(s + plane + h * p.Win, e, j, m), 16));
          _mm512_mask_storeu_epi32(row + j * 2, m, v);
        }
        continue;
      }
      for (int64_t j = 0; j < p.Wp; ++j) {
        const int64_t w = p.input_col(ph, j);
        if (w < 0 || w >= p.Win) continue;
        row[j * 2] = s[h * p.Win + w];
        row[j * 2 + 1] = has_hi ? s[plane + h * p.Win + w] : uint16_t{0};
      }
    }
  }
}

// The forward pass's a[t][o][c] = w[o][c][t] (a's rows rows_p x cols_p apart per tap, cols_p
// apart per o) for items (output channel, block of 16 input channels) [i0, i1): the block's 16
// rows of taps loaded 16 taps at a time, transposed in registers, a store of 16 c per tap. (A
// scalar loop was 4% of a 8x512x7x7 -> 512 forward + backward in perf.)
TRIDENT_AMX void pack_taps_first(const uint16_t* w, int64_t C, int64_t taps, int64_t rows_p, int64_t cols_p, int64_t i0,
                                 int64_t i1, uint16_t* a) {
  const int64_t cbs = (C + 15) / 16;
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t o = i / cbs, c0 = i % cbs * 16, nc = std::min<int64_t>(16, C - c0);
    const __mmask16 cols = first_lanes(nc);
    for (int64_t t0 = 0; t0 < taps; t0 += 16) {
      const __mmask16 m = first_lanes(taps - t0);
      __m512i v[16];
      for (int64_t c = 0; c < 16; ++c)
        v[c] = c < nc ? _mm512_maskz_cvtepu16_epi32(m, _mm256_maskz_loadu_epi16(m, w + (o * C + c0 + c) * taps + t0)) : _mm512_setzero_si512();
      transpose16x16(v);  // v[t]: lanes c
      for (int64_t t = 0; t < 16 && t0 + t < taps; ++t)
        _mm256_mask_storeu_epi16(a + ((t0 + t) * rows_p + o) * cols_p + c0, cols, _mm512_cvtepi32_epi16(v[t]));
    }
  }
}

// The input gradient's a[taps - 1 - t][c][o] = w[o][c][t]: w read as the matrix [O][C taps], whose
// column j = c taps + t is a's row (taps - 1 - t, c), transposed by 16 x 16 blocks in registers;
// items (block of 32 output channels, block of 16 columns) [i0, i1), the block's two halves of 16
// o one after the other so that each 64-byte line of a is written whole. (A gather of each block's
// taps by a scalar loop, then per-tap transposes, was 10% of a 8x512x7x7 -> 512 forward +
// backward in perf; scalar transposes before that 14%.)
TRIDENT_AMX void pack_transposed_weights(const uint16_t* w, int64_t O, int64_t C, int64_t taps, int64_t rows_p, int64_t cols_p,
                                         int64_t i0, int64_t i1, uint16_t* a) {
  const int64_t cols = C * taps, jbs = (cols + 15) / 16;
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t j0 = i % jbs * 16, nj = std::min<int64_t>(16, cols - j0);
    const __mmask16 m = first_lanes(nj);
    for (int64_t o0 = i / jbs * 32; o0 < std::min(O, i / jbs * 32 + 32); o0 += 16) {
      const int64_t no = std::min<int64_t>(16, O - o0);
      __m512i v[16];
      for (int64_t o = 0; o < 16; ++o)
        v[o] = o < no ? _mm512_maskz_cvtepu16_epi32(m, _mm256_maskz_loadu_epi16(m, w + (o0 + o) * cols + j0)) : _mm512_setzero_si512();
      transpose16x16(v);  // v[k]: lanes o, column j0 + k
      const __mmask16 lanes = first_lanes(no);
      for (int64_t k = 0, c = j0 / taps, t = j0 % taps; k < nj; ++k) {
        _mm256_mask_storeu_epi16(a + ((taps - 1 - t) * rows_p + c) * cols_p + o0, lanes, _mm512_cvtepi32_epi16(v[k]));
        if (++t == taps) {
          t = 0;
          ++c;
        }
      }
    }
  }
}

// The weights w [O][C][kH][kW] as the tiles' first operand a [taps][rows_p][cols_p], zero padded:
// the forward pass's a[t][o][c] = w[o][c][t]; the input gradient's (transposed, turned)
// a[t][c][o] = w[o][c][taps - 1 - t].
// (Zeros only where the channels are padded: zeroing the whole of a 256 x 256 x 3x3 weight first
// was 5% of a forward pass on 8x256x14x14.)
Tensor pack_weights(const uint16_t* w, int64_t O, int64_t C, int64_t taps, bool transposed, int64_t rows_p, int64_t cols_p) {
  const bool filled = rows_p == (transposed ? C : O) && cols_p == (transposed ? O : C);
  Tensor a = filled ? empty({taps * rows_p * cols_p}, DType::BF16) : zeros({taps * rows_p * cols_p}, DType::BF16);
  uint16_t* ap = bits(a);
  if (!transposed) {
    parallel_for(0, O * ((C + 15) / 16), 16, [&](int64_t i0, int64_t i1) { pack_taps_first(w, C, taps, rows_p, cols_p, i0, i1, ap); });
    return a;
  }
  parallel_for(0, ((O + 31) / 32) * ((C * taps + 15) / 16), 16,
               [&](int64_t i0, int64_t i1) { pack_transposed_weights(w, O, C, taps, rows_p, cols_p, i0, i1, ap); });
  return a;
}

// The sums of output rows [m0, m0 + 32) and computed pixels [q0, q0 + 32) of one image, over the
// taps and every input channel, into out [32][32] (row: output channel): every tap over a chunk of
// kDirectChannels input channels, then the next chunk, so that the input a tap reads (8 KB a
// chunk) is still in L1 when the next tap reads it again shifted by its offset. (Every tap over
// all channels, 32 KB a tap on 512 channels: forward 8x512x7x7 -> 512 2.25-2.3 ms, 1.76-1.78 in
// chunks of 128; chunks of 256 1.86-2.0, of 64 1.78-1.82; 8x256x14x14 and the rest unchanged.)
constexpr int64_t kDirectChannels = 128;
// xq's planes are `pitch` pixels long (p.pitch, or 32 for a pointwise block laid out alone).
TRIDENT_AMX void direct_block(const uint16_t* a, const Plan& p, const std::vector<Tap>& taps, const uint16_t* xq, int64_t pitch,
                              int64_t m0, int64_t q0, float* out) {
  const int64_t a_stride = p.in_p * 2, b_stride = pitch * 4;
  zero_block();
  for (int64_t k0 = 0; k0 < p.in_p; k0 += kDirectChannels) {
    const int64_t k1 = std::min(p.in_p, k0 + kDirectChannels);
    for (const Tap& t : taps) {
      const uint16_t* at = a + (t.weight * p.out_p + m0) * p.in_p;
      const uint16_t* bt = xq + (t.phase * (p.in_p / 2) * pitch + q0 + t.offset) * 2;
      for (int64_t k = k0; k < k1; k += 32) {
        const uint16_t* b = bt + (k / 2) * pitch * 2;
        block_step(at + k, at + 16 * p.in_p + k, a_stride, b, b + 32, b_stride);
      }
    }
  }
  store_block(out, 32);
}

// 16 f32 lanes rounded to bf16 bits as detail::f32_to_bf16_bits rounds them (NOTE [Half
// conversions]: to nearest even; a NaN stays a NaN, quiet when its top payload bits are zero).
TRIDENT_AMX inline __m256i round_to_bf16(__m512 v) {
  const __m512i x = _mm512_castps_si512(v), top = _mm512_srli_epi32(x, 16);
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), _mm512_and_si512(top, _mm512_set1_epi32(1))), 16);
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __mmask16 no_payload = _mm512_testn_epi32_mask(top, _mm512_set1_epi32(0x7f));
  const __m512i nan_bits = _mm512_mask_or_epi32(top, no_payload, top, _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, nan_bits));
}

// A block's sums (+ bias) rounded once into the output planes dst [out][o.H][o.W] of its image:
// the computed pixels that land in them (Output), in runs of up to 16 lanes. Column step 2 (a
// stride-2 input gradient's phase) stores each run's values in every other lane of a masked
// store, which leaves the lanes between, the other phase's pixels, untouched.
TRIDENT_AMX void write_block(const float* blk, const Plan& p, const Output& o, int64_t m0, int64_t q0, const float* bias,
                             BFloat16* dst) {
  // The runs of up to 16 of the block's pixels that land in a row of the planes, the same for
  // each of its 32 channels: 32 pixels span at most 17 rows (Wp >= 2), one run each but one.
  struct Run {
    int64_t src, dst;     // the run's first pixel in the block, its destination in a plane
    __mmask16 lanes;      // the run's values
    __mmask32 every_other;  // column step 2: 16-bit lanes 0, 2, ... of the run's values
  };
  Run runs[32];
  int nruns = 0;
  const int64_t qend = std::min(q0 + 32, p.Hout * p.Wp), step = o.col_step;
  for (int64_t q = q0; q < qend;) {
    const int64_t i = q / p.Wp, row_start = i * p.Wp, row_end = std::min(qend, row_start + p.Wp);
    const int64_t j0 = std::max(q - row_start, o.j_lo), j1 = std::min(row_end - row_start, o.j_hi);
    q = row_end;
    if (i < o.i_lo || i >= o.i_hi) continue;
    for (int64_t j = j0; j < j1; j += 16) {
      const int64_t count = std::min<int64_t>(16, j1 - j);
      runs[nruns++] = {row_start + j - q0, (i * o.row_step + o.row_off) * o.W + j * step + o.col_off, first_lanes(count),
                       static_cast<__mmask32>(0x55555555u & ((uint32_t{1} << (2 * count - 1)) - 1u))};
    }
  }
  const int64_t plane_size = o.H * o.W;
  for (int64_t r = 0; r < 32 && m0 + r < p.out; ++r) {
    const float* s = blk + r * 32;
    const __m512 b = _mm512_set1_ps(bias != nullptr ? bias[m0 + r] : 0.0f);
    uint16_t* plane = reinterpret_cast<uint16_t*>(dst) + (m0 + r) * plane_size;
    for (int k = 0; k < nruns; ++k) {
      const Run& run = runs[k];
      const __m256i h = round_to_bf16(_mm512_add_ps(_mm512_maskz_loadu_ps(run.lanes, s + run.src), b));
      if (step == 1) {
        _mm256_mask_storeu_epi16(plane + run.dst, run.lanes, h);
      } else if (step == 2) {  // value k in the low half of 32-bit lane k: 16-bit lane 2k
        _mm512_mask_storeu_epi16(plane + run.dst, run.every_other, _mm512_cvtepu16_epi32(h));
      } else {
        alignas(32) uint16_t v[16];
        _mm256_store_si256(reinterpret_cast<__m256i*>(v), h);
        for (int64_t l = 0; l < 16 && ((run.lanes >> l) & 1) != 0; ++l) plane[run.dst + l * step] = v[l];
      }
    }
  }
}

// The packed weights a group of output-channel blocks may take (NOTE [AMX direct convolution]'s
// item order): the group's weights stay in L2 (2 MB a core on the AMX Xeons) while every image
// and pixel block of the chunk goes past them; a sixteenth of the copy budget where tests make
// that smaller.
int64_t weight_group_bytes() { return std::min<int64_t>(int64_t{3} << 19, conv_copy_budget_bytes() / 16); }

// Items [i0, i1) of a chunk of nb images: (group of output-channel blocks, image, block of 32
// pixels, pass, block of 32 output channels in the group), the passes and channel blocks
// innermost so that a block of the input stays in cache for all of them, and the groups
// outermost so that a group's weights are read from memory once, not once per pixel block:
// with every block in one group (a small layer) the order is (image, pixels, pass, channels). A
// block none of whose rows lands in the destination is skipped, and so are the group's blocks
// past the last.
// The 32 pixels [q0, q0 + 32) of one row of `in` channels (src [in][W], zero past W and past
// `in`) as TDPBF16PS's second operand, dst [in_p / 2][32][2].
TRIDENT_AMX void pack_pointwise_block(const uint16_t* src, const Plan& p, int64_t q0, uint16_t* dst) {
  for (int64_t half = 0; half < 2; ++half) {
    const int64_t q = q0 + 16 * half, count = std::clamp<int64_t>(p.Win - q, 0, 16);
    const __mmask16 lanes = first_lanes(count);
    for (int64_t k = 0; k < p.in_p / 2; ++k) {
      const int64_t c = 2 * k;
      const __m512i v = count > 0 && c < p.in ? interleave_rows(src + c * p.Win + q, p.Win, lanes, c + 1 < p.in) : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + (k * 32 + 16 * half) * 2, v);
    }
  }
}

// xq: the chunk's laid-out input; null for a one-row pointwise plan, whose blocks of input are
// laid out here from src (the chunk's images, [nb][in][Win]), once per block of pixels.
TRIDENT_AMX void direct_items(const uint16_t* a, const Plan& p, const std::vector<Pass>& passes, int64_t group, int64_t nb,
                              const uint16_t* xq, const uint16_t* src, const float* bias, BFloat16* dst, int64_t i0, int64_t i1) {
  load_tile_config();
  alignas(64) float blk[32 * 32];
  std::vector<uint16_t> local(xq == nullptr ? static_cast<size_t>(p.in_p * 32) : 0);
  int64_t local_n = -1, local_q = -1;
  const int64_t qb = p.Qout / 32, np = static_cast<int64_t>(passes.size()), per_group = nb * qb * np * group;
  const Output& o0 = passes.front().out;  // every pass writes planes of the same size
  // Item i0's (group, image, pixel block, pass, block in the group), then counters stepped item by
  // item (divisions per item were a tenth of a small 1x1 convolution's items).
  const int64_t j0 = i0 % per_group;
  int64_t gi = i0 / per_group, n = j0 / (qb * np * group), qi = j0 / (np * group) % qb, pi = j0 / group % np, mi = j0 % group;
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t m0 = (gi * group + mi) * 32, q0 = qi * 32;
    const Pass& pass = passes[static_cast<size_t>(pi)];
    if (m0 < p.out_p && q0 / p.Wp < pass.out.i_hi && (q0 + 31) / p.Wp >= pass.out.i_lo) {
      if (xq != nullptr) {
        direct_block(a, p, pass.taps, xq + n * p.phases * (p.in_p / 2) * p.pitch * 2, p.pitch, m0, q0, blk);
      } else {
        if (n != local_n || q0 != local_q) pack_pointwise_block(src + n * p.in * p.Win, p, q0, local.data());
        local_n = n;
        local_q = q0;
        direct_block(a, p, pass.taps, local.data(), 32, m0, 0, blk);
      }
      write_block(blk, p, pass.out, m0, q0, bias, dst + n * p.out * o0.H * o0.W);
    }
    if (++mi < group) continue;  // the next block of the group, else carry into pass, pixels, image, group
    mi = 0;
    if (++pi < np) continue;
    pi = 0;
    if (++qi < qb) continue;
    qi = 0;
    if (++n < nb) continue;
    n = 0;
    ++gi;
  }
  release_tiles();
}

// dst [N][out][H][W] (the passes' Output planes) = the passes' convolutions of src
// [N][in][Hin][Win] by the packed weights a.
void direct_conv(const Plan& p, const std::vector<Pass>& passes, int64_t N, const uint16_t* src, const Tensor& a,
                 const float* bias, BFloat16* dst) {
  // A one-row pointwise plan lays each block of input out where it is used, no copy of the whole.
  const bool local = p.one_row_pointwise();
  const int64_t image_elems = p.phases * (p.in_p / 2) * p.pitch * 2;
  const int64_t chunk = local ? std::max<int64_t>(N, 1) : images_per_chunk(N, image_elems * static_cast<int64_t>(sizeof(uint16_t)));
  Tensor xq_t = local ? Tensor() : empty({chunk * image_elems}, DType::BF16);
  uint16_t* xq = local ? nullptr : bits(xq_t);
  const uint16_t* ap = static_cast<const uint16_t*>(a.data_ptr());
  int64_t taps = 0;
  for (const Pass& pass : passes) taps += static_cast<int64_t>(pass.taps.size());
  const int64_t mb = p.out_p / 32, block_bytes = taps * 32 * p.in_p * static_cast<int64_t>(sizeof(uint16_t));
  // As many groups as the budget asks for, of equal size (a last group of one block would leave
  // its thread most of the other's items to wait for).
  const int64_t most = std::max<int64_t>(weight_group_bytes() / block_bytes, 1);
  const int64_t groups = (mb + most - 1) / most, group = (mb + groups - 1) / groups;
  const int64_t items_per_image = (p.Qout / 32) * static_cast<int64_t>(passes.size()) * group * groups;
  const int64_t dst_image = p.out * passes.front().out.H * passes.front().out.W;
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t nb = std::min(chunk, N - n0);
    const uint16_t* s = src + n0 * p.in * p.Hin * p.Win;
    if (!local) parallel_for(0, nb * p.phases * (p.in_p / 2), 1, [&](int64_t i0, int64_t i1) { pack_pairs(s, p, i0, i1, xq); });
    BFloat16* d = dst + n0 * dst_image;
    parallel_for(0, nb * items_per_image, 1,
                 [&](int64_t i0, int64_t i1) { direct_items(ap, p, passes, group, nb, xq, s, bias, d, i0, i1); });
  }
}

// ---- weight gradient ----

// Input planes [images][C][H][W] -> plain phase planes [images][phases][in_p][pitch], zero
// elsewhere; items (image, phase, channel) [i0, i1).
TRIDENT_AMX void pack_planes(const uint16_t* src, const Plan& p, int64_t i0, int64_t i1, uint16_t* dst) {
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t n = i / (p.phases * p.in_p), ph = i / p.in_p % p.phases, c = i % p.in_p;
    uint16_t* d = dst + i * p.pitch;
    std::memset(d, 0, static_cast<size_t>(p.pitch) * sizeof(uint16_t));
    if (c >= p.in) continue;
    const uint16_t* s = src + (n * p.in + c) * p.Hin * p.Win;
    for (int64_t r = 0; r < p.Hp; ++r) {
      const int64_t h = p.input_row(ph, r);
      if (h < 0 || h >= p.Hin) continue;
      if (p.sw == 1) {
        const auto [j_lo, j_hi] = p.unit_columns(ph);
        if (j_hi > j_lo)
          std::memcpy(d + r * p.Wp + j_lo, s + h * p.Win + j_lo + p.input_col(ph, 0), static_cast<size_t>(j_hi - j_lo) * sizeof(uint16_t));
        continue;
      }
      if (p.sw == 2) {
        const EveryOther e(p.input_col(ph, 0), p.Win, p.Wp);
        for (int64_t j = e.j_lo; j < e.j_hi; j += 16) {
          const __mmask16 m = first_lanes(e.j_hi - j);
          _mm256_mask_storeu_epi16(d + r * p.Wp + j, m, _mm512_cvtepi32_epi16(every_other(s + h * p.Win, e, j, m)));
        }
        continue;
      }
      for (int64_t j = 0; j < p.Wp; ++j) {
        const int64_t w = p.input_col(ph, j);
        if (w >= 0 && w < p.Win) d[r * p.Wp + j] = s[h * p.Win + w];
      }
    }
  }
}

// gy [images][out][Hout][Wout] -> [images][Qout / 2][out_p][2]: for each pair of computed pixels,
// every output channel's two values, zero on the dropped columns, past Hout Wp and past `out`;
// items (image, output row) [i0, i1): 16 channels x 32 pixels at a time, as 16 x 16 pairs
// transposed in registers.
TRIDENT_AMX void pack_gradient_pairs(const uint16_t* gy, const Plan& p, int64_t i0, int64_t i1, uint16_t* dst) {
  const int64_t qpairs = p.Qout / 2, row_pairs = p.Wp / 2;
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t n = i / p.Hout, oh = i % p.Hout;
    uint16_t* base = dst + (n * qpairs + oh * row_pairs) * p.out_p * 2;
    for (int64_t o0 = 0; o0 < p.out_p; o0 += 16) {
      for (int64_t w0 = 0; w0 < p.Wp; w0 += 32) {
        const int64_t valid = std::clamp<int64_t>(p.Wout - w0, 0, 32);
        const __mmask32 m = valid >= 32 ? ~__mmask32(0) : static_cast<__mmask32>((uint32_t{1} << valid) - 1u);
        __m512i v[16];
        for (int r = 0; r < 16; ++r) {
          const int64_t o = o0 + r;
          v[r] = o < p.out && valid > 0 ? _mm512_maskz_loadu_epi16(m, gy + ((n * p.out + o) * p.Hout + oh) * p.Wout + w0)
                                        : _mm512_setzero_si512();
        }
        transpose16x16(v);
        const int64_t pairs = std::min<int64_t>(16, (p.Wp - w0) / 2);
        for (int64_t j = 0; j < pairs; ++j) _mm512_storeu_si512(base + ((w0 / 2 + j) * p.out_p + o0) * 2, v[j]);
      }
    }
    if (oh + 1 == p.Hout) {  // the pixels past the last row, up to Qout
      uint16_t* tail = dst + (n * qpairs + p.Hout * row_pairs) * p.out_p * 2;
      std::memset(tail, 0, static_cast<size_t>((qpairs - p.Hout * row_pairs) * p.out_p * 2) * sizeof(uint16_t));
    }
  }
}

// The spans [s0, s1) of a chunk of nb images' computed pixels, numbered one image after the other,
// that weight_items takes one at a time through all of its items, so that a span's planes stay in
// cache for them (item by item over all pixels, every item streamed the whole chunk from memory:
// the weight gradient of 8x64x56x56 -> 64 took 2.5 ms, 1.3 ms this way): an image in spans of at
// most kWeightSpan pixels, or, for maps of under 128 computed pixels, as many whole images as one
// span holds, so that each item's sums are loaded and stored once per span, not once per image
// (8x512x7x7 -> 512, 96 pixels: forward + backward 13.7-14.5 -> 12.6-13.7 ms; on 14 x 14, 224
// pixels, spans of four images were 3% slower than one).
constexpr int64_t kWeightSpan = 1024;
std::vector<std::pair<int64_t, int64_t>> weight_spans(const Plan& p, int64_t nb) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  if (p.Qout >= kWeightSpan) {
    for (int64_t n = 0; n < nb; ++n)
      for (int64_t s0 = 0; s0 < p.Qout; s0 += kWeightSpan) spans.emplace_back(n * p.Qout + s0, n * p.Qout + std::min(p.Qout, s0 + kWeightSpan));
  } else {
    const int64_t images = p.Qout < 128 ? kWeightSpan / p.Qout : 1;
    for (int64_t n = 0; n < nb; n += images) spans.emplace_back(n * p.Qout, std::min(nb, n + images) * p.Qout);
  }
  return spans;
}

// gw [O][C][taps] for input channels [c0, c0 + 32) and output channels [o0, o0 + 32) = the block's
// sums `sums` [taps][32 c][32 o], rounded once. gw's rows are read as the matrix [O][C taps],
// whose column j = c taps + t is the sums' row (t, c - c0): 16 columns' 16 o loaded as vectors,
// transposed in registers, each o's 16 columns rounded and stored at once. (Per tap transposes of
// sums laid out [taps][in_p][out_p], then a scalar interleave of the taps, were 13% of a
// 8x512x7x7 -> 512 forward + backward in perf: each 64-byte line of its 9.4 MB of sums read
// alone, 2 KB from the next.)
TRIDENT_AMX void weight_block_epilogue(const float* sums, const Plan& p, int64_t O, int64_t C, int64_t c0, int64_t o0, BFloat16* gw) {
  uint16_t* g = reinterpret_cast<uint16_t*>(gw);
  const int64_t nj = std::min<int64_t>(32, C - c0) * p.taps;
  for (int64_t h = 0; h < 32 && o0 + h < O; h += 16) {
    const int64_t no = std::min<int64_t>(16, O - o0 - h);
    for (int64_t j0 = 0; j0 < nj; j0 += 16) {
      __m512i v[16];
      for (int64_t k = 0, j = j0; k < 16; ++k, j = std::min(j + 1, nj - 1))  // past nj: a row not stored
        v[k] = _mm512_loadu_si512(sums + ((j % p.taps) * 32 + j / p.taps) * 32 + h);
      transpose16x16(v);  // v[o]: lanes j0..j0 + 15
      const __mmask16 m = first_lanes(nj - j0);
      for (int64_t o = 0; o < no; ++o)
        _mm256_mask_storeu_epi16(g + ((o0 + h + o) * C + c0) * p.taps + j0, m, round_to_bf16(_mm512_castsi512_ps(v[o])));
    }
  }
}

// Items [i0, i1) of (block of 32 input channels, block of 32 output channels, tap): the block's
// sums over the chunk's nb images and every computed pixel of the input planes at the tap's
// offset times gy, in acc [in_p / 32][out_p / 32][taps][32][32] (`load`: added to the sums of the
// chunks before), the spans of pixels outermost. With gw (the last chunk, items of whole blocks)
// the last span's sums go to a buffer of the thread's instead, rounded into gw as soon as the
// block's last tap is done, while they are in cache (a pass over acc after all items read 9.4 MB
// back from memory for a 512 -> 512 3x3, 8% of a 8x512x7x7 -> 512 forward + backward in perf).
TRIDENT_AMX void weight_items(const Plan& p, const uint16_t* xp, const uint16_t* gq, std::span<const std::pair<int64_t, int64_t>> spans,
                              float* acc, bool load, int64_t O, int64_t C, BFloat16* gw, int64_t i0, int64_t i1) {
  load_tile_config();
  const int64_t ob = p.out_p / 32, qpairs = p.Qout / 2;
  std::vector<float> own(gw != nullptr ? static_cast<size_t>(p.taps * 1024) : 0);
  for (size_t si = 0; si < spans.size(); ++si) {
    const auto [s0, s1] = spans[si];
    const bool last = gw != nullptr && si + 1 == spans.size();
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i % p.taps, blk = i / p.taps, c0 = blk / ob * 32, o0 = blk % ob * 32;
      float* c = acc + (blk * p.taps + t) * 1024;
      if (load || s0 > 0) {
        load_block(c, 32);
      } else {
        zero_block();
      }
      // Blocks of 32 pixels never straddle two images (Qout is a multiple of 32): image n's
      // planes and gy from pointers stepped image by image, without a division per block.
      int64_t n = s0 / p.Qout, q0 = s0 % p.Qout;
      const uint16_t* a = xp + ((n * p.phases + p.phase(t)) * p.in_p + c0) * p.pitch + p.offset(t);
      const uint16_t* b = gq + (n * qpairs * p.out_p + o0) * 2;
      for (int64_t k = s0; k < s1; k += 32) {
        const uint16_t* bq = b + (q0 / 2) * p.out_p * 2;
        block_step(a + q0, a + 16 * p.pitch + q0, p.pitch * 2, bq, bq + 32, p.out_p * 4);
        if ((q0 += 32) == p.Qout) {
          q0 = 0;
          a += p.phases * p.in_p * p.pitch;
          b += qpairs * p.out_p * 2;
        }
      }
      store_block(last ? own.data() + t * 1024 : c, 32);
      if (last && t + 1 == p.taps) weight_block_epilogue(own.data(), p, O, C, c0, o0, gw);
    }
  }
  release_tiles();
}

}  // namespace

namespace {
// The weight gradient's images [n0, n0 + nb): x into the planes xp, gy into pixel pairs gq; their spans.
std::vector<std::pair<int64_t, int64_t>> pack_weight_chunk(const Plan& p, const BFloat16* gy, const BFloat16* x, const Conv2dGeometry& g,
                                                           int64_t n0, int64_t nb, uint16_t* xp, uint16_t* gq) {
  const uint16_t* xs = bits(x) + n0 * g.C * g.H * g.W;
  const uint16_t* gs = bits(gy) + n0 * g.O * g.OH * g.OW;
  parallel_for(0, nb * p.phases * p.in_p, 1, [&](int64_t i0, int64_t i1) { pack_planes(xs, p, i0, i1, xp); });
  parallel_for(0, nb * p.Hout, 1, [&](int64_t i0, int64_t i1) { pack_gradient_pairs(gs, p, i0, i1, gq); });
  return weight_spans(p, nb);
}

// NOTE [AMX weight-gradient span groups], the weight gradient's chunk loop for few items.
void weight_by_span_groups(const Plan& p, const BFloat16* gy, const BFloat16* x, BFloat16* gw, const Conv2dGeometry& g,
                           int64_t chunk, uint16_t* xp, uint16_t* gq, int64_t groups) {
  const int64_t blocks = (p.in_p / 32) * (p.out_p / 32), items = blocks * p.taps;
  Tensor part_t = zeros({groups * items * 1024}, DType::F32);  // zero: every group's first span loads
  float* part = part_t.data<float>();
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0);
    const auto spans = pack_weight_chunk(p, gy, x, g, n0, nb, xp, gq);
    const int64_t ns = static_cast<int64_t>(spans.size());
    parallel_for(0, groups * items, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t grp = i / items, it = i % items;
        const std::span<const std::pair<int64_t, int64_t>> mine(spans.data() + grp * ns / groups, spans.data() + (grp + 1) * ns / groups);
        weight_items(p, xp, gq, mine, part + grp * items * 1024, true, g.O, g.C, nullptr, it, it + 1);
      }
    });
  }
  const int64_t ob = p.out_p / 32;
  parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> sums(static_cast<size_t>(p.taps * 1024));
    for (int64_t b = b0; b < b1; ++b) {
      for (int64_t e = 0; e < p.taps * 1024; ++e) {
        float v = part[b * p.taps * 1024 + e];
        for (int64_t grp = 1; grp < groups; ++grp) v += part[(grp * items + b * p.taps) * 1024 + e];
        sums[static_cast<size_t>(e)] = v;
      }
      weight_block_epilogue(sums.data(), p, g.O, g.C, b / ob * 32, b % ob * 32, gw);
    }
  });
}
}  // namespace

bool amx_conv_shifts_columns(const Conv2dGeometry& g) { return Plan(g.C, g.O, g.H, g.W, g, g.ph, g.pw, g.sh, g.sw, true).shifted; }

void amx_conv_forward(const BFloat16* x, const BFloat16* w, const BFloat16* bias, BFloat16* y, const Conv2dGeometry& g) {
  const Plan p = pointwise_rows(g) ? Plan(g.C, g.O, 1, g.H * g.W, g, 0, 0, 1, 1, false) : Plan(g.C, g.O, g.H, g.W, g, g.ph, g.pw, g.sh, g.sw, true);
  TRIDENT_CHECK(p.Hout * p.Wout == g.OH * g.OW, "amx_conv_forward: output size mismatch");
  const Tensor a = pack_weights(bits(w), g.O, g.C, p.taps, false, p.out_p, p.in_p);
  std::vector<float> b;
  if (bias != nullptr) {
    b.resize(static_cast<size_t>(g.O));
    for (int64_t o = 0; o < g.O; ++o) b[static_cast<size_t>(o)] = static_cast<float>(bias[o]);
  }
  direct_conv(p, {every_tap(p)}, g.N, bits(x), a, bias != nullptr ? b.data() : nullptr, y);
}

void amx_conv_backward_input(const BFloat16* gy, const BFloat16* w, BFloat16* gx, const Conv2dGeometry& g) {
  const int64_t taps = g.kH * g.kW;
  if (g.sh == 1 && g.sw == 1 && g.ph <= (g.kH - 1) * g.dh && g.pw <= (g.kW - 1) * g.dw) {
    // gy zero-padded by (k - 1) d - p, every tap, the computed grid gx's own.
    const Plan p = pointwise_rows(g) ? Plan(g.O, g.C, 1, g.OH * g.OW, g, 0, 0, 1, 1, false)
                                     : Plan(g.O, g.C, g.OH, g.OW, g, (g.kH - 1) * g.dh - g.ph, (g.kW - 1) * g.dw - g.pw, 1, 1, true);
    TRIDENT_CHECK(p.Hout * p.Wout == g.H * g.W, "amx_conv_backward_input: output size mismatch");
    direct_conv(p, {every_tap(p)}, g.N, bits(gy), pack_weights(bits(w), g.O, g.C, taps, true, p.out_p, p.in_p), nullptr, gx);
    return;
  }
  // By phases of gx (NOTE [AMX direct convolution]): padded row P = ih + ph = i sh + a takes the
  // taps kh with kh dh = u sh + a, from gy row i - u. gy is zero-padded by U = max u (V = max v)
  // on each side and read, for computed pixel (i, j), at (i + U - u, j + V - v): a stride-1
  // convolution of kernel (U + 1) x (V + 1) of which phase (a, b) has only its own taps.
  const int64_t U = (g.kH - 1) * g.dh / g.sh, V = (g.kW - 1) * g.dw / g.sw;
  Conv2dGeometry gp = g;
  gp.kH = U + 1;
  gp.kW = V + 1;
  gp.dh = gp.dw = 1;
  const Plan p(g.O, g.C, g.OH, g.OW, gp, U, V, 1, 1, false);  // its passes' taps read one plane
  std::vector<Pass> passes;
  std::vector<bool> row_done(static_cast<size_t>(g.H), false), col_done(static_cast<size_t>(g.W), false);
  for (int64_t a = 0; a < g.sh; ++a) {
    for (int64_t b = 0; b < g.sw; ++b) {
      Pass pass{{}, Output(p, g.H, g.W, g.sh, a - g.ph, g.sw, b - g.pw)};
      for (int64_t kh = 0; kh < g.kH; ++kh)
        for (int64_t kw = 0; kw < g.kW; ++kw)
          if (kh * g.dh % g.sh == a && kw * g.dw % g.sw == b)
            pass.taps.push_back({taps - 1 - (kh * g.kW + kw), 0, (U - kh * g.dh / g.sh) * p.Wp + V - kw * g.dw / g.sw});
      if (pass.taps.empty()) continue;
      for (int64_t i = pass.out.i_lo; i < pass.out.i_hi; ++i) row_done[static_cast<size_t>(i * g.sh + a - g.ph)] = true;
      for (int64_t j = pass.out.j_lo; j < pass.out.j_hi; ++j) col_done[static_cast<size_t>(j * g.sw + b - g.pw)] = true;
      passes.push_back(std::move(pass));
    }
  }
  // A pixel no pass writes (no tap of its phase, or past what any gy reaches) has gradient 0.
  if (passes.empty() || std::count(row_done.begin(), row_done.end(), false) > 0 || std::count(col_done.begin(), col_done.end(), false) > 0)
    std::memset(static_cast<void*>(gx), 0, static_cast<size_t>(g.N * g.C * g.H * g.W) * sizeof(BFloat16));
  if (passes.empty()) return;
  direct_conv(p, passes, g.N, bits(gy), pack_weights(bits(w), g.O, g.C, taps, true, p.out_p, p.in_p), nullptr, gx);
}

void amx_conv_backward_weight(const BFloat16* gy, const BFloat16* x, BFloat16* gw, const Conv2dGeometry& g) {
  const Plan p(g.C, g.O, g.H, g.W, g, g.ph, g.pw, g.sh, g.sw, true);
  TRIDENT_CHECK(p.Hout == g.OH && p.Wout == g.OW, "amx_conv_backward_weight: output size mismatch");
  const int64_t qpairs = p.Qout / 2;
  const int64_t per_image = (p.phases * p.in_p * p.pitch + qpairs * p.out_p * 2) * static_cast<int64_t>(sizeof(uint16_t));
  const int64_t chunk = images_per_chunk(g.N, per_image);
  Tensor xp_t = empty({chunk * p.phases * p.in_p * p.pitch}, DType::BF16), gq_t = empty({chunk * qpairs * p.out_p * 2}, DType::BF16);
  uint16_t *xp = bits(xp_t), *gq = bits(gq_t);
  const int64_t blocks = (p.in_p / 32) * (p.out_p / 32);
  // NOTE [AMX weight-gradient span groups]: with fewer than 8 items (block, tap) the spans of
  // pixels are cut into G = ceil(8 / items) groups, each summed apart into sums of its own, and
  // the groups' sums added in group order at the end: enough work units for every thread where
  // one item (32 -> 32 channels 1x1, AmoebaNet's commonest) left all threads but one waiting.
  // G depends on the geometry only, so the sums, in their order, do not depend on the threads.
  const int64_t items = blocks * p.taps, groups = items < 8 ? (8 + items - 1) / items : 1;
  if (groups > 1) return weight_by_span_groups(p, gy, x, gw, g, chunk, xp, gq, groups);
  // The epilogue goes into the last chunk's items where there are blocks enough for every thread to
  // take whole blocks evenly; else items of one tap and the epilogue after them.
  const bool fused = blocks >= 4 * int64_t{get_num_threads()};
  const bool needs_acc = !fused || chunk < g.N || weight_spans(p, chunk).size() > 1;
  Tensor acc_t = needs_acc ? empty({blocks * p.taps * 1024}, DType::F32) : Tensor();
  float* acc = needs_acc ? acc_t.data<float>() : nullptr;
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t nb = std::min(chunk, g.N - n0);
    const auto spans = pack_weight_chunk(p, gy, x, g, n0, nb, xp, gq);
    if (fused && n0 + nb == g.N) {
      parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) { weight_items(p, xp, gq, spans, acc, n0 > 0, g.O, g.C, gw, b0 * p.taps, b1 * p.taps); });
    } else {
      parallel_for(0, blocks * p.taps, 1, [&](int64_t i0, int64_t i1) { weight_items(p, xp, gq, spans, acc, n0 > 0, g.O, g.C, nullptr, i0, i1); });
    }
  }
  if (!fused) {
    const int64_t ob = p.out_p / 32;
    parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) weight_block_epilogue(acc + b * p.taps * 1024, p, g.O, g.C, b / ob * 32, b % ob * 32, gw);
    });
  }
}

#else  // no AMX kernels in this build: amx_conv_applies is never true (bf16_gemm_kernel() is None)

bool amx_conv_shifts_columns(const Conv2dGeometry&) { return false; }
void amx_conv_forward(const BFloat16*, const BFloat16*, const BFloat16*, BFloat16*, const Conv2dGeometry&) {
  TRIDENT_FAIL("amx_conv_forward: this build has no AMX kernels");
}
void amx_conv_backward_input(const BFloat16*, const BFloat16*, BFloat16*, const Conv2dGeometry&) {
  TRIDENT_FAIL("amx_conv_backward_input: this build has no AMX kernels");
}
void amx_conv_backward_weight(const BFloat16*, const BFloat16*, BFloat16*, const Conv2dGeometry&) {
  TRIDENT_FAIL("amx_conv_backward_weight: this build has no AMX kernels");
}

#endif

}  // namespace trident::cpu
