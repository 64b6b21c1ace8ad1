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
#include <vector>

#include "core/dtype.h"
#include "core/parallel.h"

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
template <typename T>
T dot(const T* __restrict a, const T* __restrict b, int64_t n) {
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

// Per-thread scratch: the phase buffer of one padded input plane, and a plane at pitch Wq.
template <typename T>
struct PhasePlanes {
  const Conv2dGeometry& g;
  const PhaseLayout& L;
  std::vector<T> phased, pitched;

  PhasePlanes(const Conv2dGeometry& geo, const PhaseLayout& layout, int64_t pitched_elems)
      : g(geo), L(layout), phased(static_cast<size_t>(layout.phases * layout.plane)),
        pitched(static_cast<size_t>(std::max<int64_t>(pitched_elems, 1)), T(0)) {}

  // Splits plane x [H, W] into the phases (the padding stays zero).
  void load(const T* x) {
    std::fill(phased.begin(), phased.end(), T(0));
    for (int64_t h = 0; h < g.H; ++h) for_each_phase_column(h, [&](T* dst, int64_t w0, int64_t n) {
      const T* row = x + h * g.W + w0;
      for (int64_t i = 0; i < n; ++i) dst[i] = row[i * g.sw];
    });
  }
  // The inverse for a gradient: gx [H, W] = the input positions of the phases.
  void store(T* gx) {
    for (int64_t h = 0; h < g.H; ++h) for_each_phase_column(h, [&](T* src, int64_t w0, int64_t n) {
      T* row = gx + h * g.W + w0;
      for (int64_t i = 0; i < n; ++i) row[i * g.sw] = src[i];
    });
  }

 private:
  // For input row h and each column phase b: f(the phase row's element for input column
  // w0, w0, count), where w0, w0 + sw, ... are the input columns in phase b.
  template <typename F>
  void for_each_phase_column(int64_t h, const F& f) {
    const int64_t r = h + g.ph;
    for (int64_t b = 0; b < g.sw; ++b) {
      const int64_t w0 = ((b - g.pw) % g.sw + g.sw) % g.sw;  // first w with (w + pw) % sw == b
      if (w0 >= g.W) continue;
      const int64_t n = (g.W - w0 + g.sw - 1) / g.sw;
      T* dst = phased.data() + ((r % g.sh) * g.sw + b) * L.plane + (r / g.sh) * L.Wq + (w0 + g.pw) / g.sw;
      f(dst, w0, n);
    }
  }
};

// The weights of a group's taps, contiguous (taps of a phase need not be adjacent in w).
template <typename T>
const T* group_weights(const PhaseLayout::Group& gr, const T* wp, int64_t kW, std::vector<T>& buf) {
  buf.resize(gr.kw.size());
  for (size_t i = 0; i < gr.kw.size(); ++i) buf[i] = wp[gr.kh * kW + gr.kw[i]];
  return buf.data();
}

}  // namespace

template <typename T>
void depthwise_forward(const T* x, const T* w, const T* bias, T* y, const Conv2dGeometry& g) {
  const int64_t mult = g.O / g.C, khw = g.kH * g.kW, HW = g.H * g.W, P = g.OH * g.OW;
  const PhaseLayout L(g);
  // Threads take input planes (n, c): each is split once for its `mult` output planes.
  parallel_for(0, g.N * g.C, std::max<int64_t>(1, 32768 / (mult * P * khw)), [&](int64_t p0, int64_t p1) {
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
  });
}

template <typename T>
void depthwise_backward_input(const T* gy, const T* w, T* gx, const Conv2dGeometry& g) {
  const int64_t mult = g.O / g.C, khw = g.kH * g.kW, HW = g.H * g.W, P = g.OH * g.OW;
  const PhaseLayout L(g);
  // The adjoint gathers: phase element q receives w * gyp[q - off] from each tap of its
  // phase, with gy laid out at pitch Wq after max_off zeros (zeros between rows and after
  // the last), so every index is valid and out-of-range outputs contribute zero.
  parallel_for(0, g.N * g.C, std::max<int64_t>(1, 32768 / (mult * P * khw)), [&](int64_t p0, int64_t p1) {
    PhasePlanes<T> pl(g, L, L.max_off + L.plane);
    std::vector<T> wbuf;
    std::vector<int64_t> neg;
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t n = p / g.C, c = p % g.C;
      std::fill(pl.phased.begin(), pl.phased.end(), T(0));
      for (int64_t j = 0; j < mult; ++j) {
        const int64_t o = c * mult + j;
        const T* gyo = gy + (n * g.O + o) * P;
        T* base = pl.pitched.data() + L.max_off;
        for (int64_t oh = 0; oh < g.OH; ++oh) std::copy_n(gyo + oh * g.OW, g.OW, base + oh * L.Wq);
        for (const PhaseLayout::Group& gr : L.groups) {
          neg.resize(gr.off.size());
          for (size_t i = 0; i < gr.off.size(); ++i) neg[i] = -gr.off[i];
          apply_taps(pl.phased.data() + gr.phase * L.plane, base, group_weights(gr, w + o * khw, g.kW, wbuf), neg.data(),
                     static_cast<int64_t>(gr.kw.size()), 0, L.plane);
        }
      }
      pl.store(gx + p * HW);
    }
  });
}

template <typename T>
void depthwise_backward_weight(const T* gy, const T* x, T* gw, const Conv2dGeometry& g) {
  // Each tap's sum over one plane is a dot product in T; the planes' sums are added in acc_t
  // (f64 for f32), so long batches do not drift (NOTE [Conv2d algorithms]).
  using A = acc_t<T>;
  const int64_t mult = g.O / g.C, khw = g.kH * g.kW, HW = g.H * g.W, P = g.OH * g.OW;
  const PhaseLayout L(g);
  // Threads take input channels c (and with them output channels c mult .. c mult + mult - 1).
  parallel_for(0, g.C, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, g.N * mult * P * khw)), [&](int64_t c0, int64_t c1) {
    PhasePlanes<T> pl(g, L, L.flat);
    std::vector<A> acc(static_cast<size_t>(mult * khw));
    for (int64_t c = c0; c < c1; ++c) {
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t n = 0; n < g.N; ++n) {
        pl.load(x + (n * g.C + c) * HW);
        for (int64_t j = 0; j < mult; ++j) {
          const int64_t o = c * mult + j;
          const T* gyo = gy + (n * g.O + o) * P;
          T* gyp = pl.pitched.data();  // gy at pitch Wq, zeros between rows
          for (int64_t oh = 0; oh < g.OH; ++oh) {
            std::copy_n(gyo + oh * g.OW, g.OW, gyp + oh * L.Wq);
            if (oh + 1 < g.OH) std::fill_n(gyp + oh * L.Wq + g.OW, L.Wq - g.OW, T(0));
          }
          A* a = acc.data() + j * khw;
          for (const PhaseLayout::Group& gr : L.groups)
            for (size_t i = 0; i < gr.kw.size(); ++i)
              a[gr.kh * g.kW + gr.kw[i]] += static_cast<A>(dot(gyp, pl.phased.data() + gr.phase * L.plane + gr.off[i], L.flat));
        }
      }
      for (int64_t t = 0; t < mult * khw; ++t) gw[c * mult * khw + t] = static_cast<T>(acc[static_cast<size_t>(t)]);
    }
  });
}

template void depthwise_forward<float>(const float*, const float*, const float*, float*, const Conv2dGeometry&);
template void depthwise_forward<double>(const double*, const double*, const double*, double*, const Conv2dGeometry&);
template void depthwise_backward_input<float>(const float*, const float*, float*, const Conv2dGeometry&);
template void depthwise_backward_input<double>(const double*, const double*, double*, const Conv2dGeometry&);
template void depthwise_backward_weight<float>(const float*, const float*, float*, const Conv2dGeometry&);
template void depthwise_backward_weight<double>(const double*, const double*, double*, const Conv2dGeometry&);

}  // namespace trident::cpu
