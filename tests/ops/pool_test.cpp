#include <cmath>
#include <limits>
#include <string>

#include "ops/cpu/isa.h"
#include "ops/cpu/pool.h"
#include "ops/math/pool.h"
#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using autograd::TensorList;

namespace {

std::string str2(Int2 v) { return detail::str(Shape{v[0], v[1]}); }

// Output length, written from PyTorch's documented formula with floating-point floor/ceil
// (the library uses integer arithmetic): in ceil mode a window starting past the input and
// its left padding is dropped.
int64_t out_len(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil_mode) {
  const double q = static_cast<double>(in + 2 * pad - dil * (k - 1) - 1) / static_cast<double>(stride);
  int64_t out = static_cast<int64_t>(ceil_mode ? std::ceil(q) : std::floor(q)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

struct PoolParams {
  Int2 kernel{2, 2}, stride{2, 2}, padding{0, 0}, dilation{1, 1};
  bool ceil_mode = false, count_include_pad = true;
};

std::string describe(const PoolParams& p) {
  return detail::str("kernel ", str2(p.kernel), " stride ", str2(p.stride), " padding ", str2(p.padding), " dilation ",
                     str2(p.dilation), p.ceil_mode ? " ceil" : " floor", p.count_include_pad ? " count_include_pad" : " exclude_pad");
}

bool valid(const PoolParams& p, int64_t H, int64_t W) {
  return p.padding[0] <= p.kernel[0] / 2 && p.padding[1] <= p.kernel[1] / 2 &&
         out_len(H, p.kernel[0], p.padding[0], p.stride[0], p.dilation[0], p.ceil_mode) >= 1 &&
         out_len(W, p.kernel[1], p.padding[1], p.stride[1], p.dilation[1], p.ceil_mode) >= 1;
}

// Nested-loop max pooling over [planes, H, W]: values, argmax (first maximum in row-major
// window order) and the input gradient for upstream gy (scattered to the argmax).
struct MaxRef {
  std::vector<double> out, grad;
  std::vector<int64_t> idx;
  int64_t OH, OW;
};
MaxRef reference_max_pool(const std::vector<double>& x, int64_t planes, int64_t H, int64_t W, const PoolParams& p,
                          const std::vector<double>& gy = {}) {
  MaxRef r;
  r.OH = out_len(H, p.kernel[0], p.padding[0], p.stride[0], p.dilation[0], p.ceil_mode);
  r.OW = out_len(W, p.kernel[1], p.padding[1], p.stride[1], p.dilation[1], p.ceil_mode);
  r.grad.assign(x.size(), 0.0);
  for (int64_t c = 0; c < planes; ++c)
    for (int64_t oh = 0; oh < r.OH; ++oh)
      for (int64_t ow = 0; ow < r.OW; ++ow) {
        double best = -std::numeric_limits<double>::infinity();
        int64_t arg = -1;
        for (int64_t kh = 0; kh < p.kernel[0]; ++kh)
          for (int64_t kw = 0; kw < p.kernel[1]; ++kw) {
            const int64_t ih = oh * p.stride[0] - p.padding[0] + kh * p.dilation[0];
            const int64_t iw = ow * p.stride[1] - p.padding[1] + kw * p.dilation[1];
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            const double v = x[static_cast<size_t>((c * H + ih) * W + iw)];
            if (arg < 0 || v > best) {
              best = v;
              arg = ih * W + iw;
            }
          }
        r.out.push_back(best);
        r.idx.push_back(arg);
        if (!gy.empty()) r.grad[static_cast<size_t>(c * H * W + arg)] += gy[r.out.size() - 1];
      }
  return r;
}

// Nested-loop average pooling: the window is cut at the right padding (in + pad), then at
// the input; the divisor counts the padding or not.
struct AvgRef {
  std::vector<double> out, grad;
  int64_t OH, OW;
};
AvgRef reference_avg_pool(const std::vector<double>& x, int64_t planes, int64_t H, int64_t W, const PoolParams& p,
                          const std::vector<double>& gy = {}) {
  AvgRef r;
  r.OH = out_len(H, p.kernel[0], p.padding[0], p.stride[0], 1, p.ceil_mode);
  r.OW = out_len(W, p.kernel[1], p.padding[1], p.stride[1], 1, p.ceil_mode);
  r.grad.assign(x.size(), 0.0);
  for (int64_t c = 0; c < planes; ++c)
    for (int64_t oh = 0; oh < r.OH; ++oh)
      for (int64_t ow = 0; ow < r.OW; ++ow) {
        const int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
        const int64_t h1 = std::min(h0 + p.kernel[0], H + p.padding[0]), w1 = std::min(w0 + p.kernel[1], W + p.padding[1]);
        double s = 0;
        int64_t inside = 0;
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw)
            if (ih >= 0 && ih < H && iw >= 0 && iw < W) {
              s += x[static_cast<size_t>((c * H + ih) * W + iw)];
              ++inside;
            }
        const double div = static_cast<double>(p.count_include_pad ? (h1 - h0) * (w1 - w0) : inside);
        r.out.push_back(s / div);
        if (gy.empty()) continue;
        const double g = gy[r.out.size() - 1] / div;
        for (int64_t ih = std::max<int64_t>(h0, 0); ih < std::min(h1, H); ++ih)
          for (int64_t iw = std::max<int64_t>(w0, 0); iw < std::min(w1, W); ++iw) r.grad[static_cast<size_t>((c * H + ih) * W + iw)] += g;
      }
  return r;
}

// Distinct, well-separated values (a shuffled 0.1 k ladder): max pooling has no ties, and a
// finite-difference step of 1e-6 never changes an argmax.
Tensor ladder(const Shape& s, uint64_t seed, bool requires_grad = false) {
  const int64_t n = shape_numel(s);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 0.1 * static_cast<double>(i) - 0.05 * static_cast<double>(n);
  Generator g(seed);
  const std::vector<int64_t> keys = randint(0, 1 << 30, {n}, kI64, &g).to_vector<int64_t>();
  std::vector<size_t> order(v.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return keys[a] != keys[b] ? keys[a] < keys[b] : a < b; });
  std::vector<double> shuffled(v.size());
  for (size_t i = 0; i < order.size(); ++i) shuffled[i] = v[order[i]];
  Tensor t = from_vector<double>(shuffled, s);
  if (requires_grad) t.set_requires_grad();
  return t;
}

// The 6x6 input of the PyTorch cross-checks: ((7 i) mod 36 - 18) / 4.
Tensor torch_input() {
  std::vector<double> v;
  for (int i = 0; i < 36; ++i) v.push_back(static_cast<double>((i * 7) % 36 - 18) / 4.0);
  return from_vector<double>(v, {1, 1, 6, 6});
}

std::vector<PoolParams> max_pool_grid() {
  std::vector<PoolParams> out;
  for (Int2 k : {Int2{2, 2}, Int2{3, 3}, Int2{3, 2}})
    for (Int2 s : {Int2{1, 1}, Int2{2, 2}, Int2{2, 1}, k})
      for (Int2 pad : {Int2{0, 0}, Int2{1, 1}, Int2{1, 0}})
        for (Int2 d : {Int2{1, 1}, Int2{2, 2}, Int2{1, 2}})
          for (bool ceil : {false, true}) out.push_back({k, s, pad, d, ceil, true});
  return out;
}

}  // namespace

// ---- max pooling -----------------------------------------------------------------------------

TEST(MaxPool2d, MatchesNestedLoopsIncludingCeilModePaddingAndDilation) {
  const int64_t N = 2, C = 3, H = 7, W = 6;
  const Tensor x = ladder({N, C, H, W}, 1);
  const std::vector<double> xv = x.to_vector<double>();
  int checked = 0;
  for (const PoolParams& p : max_pool_grid()) {
    if (!valid(p, H, W)) continue;
    SCOPED_TRACE(describe(p));
    auto [out, idx] = max_pool2d_with_indices(x, p.kernel, p.stride, p.padding, p.dilation, p.ceil_mode);
    const MaxRef ref = reference_max_pool(xv, N * C, H, W, p);
    ASSERT_EQ(out.sizes(), (Shape{N, C, ref.OH, ref.OW}));
    EXPECT_EQ(out.to_vector<double>(), ref.out);  // a maximum is exact
    EXPECT_EQ(idx.to_vector<int64_t>(), ref.idx);
    EXPECT_EQ(idx.dtype(), kI64);
    // f32 (NOTE [Max pooling in registers], both vector widths where the CPU has AVX-512) picks
    // the same elements.
    for (const bool avx512 : {true, false}) {
      const bool was = cpu::set_cpu_avx512_kernels_enabled_for_testing(avx512);
      auto [out32, idx32] = max_pool2d_with_indices(x.to(kF32), p.kernel, p.stride, p.padding, p.dilation, p.ceil_mode);
      EXPECT_EQ(out32.to_vector<double>(), out.to(kF32).to_vector<double>());
      EXPECT_EQ(idx32.to_vector<int64_t>(), ref.idx);
      EXPECT_EQ(max_pool2d(x.to(kF32), p.kernel, p.stride, p.padding, p.dilation, p.ceil_mode).to_vector<double>(),
                out.to(kF32).to_vector<double>());
      cpu::set_cpu_avx512_kernels_enabled_for_testing(was);
    }
    ++checked;
  }
  EXPECT_GT(checked, 150);
}

TEST(MaxPool2d, BackwardSendsEachGradientToItsArgmax) {
  const int64_t N = 2, C = 2, H = 7, W = 7;
  const Tensor x0 = ladder({N, C, H, W}, 2);
  Generator g(3);
  for (const PoolParams& p : {PoolParams{{3, 3}, {2, 2}, {1, 1}, {1, 1}, true}, PoolParams{{3, 3}, {1, 1}, {1, 1}, {1, 1}, false},
                              PoolParams{{2, 3}, {1, 2}, {1, 0}, {2, 2}, true}}) {
    SCOPED_TRACE(describe(p));
    Tensor x = x0.clone().set_requires_grad();
    Tensor out = max_pool2d(x, p.kernel, p.stride, p.padding, p.dilation, p.ceil_mode);
    const Tensor gy = randn(out.sizes(), kF64, &g);
    out.backward(gy);
    const MaxRef ref = reference_max_pool(x0.to_vector<double>(), N * C, H, W, p, gy.to_vector<double>());
    EXPECT_TRUE(all_close(x.grad(), from_vector<double>(ref.grad, x0.sizes()), 1e-15, 0));
  }
}

TEST(MaxPool2d, AgreesWithPyTorch) {
  // PyTorch 1.13: F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True) and
  // F.max_pool2d(x, 2, 1, 1, dilation=2, return_indices=True) on torch_input().
  const Tensor x = torch_input();
  auto [a, ai] = max_pool2d_with_indices(x, {3, 3}, Int2{2, 2}, {1, 1}, {1, 1}, true);
  EXPECT_EQ(a.sizes(), (Shape{1, 1, 4, 4}));
  EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{-1.25, 2.25, 4.25, 4.25, 1.75, 3.75, 4.0, -0.25, 3.25, 3.5, 2.75, 2.75,
                                                        3.0, -0.75, 2.75, 2.75}));
  EXPECT_EQ(ai.to_vector<int64_t>(), (std::vector<int64_t>{7, 9, 5, 5, 19, 15, 10, 23, 25, 20, 35, 35, 30, 33, 35, 35}));
  auto [d, di] = max_pool2d_with_indices(x, {2, 2}, Int2{1, 1}, {1, 1}, {2, 2}, false);
  EXPECT_EQ(d.sizes(), (Shape{1, 1, 6, 6}));
  EXPECT_EQ(d.to_vector<double>(),
            (std::vector<double>{-1.25, 0.5, 2.25, 4.0, 2.25, 4.0, 0.25, 2.0, 3.75, 2.5, 4.25, 2.5, 1.75, 3.5, 2.25, 4.0, 2.25, 4.0,
                                 3.25, 2.0, 3.75, 2.0, 3.75, -0.5, 1.75, 3.5, 1.75, 3.5, 2.75, 1.0, 3.25, 1.5, 3.25, -0.5, 1.25, -0.5}));
  EXPECT_EQ(di.to_vector<int64_t>(), (std::vector<int64_t>{7,  8,  9,  10, 9,  10, 13, 14, 15, 4,  5,  4,  19, 20, 9,  10, 9,  10,
                                                           25, 14, 15, 14, 15, 28, 19, 20, 19, 20, 35, 34, 25, 24, 25, 28, 29, 28}));
}

TEST(MaxPool2d, WindowsOfMinusInfinityPointAtTheirFirstElement) {
  // PyTorch 1.13: x = full((1, 1, 3, 3), -inf) with x[0, 0, 2, 2] = 1, then
  // F.max_pool2d(x, 2, 1, 1, return_indices=True) and the same with dilation=2.
  std::vector<double> v(9, -std::numeric_limits<double>::infinity());
  v[8] = 1.0;
  const Tensor x = from_vector<double>(v, {1, 1, 3, 3});
  const double ninf = -std::numeric_limits<double>::infinity();
  auto [a, ai] = max_pool2d_with_indices(x, {2, 2}, Int2{1, 1}, {1, 1});
  EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{ninf, ninf, ninf, ninf, ninf, ninf, ninf, ninf, ninf, ninf, 1, 1, ninf,
                                                        ninf, 1, 1}));
  EXPECT_EQ(ai.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 2, 0, 0, 1, 2, 3, 3, 8, 8, 6, 6, 8, 8}));
  auto [d, di] = max_pool2d_with_indices(x, {2, 2}, Int2{1, 1}, {1, 1}, {2, 2});
  EXPECT_EQ(d.to_vector<double>(), (std::vector<double>{ninf, ninf, ninf, ninf, 1, ninf, ninf, ninf, ninf}));
  EXPECT_EQ(di.to_vector<int64_t>(), (std::vector<int64_t>{4, 3, 4, 1, 8, 1, 4, 3, 4}));
}

TEST(MaxPool2d, NaNWinsAndTiesGoToTheFirstMaximum) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto [v, i] = max_pool2d_with_indices(from_vector<double>({1, nan, 3, 2}, {1, 1, 2, 2}), {2, 2});
  EXPECT_TRUE(std::isnan(v.item<double>()));
  EXPECT_EQ(i.item<int64_t>(), 1);
  auto [t, ti] = max_pool2d_with_indices(from_vector<double>({1, 5, 5, 2}, {1, 1, 2, 2}), {2, 2});
  EXPECT_EQ(t.item<double>(), 5.0);
  EXPECT_EQ(ti.item<int64_t>(), 1);
  // The same in f32, a vector of outputs at a time (NOTE [Max pooling in registers]): NaN and ties
  // in every lane of a 3 x 40 map.
  std::vector<float> row(120, 0.0f);
  for (size_t i = 0; i < 40; i += 3) row[i] = std::numeric_limits<float>::quiet_NaN();
  auto [fv, fi] = max_pool2d_with_indices(from_vector<float>(row, {1, 1, 3, 40}), {3, 3}, Int2{1, 1}, {1, 1});
  auto [dv, di] = max_pool2d_with_indices(from_vector<float>(row, {1, 1, 3, 40}).to(kF64), {3, 3}, Int2{1, 1}, {1, 1});
  EXPECT_EQ(fi.to_vector<int64_t>(), di.to_vector<int64_t>());
  // The gradient of a tie goes to the first maximum only.
  Tensor x = from_vector<double>({1, 5, 5, 2}, {1, 1, 2, 2}).set_requires_grad();
  sum(max_pool2d(x, {2, 2})).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 1, 0, 0}));
}

// NOTE [Max pooling by taps]: max_pool2d keeps byte tap numbers for its backward, which must
// stand for the i64 indices of max_pool2d_with_indices exactly: over the whole grid of kernels,
// strides, paddings, dilations and ceil mode, with windows of -inf (their first element, or none),
// NaN and ties, the taps map to the kernel's indices, and values, gradients and the create_graph
// backward are those of the indices route, bit for bit; f32 and bf16 too; a window of 256 taps
// keeps the indices.
TEST(MaxPool2d, TapsStandForTheIndices) {
  const int64_t N = 2, C = 2, H = 7, W = 6;
  Generator g(44);
  Tensor x0 = ladder({N, C, H, W}, 5);
  std::vector<double> v = x0.to_vector<double>();
  const double ninf = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < 9; ++i) v[static_cast<size_t>(i)] = ninf;  // a corner of -inf windows
  v[20] = std::numeric_limits<double>::quiet_NaN();
  v[30] = v[31];  // a tie
  x0 = from_vector<double>(v, {N, C, H, W});
  int checked = 0;
  for (const PoolParams& p : max_pool_grid()) {
    if (!valid(p, H, W)) continue;
    SCOPED_TRACE(describe(p));
    cpu::Pool2dGeometry geo;
    geo.H = H, geo.W = W, geo.kH = p.kernel[0], geo.kW = p.kernel[1], geo.sh = p.stride[0], geo.sw = p.stride[1];
    geo.ph = p.padding[0], geo.pw = p.padding[1], geo.dh = p.dilation[0], geo.dw = p.dilation[1];
    geo.OH = math::pool_output_size(H, geo.kH, geo.ph, geo.sh, geo.dh, p.ceil_mode);
    geo.OW = math::pool_output_size(W, geo.kW, geo.pw, geo.sw, geo.dw, p.ceil_mode);
    const auto [vi, idx] = cpu::max_pool2d_forward(x0, geo);
    const auto [vt, taps] = cpu::max_pool2d_forward_taps(x0, geo);
    EXPECT_EQ(taps.dtype(), kU8);
    EXPECT_EQ(cpu::max_pool2d_taps_to_indices(taps, geo).to_vector<int64_t>(), idx.to_vector<int64_t>());
    for (const DType dt : {kF64, kF32, kBF16}) {
      const Tensor xd = x0.to(dt);
      const Tensor gy = randn({N, C, geo.OH, geo.OW}, kF64, &g).to(dt);
      Tensor a = xd.clone().set_requires_grad(), b = xd.clone().set_requires_grad();
      const Tensor ya = max_pool2d(a, p.kernel, p.stride, p.padding, p.dilation, p.ceil_mode);
      const Tensor yb = max_pool2d_with_indices(b, p.kernel, p.stride, p.padding, p.dilation, p.ceil_mode).first;
      const std::vector<double> va = ya.to(kF64).to_vector<double>(), vb = yb.to(kF64).to_vector<double>();
      for (size_t i = 0; i < va.size(); ++i)
        ASSERT_TRUE(va[i] == vb[i] || (std::isnan(va[i]) && std::isnan(vb[i]))) << dtype_name(dt) << " output " << i;
      ya.backward(gy);
      yb.backward(gy);
      EXPECT_EQ(a.grad().to(kF64).to_vector<double>(), b.grad().to(kF64).to_vector<double>()) << dtype_name(dt);
    }
    // create_graph: the recorded backward through the taps' indices, and its own gradient.
    Tensor a = x0.clone().set_requires_grad(), b = x0.clone().set_requires_grad();
    Tensor gya = randn({N, C, geo.OH, geo.OW}, kF64, &g).set_requires_grad(), gyb = gya.detach().clone().set_requires_grad();
    const Tensor ga = autograd::grad({max_pool2d(a, p.kernel, p.stride, p.padding, p.dilation, p.ceil_mode)}, {a}, {gya},
                                     false, false, /*create_graph=*/true)[0];
    const Tensor gb = autograd::grad({max_pool2d_with_indices(b, p.kernel, p.stride, p.padding, p.dilation, p.ceil_mode).first},
                                     {b}, {gyb}, false, false, /*create_graph=*/true)[0];
    EXPECT_EQ(ga.to_vector<double>(), gb.to_vector<double>());
    const Tensor w = randn(ga.sizes(), kF64, &g);
    sum(mul(ga, w)).backward();
    sum(mul(gb, w)).backward();
    EXPECT_EQ(gya.grad().to_vector<double>(), gyb.grad().to_vector<double>());
    ++checked;
  }
  EXPECT_GT(checked, 100);
  // 16 x 16 = 256 taps do not fit a byte: the indices route, the same gradient.
  Tensor big = randn({1, 1, 16, 16}, kF64, &g).set_requires_grad();
  sum(max_pool2d(big, {16, 16})).backward();
  EXPECT_FALSE(cpu::max_pool2d_taps_apply(cpu::Pool2dGeometry{16, 16, 1, 1, 16, 16, 16, 16, 0, 0, 1, 1}));
  EXPECT_EQ(sum(big.grad()).item<double>(), 1.0);
}

TEST(MaxPool2dGradcheck, WindowsWithoutTies) {
  struct Case {
    Shape x;
    PoolParams p;
  };
  uint64_t seed = 10;
  for (const Case& c : {Case{{2, 2, 5, 5}, {{2, 2}, {2, 2}}}, Case{{1, 2, 6, 5}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true}},
                        Case{{1, 2, 6, 6}, {{3, 2}, {1, 2}, {1, 1}, {2, 1}, false}}, Case{{2, 5, 5}, {{3, 3}, {1, 1}, {1, 1}}},
                        Case{{2, 3, 1, 5}, {{1, 2}, {1, 1}}}}) {  // a size-1 dim
    const PoolParams p = c.p;
    Tensor x = ladder(c.x, seed++, true);
    EXPECT_TRUE(grad_ok(gradcheck(
        [&](const TensorList& in) { return max_pool2d(in[0], p.kernel, p.stride, p.padding, p.dilation, p.ceil_mode); }, {x})))
        << describe(p);
  }
}

// ---- average pooling -----------------------------------------------------------------------

TEST(AvgPool2d, MatchesNestedLoopsForCeilModePaddingAndBothDivisors) {
  const int64_t N = 2, C = 3, H = 7, W = 6;
  Generator g(20);
  const Tensor x = randn({N, C, H, W}, kF64, &g);
  const std::vector<double> xv = x.to_vector<double>();
  int checked = 0;
  for (Int2 k : {Int2{2, 2}, Int2{3, 3}, Int2{3, 2}, Int2{1, 1}})
    for (Int2 s : {Int2{1, 1}, Int2{2, 2}, Int2{2, 1}, Int2{3, 3}})
      for (Int2 pad : {Int2{0, 0}, Int2{1, 1}, Int2{1, 0}})
        for (bool ceil : {false, true})
          for (bool cip : {true, false}) {
            const PoolParams p{k, s, pad, {1, 1}, ceil, cip};
            if (!valid(p, H, W)) continue;
            SCOPED_TRACE(describe(p));
            Tensor xl = x.clone().set_requires_grad();
            Tensor out = avg_pool2d(xl, p.kernel, p.stride, p.padding, p.ceil_mode, p.count_include_pad);
            const Tensor gy = randn(out.sizes(), kF64, &g);
            const AvgRef ref = reference_avg_pool(xv, N * C, H, W, p, gy.to_vector<double>());
            ASSERT_EQ(out.sizes(), (Shape{N, C, ref.OH, ref.OW}));
            EXPECT_TRUE(all_close(out, from_vector<double>(ref.out, out.sizes()), 1e-14, 1e-15));
            out.backward(gy);
            EXPECT_TRUE(all_close(xl.grad(), from_vector<double>(ref.grad, x.sizes()), 1e-14, 1e-15));
            ++checked;
          }
  EXPECT_GT(checked, 100);
}

TEST(AvgPool2d, AgreesWithPyTorch) {
  // PyTorch 1.13: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=True / False) on
  // torch_input(); the last row and column of windows are cut at the right padding.
  const Tensor x = torch_input();
  const Tensor a = avg_pool2d(x, {3, 3}, Int2{2, 2}, {1, 1}, true, true);
  ASSERT_EQ(a.sizes(), (Shape{1, 1, 4, 4}));
  EXPECT_TRUE(all_close(a, from_vector<double>({-1.2777777777777777, -0.16666666666666666, 1.1666666666666667, 0.16666666666666666,
                                                -0.4166666666666667, 1.0, -0.5, -0.875, 0.5833333333333334, -1.0, -0.5, 0.625,
                                                -0.20833333333333334, -1.25, 0.5, 0.6875},
                                               {1, 1, 4, 4}),
                        1e-15, 0));
  const Tensor b = avg_pool2d(x, {3, 3}, Int2{2, 2}, {1, 1}, true, false);
  EXPECT_TRUE(all_close(b, from_vector<double>({-2.875, -0.25, 1.75, 0.5, -0.625, 1.0, -0.5, -1.75, 0.875, -1.0, -0.5, 1.25, -0.625,
                                                -2.5, 1.0, 2.75},
                                               {1, 1, 4, 4}),
                        1e-15, 0));
}

TEST(AvgPool2dGradcheck, PaddingCeilModeAndDivisors) {
  uint64_t seed = 30;
  for (const PoolParams& p : {PoolParams{{2, 2}, {2, 2}}, PoolParams{{3, 3}, {2, 2}, {1, 1}, {1, 1}, true, true},
                              PoolParams{{3, 3}, {2, 2}, {1, 1}, {1, 1}, true, false},
                              PoolParams{{3, 2}, {1, 2}, {1, 1}, {1, 1}, false, false}}) {
    Tensor x = rand_leaf({2, 2, 6, 5}, seed++);
    EXPECT_TRUE(grad_ok(gradcheck(
        [&](const TensorList& in) { return avg_pool2d(in[0], p.kernel, p.stride, p.padding, p.ceil_mode, p.count_include_pad); },
        {x})))
        << describe(p);
  }
  Tensor xt = rand_leaf_transposed({2, 5, 6}, 40);  // unbatched and non-contiguous
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return avg_pool2d(in[0], {3, 3}, Int2{1, 1}, {1, 1}); }, {xt})));
}

// ---- adaptive average pooling ----------------------------------------------------------------

TEST(AdaptiveAvgPool2d, MatchesTheStartEndFormula) {
  const int64_t H = 7, W = 6;
  Generator g(50);
  const Tensor x = randn({2, 3, H, W}, kF64, &g);
  const std::vector<double> xv = x.to_vector<double>();
  for (Int2 os : {Int2{1, 1}, Int2{2, 3}, Int2{3, 4}, Int2{7, 6}, Int2{9, 8}, Int2{4, 1}}) {
    SCOPED_TRACE(detail::str("output ", str2(os)));
    Tensor xl = x.clone().set_requires_grad();
    Tensor out = adaptive_avg_pool2d(xl, os);
    ASSERT_EQ(out.sizes(), (Shape{2, 3, os[0], os[1]}));
    const Tensor gy = randn(out.sizes(), kF64, &g);
    const std::vector<double> gyv = gy.to_vector<double>();
    std::vector<double> ref, gref(xv.size(), 0.0);
    for (int64_t c = 0; c < 6; ++c)
      for (int64_t oh = 0; oh < os[0]; ++oh)
        for (int64_t ow = 0; ow < os[1]; ++ow) {
          // start = floor(o in / out), end = ceil((o + 1) in / out), in floating point here.
          const int64_t h0 = static_cast<int64_t>(std::floor(static_cast<double>(oh * H) / os[0]));
          const int64_t h1 = static_cast<int64_t>(std::ceil(static_cast<double>((oh + 1) * H) / os[0]));
          const int64_t w0 = static_cast<int64_t>(std::floor(static_cast<double>(ow * W) / os[1]));
          const int64_t w1 = static_cast<int64_t>(std::ceil(static_cast<double>((ow + 1) * W) / os[1]));
          double s = 0;
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) s += xv[static_cast<size_t>((c * H + ih) * W + iw)];
          const double n = static_cast<double>((h1 - h0) * (w1 - w0));
          ref.push_back(s / n);
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) gref[static_cast<size_t>((c * H + ih) * W + iw)] += gyv[ref.size() - 1] / n;
        }
    EXPECT_TRUE(all_close(out, from_vector<double>(ref, out.sizes()), 1e-14, 1e-15));
    out.backward(gy);
    EXPECT_TRUE(all_close(xl.grad(), from_vector<double>(gref, x.sizes()), 1e-14, 1e-15));
  }
}

TEST(AdaptiveAvgPool2d, AgreesWithPyTorch) {
  // PyTorch 1.13: F.adaptive_avg_pool2d(torch_input(), (4, 5)).
  const Tensor a = adaptive_avg_pool2d(torch_input(), {4, 5});
  EXPECT_TRUE(all_close(a, from_vector<double>({-2.875, -1.125, 0.625, 2.375, 1.875, -1.375, 0.375, 2.125, 1.625, -1.125, 1.625, 1.125,
                                                -1.625, -2.125, -0.375, 0.875, -1.875, -2.375, -0.625, 1.125},
                                               {1, 1, 4, 5}),
                        1e-15, 0));
}

TEST(AdaptiveAvgPool2dGradcheck, OverlappingAndGlobalWindows) {
  uint64_t seed = 60;
  for (Int2 os : {Int2{1, 1}, Int2{2, 3}, Int2{4, 4}, Int2{6, 7}}) {
    Tensor x = rand_leaf({2, 2, 5, 5}, seed++);
    EXPECT_TRUE(grad_ok(gradcheck([&](const TensorList& in) { return adaptive_avg_pool2d(in[0], os); }, {x}))) << str2(os);
  }
  Tensor xt = rand_leaf_transposed({3, 4, 5}, 70);
  EXPECT_TRUE(grad_ok(gradcheck([](const TensorList& in) { return adaptive_avg_pool2d(in[0], {2, 2}); }, {xt})));
}

// ---- shared behaviour ------------------------------------------------------------------------

TEST(Pool2d, UnbatchedHalfLargeAndEmptyBatchInputs) {
  Generator g(80);
  const Tensor x = randn({3, 9, 8}, kF32, &g);
  const Tensor x4 = reshape(x, {1, 3, 9, 8});
  EXPECT_EQ(max_pool2d(x, {3, 3}, Int2{2, 2}, {1, 1}).to_vector<float>(), max_pool2d(x4, {3, 3}, Int2{2, 2}, {1, 1}).to_vector<float>());
  EXPECT_EQ(max_pool2d(x, {3, 3}, Int2{2, 2}, {1, 1}).sizes(), (Shape{3, 5, 4}));
  EXPECT_EQ(avg_pool2d(x, {3, 3}, Int2{1, 1}, {1, 1}).to_vector<float>(), avg_pool2d(x4, {3, 3}, Int2{1, 1}, {1, 1}).to_vector<float>());
  EXPECT_EQ(adaptive_avg_pool2d(x, {1, 1}).sizes(), (Shape{3, 1, 1}));
  // Stride defaults to the kernel.
  EXPECT_EQ(max_pool2d(x4, {2, 2}).sizes(), (Shape{1, 3, 4, 4}));
  EXPECT_EQ(avg_pool2d(x4, {3, 2}).sizes(), (Shape{1, 3, 3, 4}));
  // bf16/f16: max is exact; avg computes in f32 and rounds once.
  for (DType dt : {kBF16, kF16}) {
    const Tensor h = x4.to(dt);
    EXPECT_EQ(max_pool2d(h, {3, 3}, Int2{2, 2}, {1, 1}).dtype(), dt);
    EXPECT_EQ(max_pool2d(h, {3, 3}, Int2{2, 2}, {1, 1}).to_vector<float>(),
              max_pool2d(h.to(kF32), {3, 3}, Int2{2, 2}, {1, 1}).to_vector<float>());
    EXPECT_EQ(avg_pool2d(h, {3, 3}, Int2{2, 2}, {1, 1}).to_vector<float>(),
              avg_pool2d(h.to(kF32), {3, 3}, Int2{2, 2}, {1, 1}).to(dt).to_vector<float>());
    EXPECT_EQ(adaptive_avg_pool2d(h, {2, 3}).to_vector<float>(), adaptive_avg_pool2d(h.to(kF32), {2, 3}).to(dt).to_vector<float>());
  }
  // Many planes: the threads split them; the result still matches the loops.
  const Tensor big = ladder({4, 16, 20, 20}, 81);
  const PoolParams p{{3, 3}, {2, 2}, {1, 1}, {1, 1}, false, true};
  EXPECT_EQ(max_pool2d(big, p.kernel, p.stride, p.padding).to_vector<double>(),
            reference_max_pool(big.to_vector<double>(), 64, 20, 20, p).out);
  // The ladder's values reach 1280 in magnitude and a window's nine of them largely cancel, so
  // a sum in another order than the loops' differs by up to about 9 eps max|x| (NOTE
  // [Separable average pooling] sums rows first): that, not a relative tolerance, is the bound.
  const double sum_bound = 9.0 * std::numeric_limits<double>::epsilon() * 1280.0;
  EXPECT_TRUE(all_close(avg_pool2d(big, p.kernel, p.stride, p.padding),
                        from_vector<double>(reference_avg_pool(big.to_vector<double>(), 64, 20, 20, p).out, {4, 16, 10, 10}), 0.0,
                        sum_bound));
  // An empty batch, forward and backward.
  EXPECT_EQ(max_pool2d(zeros({0, 3, 4, 4}), {2, 2}).sizes(), (Shape{0, 3, 2, 2}));
  EXPECT_EQ(avg_pool2d(zeros({0, 3, 4, 4}), {2, 2}).sizes(), (Shape{0, 3, 2, 2}));
  EXPECT_EQ(adaptive_avg_pool2d(zeros({0, 3, 4, 4}), {2, 2}).sizes(), (Shape{0, 3, 2, 2}));
  Tensor e = zeros({0, 3, 4, 4}, kF64).set_requires_grad();
  sum(add(add(max_pool2d(e, {2, 2}), avg_pool2d(e, {2, 2})), adaptive_avg_pool2d(e, {2, 2}))).backward();
  EXPECT_EQ(e.grad().sizes(), (Shape{0, 3, 4, 4}));
}


TEST(Pool2d, ErrorsNameTheShapesAndTheParameter) {
  const Tensor x = zeros({2, 3, 5, 5});
  expect_error([&] { max_pool2d(x, {0, 2}); }, {"max_pool2d", "kernel", "[0, 2]", "[2, 3, 5, 5]"});
  expect_error([&] { avg_pool2d(x, {2, 2}, Int2{2, 0}); }, {"avg_pool2d", "stride", "[2, 0]", "[2, 3, 5, 5]"});
  expect_error([&] { max_pool2d(x, {2, 2}, std::nullopt, {0, 0}, {0, 1}); }, {"dilation", "[0, 1]", "[2, 3, 5, 5]"});
  expect_error([&] { max_pool2d(x, {3, 3}, std::nullopt, {2, 1}); }, {"padding [2, 1]", "half the kernel size [3, 3]", "[2, 3, 5, 5]"});
  expect_error([&] { avg_pool2d(x, {3, 3}, std::nullopt, {-1, 0}); }, {"padding", "[-1, 0]"});
  expect_error([&] { max_pool2d(zeros({1, 1, 2, 5}), {3, 3}); }, {"[1, 1, 2, 5]", "too small", "kernel [3, 3]", "[0, 1]"});
  expect_error([&] { avg_pool2d(zeros({5, 5}), {2, 2}); }, {"avg_pool2d", "3-D", "4-D", "[5, 5]"});
  expect_error([&] { max_pool2d(zeros({1, 3, 0, 5}), {2, 2}); }, {"non-empty", "[1, 3, 0, 5]"});
  expect_error([&] { adaptive_avg_pool2d(x, {-1, 2}); }, {"adaptive_avg_pool2d", "output_size", "[-1, 2]", "[2, 3, 5, 5]"});
  expect_error([&] { adaptive_avg_pool2d(zeros({2, 3, 5, 5, 5}), {2, 2}); }, {"[2, 3, 5, 5, 5]"});
  expect_error([&] { max_pool2d(zeros({1, 1, 4, 4}, kI64), {2, 2}); }, {"floating"});
}
