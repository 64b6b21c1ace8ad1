// The direct definition of conv2d and the helpers the convolution tests share
// (tests/ops/conv_test.cpp, tests/ops/conv_amx_test.cpp).
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "ops/cpu/conv.h"
#include "test_util.h"

namespace trident::testing::conv_ref {

struct ConvParams {
  Int2 stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
};

// The kernels' geometry of a case.
inline cpu::Conv2dGeometry geometry_of(const Shape& x, const Shape& w, const ConvParams& p) {
  cpu::Conv2dGeometry g;
  g.N = x[0], g.C = x[1], g.H = x[2], g.W = x[3], g.O = w[0], g.kH = w[2], g.kW = w[3];
  g.sh = p.stride[0], g.sw = p.stride[1], g.ph = p.padding[0], g.pw = p.padding[1], g.dh = p.dilation[0], g.dw = p.dilation[1];
  g.groups = p.groups;
  g.OH = (g.H + 2 * g.ph - g.dh * (g.kH - 1) - 1) / g.sh + 1;
  g.OW = (g.W + 2 * g.pw - g.dw * (g.kW - 1) - 1) / g.sw + 1;
  return g;
}

inline std::string describe(const ConvParams& p, const Shape& x, const Shape& w) {
  return detail::str("input ", x, " weight ", w, " stride ", Shape{p.stride[0], p.stride[1]}, " padding ",
                     Shape{p.padding[0], p.padding[1]}, " dilation ", Shape{p.dilation[0], p.dilation[1]}, " groups ", p.groups);
}

// The direct definition of conv2d, in f64, written out with nested loops: forward value, the
// magnitude sum |x w| + |b| of every output (for tolerances), and the three gradients for an
// upstream gradient gy.
struct ConvReference {
  Tensor out, magnitude, gx, gw, gb;
};

inline ConvReference reference_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p, const Tensor& gy_in = Tensor()) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), Cg = w.size(1), kH = w.size(2), kW = w.size(3);
  const int64_t Og = O / p.groups;
  const int64_t OH = (H + 2 * p.padding[0] - p.dilation[0] * (kH - 1) - 1) / p.stride[0] + 1;
  const int64_t OW = (W + 2 * p.padding[1] - p.dilation[1] * (kW - 1) - 1) / p.stride[1] + 1;
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>(static_cast<size_t>(O), 0.0);
  const std::vector<double> gyv = gy_in.defined() ? gy_in.to_vector<double>() : std::vector<double>(static_cast<size_t>(N * O * OH * OW), 1.0);
  std::vector<double> out(static_cast<size_t>(N * O * OH * OW)), mag(out.size());
  std::vector<double> gx(xv.size(), 0.0), gw(wv.size(), 0.0), gb(static_cast<size_t>(O), 0.0);
  auto xi = [&](int64_t n, int64_t c, int64_t h, int64_t ww) { return static_cast<size_t>(((n * C + c) * H + h) * W + ww); };
  auto wi = [&](int64_t o, int64_t c, int64_t h, int64_t ww) { return static_cast<size_t>(((o * Cg + c) * kH + h) * kW + ww); };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const size_t oi = static_cast<size_t>(((n * O + o) * OH + oh) * OW + ow);
          const double g = gyv[oi];
          double s = bv[static_cast<size_t>(o)], m = std::fabs(bv[static_cast<size_t>(o)]);
          gb[static_cast<size_t>(o)] += g;
          const int64_t group = o / Og;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < kH; ++kh)
              for (int64_t kw = 0; kw < kW; ++kw) {
                const int64_t ih = oh * p.stride[0] - p.padding[0] + kh * p.dilation[0];
                const int64_t iw = ow * p.stride[1] - p.padding[1] + kw * p.dilation[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const size_t a = xi(n, group * Cg + c, ih, iw), bi = wi(o, c, kh, kw);
                s += xv[a] * wv[bi];
                m += std::fabs(xv[a] * wv[bi]);
                gx[a] += g * wv[bi];
                gw[bi] += g * xv[a];
              }
          out[oi] = s;
          mag[oi] = m;
        }
  const Shape os{N, O, OH, OW};
  return {from_vector<double>(out, os), from_vector<double>(mag, os), from_vector<double>(gx, x.sizes()),
          from_vector<double>(gw, w.sizes()), from_vector<double>(gb, {O})};
}

// |got - ref| <= tol_per_term * terms * magnitude, element-wise. A dot product of n terms
// computed in floating point with unit roundoff u is off by at most about n u sum |x_i w_i|
// (the classic bound for any summation order, blocked BLAS kernels and FMAs included), so
// the allowed error scales with each output's own magnitude and term count, not with a
// global constant that would be too loose for small outputs and too tight for large ones.
inline ::testing::AssertionResult within_rounding(const Tensor& got, const Tensor& ref, const Tensor& magnitude, double terms, double u) {
  if (got.sizes() != ref.sizes())
    return ::testing::AssertionFailure() << "shapes differ: " << shape_str(got.sizes()) << " vs " << shape_str(ref.sizes());
  const std::vector<double> g = got.to_vector<double>(), r = ref.to_vector<double>(), m = magnitude.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    const double tol = 2.0 * terms * u * m[i] + 1e-300;
    if (!(std::fabs(g[i] - r[i]) <= tol))
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << r[i] << " (tolerance " << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

inline Tensor abs_of(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  for (double& e : v) e = std::fabs(e);
  return from_vector<double>(v, t.sizes());
}

inline constexpr double kU64 = 1.1102230246251565e-16;  // 2^-53
inline constexpr double kU32 = 5.9604644775390625e-08;  // 2^-24

struct ConvCase {
  Shape x, w;
  ConvParams p;
  bool bias = true;
};


// check(case, seed) for every case with 1 and then 3 threads (3 splits the output channels of
// small cases), seeds counting from `seed` in each pass.
template <typename Check>
void on_one_and_three_threads(const std::vector<ConvCase>& cases, uint64_t seed, Check check) {
  const int before = get_num_threads();
  for (int threads : {1, 3}) {
    set_num_threads(threads);
    uint64_t s = seed;
    for (const ConvCase& c : cases) {
      SCOPED_TRACE(detail::str(describe(c.p, c.x, c.w), ", ", threads, " threads"));
      check(c, s++);
    }
  }
  set_num_threads(before);
}

}  // namespace trident::testing::conv_ref
