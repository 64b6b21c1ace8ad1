// Weight gradients of convolutions with few channels (NOTE [Narrow weight gradients] in
// ops/cpu/conv_narrow.h).
#include "ops/cpu/conv_narrow.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/conv_simd.h"
#include "ops/cpu/isa.h"

namespace trident::cpu {
namespace {
using namespace conv_simd;

// The products of channels (O C) taken (NOTE [Narrow weight gradients]).
constexpr int64_t kNarrowF32 = 256, kNarrowBf16 = 128;
constexpr int64_t kBandPixels = 2048;  // output pixels per work item, about (whole rows)
int g_narrow_mode = -1;

// Where an item's copies put things: output rows [band R, band R + R) at pitch Wp (the zero-padded
// input's), band_q pixels in all (whole vectors of 16); the input's padded rows from band R on,
// x_len floats per channel, zero past the rows that exist. Pair j = c taps + t reads input channel
// c at q + j_off[j].
struct Layout {
  int64_t Wp, R, bands, taps, J, band_q, x_len;
  std::vector<int64_t> j_off;
  explicit Layout(const Conv2dGeometry& g) {
    Wp = g.W + 2 * g.pw;
    R = std::clamp<int64_t>(kBandPixels / std::max<int64_t>(Wp, 1), 1, g.OH);
    bands = (g.OH + R - 1) / R;
    taps = g.kH * g.kW;
    J = g.C * taps;
    band_q = (R * Wp + 15) / 16 * 16;
    const int64_t max_off = (g.kH - 1) * g.dh * Wp + (g.kW - 1) * g.dw;
    x_len = (std::max(band_q + max_off, (R + (g.kH - 1) * g.dh) * Wp) + 15) / 16 * 16;
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t t = 0; t < taps; ++t) j_off.push_back(c * x_len + (t / g.kW) * g.dh * Wp + (t % g.kW) * g.dw);
  }
};

template <typename T>
inline void widen_row(const T* src, int64_t n, float* dst) {
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
  }
}

// Image n's output rows of band b: gy into gp [O][band_q], the input rows they read into
// xp [C][x_len], zeros elsewhere.
template <typename T>
void pack_item(const T* gy, const T* x, const Conv2dGeometry& g, const Layout& l, int64_t n, int64_t b, float* gp, float* xp) {
  const int64_t r0 = b * l.R, rows = std::min(l.R, g.OH - r0);
  std::fill_n(gp, g.O * l.band_q, 0.0f);
  for (int64_t o = 0; o < g.O; ++o)
    for (int64_t r = 0; r < rows; ++r) widen_row(gy + ((n * g.O + o) * g.OH + r0 + r) * g.OW, g.OW, gp + o * l.band_q + r * l.Wp);
  std::fill_n(xp, g.C * l.x_len, 0.0f);
  const int64_t in_rows = std::min(rows + (g.kH - 1) * g.dh, l.x_len / l.Wp);
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t i = 0; i < in_rows; ++i) {
      const int64_t h = r0 + i - g.ph;
      if (h >= 0 && h < g.H) widen_row(x + ((n * g.C + c) * g.H + h) * g.W, g.W, xp + c * l.x_len + i * l.Wp + g.pw);
    }
}

// out[o][j] (rows J apart) = the sums over the item's pixels of gp row o times xp at j_off[j],
// for the MO x MJ block at (o0, j0); rows and pairs past O and J repeat the last ones and are
// not stored.
template <typename Vec, int MO, int MJ>
inline void block_sums(const float* gp, const float* xp, const Layout& l, int64_t O, int64_t o0, int64_t j0, float* out) {
  constexpr int L = kLanes<Vec>;
  const float* gr[MO];
  const float* xr[MJ];
  for (int i = 0; i < MO; ++i) gr[i] = gp + std::min<int64_t>(o0 + i, O - 1) * l.band_q;
  for (int j = 0; j < MJ; ++j) xr[j] = xp + l.j_off[static_cast<size_t>(std::min<int64_t>(j0 + j, l.J - 1))];
  Vec acc[MO][MJ];
  for (int i = 0; i < MO; ++i)
    for (int j = 0; j < MJ; ++j) acc[i][j] = vsplat<Vec>(0.0f);
  for (int64_t q = 0; q < l.band_q; q += L) {
    Vec gv[MO];
    for (int i = 0; i < MO; ++i) gv[i] = vload<Vec>(gr[i] + q);
    for (int j = 0; j < MJ; ++j) {
      const Vec xv = vload<Vec>(xr[j] + q);
      for (int i = 0; i < MO; ++i) acc[i][j] += gv[i] * xv;
    }
  }
  for (int i = 0; i < MO && o0 + i < O; ++i)
    for (int j = 0; j < MJ && j0 + j < l.J; ++j) {
      alignas(sizeof(Vec)) float lanes[L];
      std::memcpy(lanes, &acc[i][j], sizeof(Vec));
      float s = 0.0f;
      for (int k = 0; k < L; ++k) s += lanes[k];
      out[(o0 + i) * l.J + j0 + j] = s;
    }
}

template <typename Vec, int MO, int MJ>
inline void item_sums(const float* gp, const float* xp, const Layout& l, int64_t O, float* out) {
  for (int64_t o0 = 0; o0 < O; o0 += MO)
    for (int64_t j0 = 0; j0 < l.J; j0 += MJ) block_sums<Vec, MO, MJ>(gp, xp, l, O, o0, j0, out);
}

// 2 x 6 blocks with AVX2 (12 accumulators, 2 rows of gy and a row of the input: 15 of 16
// registers), 4 x 6 with AVX-512 (24 + 4 + 1 of 32).
TRIDENT_CPU_CLONES void item_sums_f32(const float* gp, const float* xp, const Layout& l, int64_t O, float* out) {
  item_sums<v8f, 2, 6>(gp, xp, l, O, out);
}
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
__attribute__((TRIDENT_TARGET_V4, flatten)) void item_sums_f32_avx512(const float* gp, const float* xp, const Layout& l, int64_t O,
                                                                    float* out) {
  item_sums<v16f, 4, 6>(gp, xp, l, O, out);
}
#endif

// total[o][j] (f64) = the sums over every image and pixel.
template <typename T>
void narrow_sums(const T* gy, const T* x, const Conv2dGeometry& g, std::vector<double>& total) {
  const Layout l(g);
  const int64_t items = g.N * l.bands, per_item = g.O * l.J;
  // The items' partial sums held at once: a quarter of the convolutions' copy budget.
  const int64_t chunk = std::clamp<int64_t>(conv_copy_budget_bytes() / 4 / (per_item * static_cast<int64_t>(sizeof(float))), 1, items);
  std::vector<float> part(static_cast<size_t>(chunk * per_item));
  total.assign(static_cast<size_t>(per_item), 0.0);
  for (int64_t i0 = 0; i0 < items; i0 += chunk) {
    const int64_t k = std::min(chunk, items - i0);
    parallel_for(0, k, 1, [&](int64_t a, int64_t b) {
      std::vector<float> gp(static_cast<size_t>(g.O * l.band_q)), xp(static_cast<size_t>(g.C * l.x_len));
      for (int64_t i = a; i < b; ++i) {
        pack_item(gy, x, g, l, (i0 + i) / l.bands, (i0 + i) % l.bands, gp.data(), xp.data());
        float* out = part.data() + i * per_item;
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
        if (cpu_avx512_kernels()) {
          item_sums_f32_avx512(gp.data(), xp.data(), l, g.O, out);
          continue;
        }
#endif
        item_sums_f32(gp.data(), xp.data(), l, g.O, out);
      }
    });
    // The items' sums in item order, whatever the threads.
    parallel_for(0, per_item, 256, [&](int64_t e0, int64_t e1) {
      for (int64_t i = 0; i < k; ++i)
        for (int64_t e = e0; e < e1; ++e) total[static_cast<size_t>(e)] += part[static_cast<size_t>(i * per_item + e)];
    });
  }
}

}  // namespace

bool narrow_backward_weight_applies(const Conv2dGeometry& g, bool bf16) {
  if (g.groups != 1 || g.sh != 1 || g.sw != 1 || g.N <= 0 || g.C <= 0 || g.O <= 0 || g.OH <= 0 || g.OW <= 0) return false;
  if (g_narrow_mode >= 0) return g_narrow_mode == 1;
  return bf16 ? g.C * g.O <= kNarrowBf16 : g.kH * g.kW > 1 && g.C * g.O <= kNarrowF32;
}

int set_narrow_backward_weight_for_testing(int mode) { return std::exchange(g_narrow_mode, mode < 0 ? -1 : mode > 0 ? 1 : 0); }

void narrow_backward_weight(const float* gy, const float* x, float* gw, const Conv2dGeometry& g) {
  std::vector<double> total;
  narrow_sums(gy, x, g, total);
  for (size_t e = 0; e < total.size(); ++e) gw[e] = static_cast<float>(total[e]);
}

void narrow_backward_weight(const BFloat16* gy, const BFloat16* x, BFloat16* gw, const Conv2dGeometry& g) {
  std::vector<double> total;
  narrow_sums(gy, x, g, total);
  for (size_t e = 0; e < total.size(); ++e) gw[e] = BFloat16(static_cast<float>(total[e]));
}

}  // namespace trident::cpu
