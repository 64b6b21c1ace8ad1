// The CUDA pooling kernels (ops/cuda/pool.cu: max with indices, average, adaptive average,
// forward and backward), which no GPU has run yet, on the SIMT emulator (NOTE [Kernels on the
// CPU emulator] in tests/simt/simt.h) against the CPU kernels in f64 on the same (rounded)
// inputs: padding, strides, dilation, windows that cover only padding, planes of -inf and NaN,
// count_include_pad both ways, adaptive windows that overlap, shrink and grow. Indices must be
// the CPU's exactly; every launch runs in both thread orders with the same bits.
#include "tests/simt/simt.h"  // first: it defines what the kernels below take from nvcc

#include "ops/cuda/pool.cu"

#include <gtest/gtest.h>

#include <string>

#include "ops/cpu/pool.h"
#include "simt/simt_test_util.h"
#include "test_util.h"

using namespace trident;
using namespace trident::simt_testing;
namespace cu = trident::cuda;

namespace {

constexpr unsigned kBlocks = 3;  // grid-stride loops: fewer threads than outputs on purpose

Tensor f64(const Tensor& t) { return t.to(kF64); }

// Output size along one dim (floor mode).
int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

cpu::Pool2dGeometry geometry(int64_t H, int64_t W, int64_t k, int64_t s, int64_t p, int64_t d, bool include_pad = true) {
  cpu::Pool2dGeometry g;
  g.H = H;
  g.W = W;
  g.kH = g.kW = k;
  g.sh = g.sw = s;
  g.ph = g.pw = p;
  g.dh = g.dw = d;
  g.OH = out_size(H, k, s, p, d);
  g.OW = out_size(W, k, s, p, d);
  g.count_include_pad = include_pad;
  return g;
}

template <typename T>
void max_case(DType dt, const cpu::Pool2dGeometry& g, bool specials, uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " k" + std::to_string(g.kH) + " s" + std::to_string(g.sh) + " p" +
               std::to_string(g.ph) + " d" + std::to_string(g.dh));
  Generator gen(seed);
  const int64_t P = 6;  // planes: batch 2 x channels 3
  Tensor x64 = randn({2, 3, g.H, g.W}, kF64, &gen);
  if (specials) {  // plane 1 all -inf, a NaN in plane 2, a few ties at the top of plane 3
    double* d = static_cast<double*>(x64.data_ptr());
    for (int64_t i = 0; i < g.H * g.W; ++i) d[g.H * g.W + i] = -INFINITY;
    d[2 * g.H * g.W + 5] = NAN;
    for (int64_t i = 0; i < 4; ++i) d[3 * g.H * g.W + i] = 7.0;
  }
  const Tensor x = x64.to(dt);
  const Tensor gy = randn({2, 3, g.OH, g.OW}, kF64, &gen).to(dt);
  const int64_t total = P * g.OH * g.OW, in_total = P * g.H * g.W;
  const auto out = in_both_orders(
      [&] {
        return std::vector<Tensor>{nans({2, 3, g.OH, g.OW}, dt), full({2, 3, g.OH, g.OW}, -7, DType::I64),
                                   nans({2, 3, g.H, g.W}, dt)};
      },
      [&](const std::vector<Tensor>& o, simt::Order order) {
        simt::launch({dim3(kBlocks), dim3(cu::kThreads), 0, order}, [&] {
          cu::max_pool_forward_kernel<T>(ptr<T>(x), ptr<T>(o[0]), ptr<int64_t>(o[1]), total, g);
        });
        simt::launch({dim3(kBlocks), dim3(cu::kThreads), 0, order}, [&] {
          cu::max_pool_backward_kernel<T>(ptr<T>(gy), ptr<int64_t>(o[1]), ptr<T>(o[2]), in_total, g);
        });
      });
  const auto [y_ref, ind_ref] = cpu::max_pool2d_forward(f64(x), g);
  EXPECT_EQ(out[1].template to_vector<int64_t>(), ind_ref.template to_vector<int64_t>()) << "indices";
  EXPECT_TRUE(same_bits(out[0], y_ref.to(dt))) << "values: the maximum of the same rounded inputs";
  const Tensor gx_ref = cpu::max_pool2d_backward(f64(gy), ind_ref, {2, 3, g.H, g.W}, g);
  EXPECT_LE(relative_error(out[2], gx_ref), tolerance(dt, true)) << "gx";
}

TEST(SimtPool, MaxPoolMatchesTheCpu) {
  max_case<float>(DType::F32, geometry(9, 11, 3, 2, 1, 1), true, 1);
  max_case<BFloat16>(DType::BF16, geometry(9, 11, 3, 2, 1, 2), true, 2);  // dilated
  max_case<Half>(DType::F16, geometry(8, 8, 2, 2, 0, 1), false, 3);
  max_case<float>(DType::F32, geometry(5, 7, 3, 1, 1, 3), true, 4);  // windows of padding only: index -1
}

template <typename T>
void avg_case(DType dt, const cpu::Pool2dGeometry& g, uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " k" + std::to_string(g.kH) + " s" + std::to_string(g.sh) + " p" +
               std::to_string(g.ph) + (g.count_include_pad ? " include_pad" : ""));
  Generator gen(seed);
  const Tensor x = randn({2, 3, g.H, g.W}, kF64, &gen).to(dt), gy = randn({2, 3, g.OH, g.OW}, kF64, &gen).to(dt);
  const int64_t total = 6 * g.OH * g.OW, in_total = 6 * g.H * g.W;
  const auto out = in_both_orders(
      [&] { return std::vector<Tensor>{nans({2, 3, g.OH, g.OW}, dt), nans({2, 3, g.H, g.W}, dt)}; },
      [&](const std::vector<Tensor>& o, simt::Order order) {
        simt::launch({dim3(kBlocks), dim3(cu::kThreads), 0, order},
                     [&] { cu::avg_pool_forward_kernel<T>(ptr<T>(x), ptr<T>(o[0]), total, g); });
        simt::launch({dim3(kBlocks), dim3(cu::kThreads), 0, order},
                     [&] { cu::avg_pool_backward_kernel<T>(ptr<T>(gy), ptr<T>(o[1]), in_total, g); });
      });
  EXPECT_LE(relative_error(out[0], cpu::avg_pool2d_forward(f64(x), g)), tolerance(dt, false)) << "y";
  EXPECT_LE(relative_error(out[1], cpu::avg_pool2d_backward(f64(gy), {2, 3, g.H, g.W}, g)), tolerance(dt, true)) << "gx";
}

TEST(SimtPool, AvgPoolMatchesTheCpu) {
  avg_case<float>(DType::F32, geometry(9, 11, 3, 2, 1, 1, true), 5);
  avg_case<float>(DType::F32, geometry(9, 11, 3, 2, 1, 1, false), 6);
  avg_case<BFloat16>(DType::BF16, geometry(7, 7, 3, 1, 1, 1, false), 7);
  avg_case<Half>(DType::F16, geometry(8, 6, 2, 2, 0, 1, true), 8);
}

template <typename T>
void adaptive_case(DType dt, int64_t H, int64_t W, int64_t OH, int64_t OW, uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " " + std::to_string(H) + "x" + std::to_string(W) + " -> " +
               std::to_string(OH) + "x" + std::to_string(OW));
  Generator gen(seed);
  const Tensor x = randn({2, 3, H, W}, kF64, &gen).to(dt), gy = randn({2, 3, OH, OW}, kF64, &gen).to(dt);
  const int64_t total = 6 * OH * OW, in_total = 6 * H * W;
  const auto out = in_both_orders(
      [&] { return std::vector<Tensor>{nans({2, 3, OH, OW}, dt), nans({2, 3, H, W}, dt)}; },
      [&](const std::vector<Tensor>& o, simt::Order order) {
        // As the host: a warp per output.
        simt::launch({dim3(kBlocks), dim3(cu::kThreads), 0, order},
                     [&] { cu::adaptive_forward_kernel<T>(ptr<T>(x), ptr<T>(o[0]), total, H, W, OH, OW); });
        simt::launch({dim3(kBlocks), dim3(cu::kThreads), 0, order},
                     [&] { cu::adaptive_backward_kernel<T>(ptr<T>(gy), ptr<T>(o[1]), in_total, H, W, OH, OW); });
      });
  EXPECT_LE(relative_error(out[0], cpu::adaptive_avg_pool2d_forward(f64(x), OH, OW)), tolerance(dt, false)) << "y";
  EXPECT_LE(relative_error(out[1], cpu::adaptive_avg_pool2d_backward(f64(gy), {2, 3, H, W})), tolerance(dt, true)) << "gx";
}

TEST(SimtPool, AdaptiveAvgPoolMatchesTheCpu) {
  adaptive_case<float>(DType::F32, 9, 11, 4, 3, 9);     // overlapping windows
  adaptive_case<BFloat16>(DType::BF16, 7, 7, 1, 1, 10);  // global average: a 49-element window over a warp
  adaptive_case<Half>(DType::F16, 5, 3, 7, 4, 11);      // more outputs than inputs
  adaptive_case<float>(DType::F32, 40, 40, 2, 2, 12);   // windows of 400 elements
}

}  // namespace
