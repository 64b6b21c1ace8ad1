// bf16 convolutions on the bf16 GEMM kernels (NOTE [bf16 convolutions]): the AMX direct kernels
// of ops/cpu/conv_amx.cpp (NOTE [AMX direct convolution]) and, on the AVX512-BF16 kernel, the
// im2col route, every pass against the f64 definition. On a CPU with neither they skip, saying so.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/conv_reference.h"
#include "ops/cpu/bgemm_amx.h"
#include "ops/cpu/conv.h"
#include "ops/cpu/conv_amx.h"
#include "ops/cpu/conv_narrow.h"
#include "test_util.h"

using namespace trident;
using namespace trident::testing;
using namespace trident::testing::conv_ref;

namespace {
// |got - ref| within the f32 sums' bound (as within_rounding) and then one rounding to bf16.
::testing::AssertionResult within_bf16_rounding(const Tensor& got, const Tensor& ref, const Tensor& magnitude, double terms) {
  constexpr double kUBF16 = 1.0 / 256;  // 2^-8: round to nearest with 8 significant bits
  const std::vector<double> g = got.to_vector<double>(), r = ref.to_vector<double>(), m = magnitude.to_vector<double>();
  if (got.sizes() != ref.sizes()) return ::testing::AssertionFailure() << "shapes differ";
  for (size_t i = 0; i < g.size(); ++i) {
    const double sums = 2.0 * terms * kU32 * m[i];
    const double tol = sums + kUBF16 * (std::fabs(r[i]) + sums) + 1e-30;
    if (!(std::fabs(g[i] - r[i]) <= tol))
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << r[i] << " (tolerance " << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

// bf16 forward and the three gradients on the chosen kernel against the f64 definition on the
// same bf16 values: each within the bound of f32 sums of exact products, rounded once.
void check_bf16_against_reference(const ConvCase& c, uint64_t seed) {
  Generator gen(seed);
  const Tensor x = randn(c.x, kF64, &gen).to(kBF16), w = randn(c.w, kF64, &gen).to(kBF16);
  const Tensor b = c.bias ? randn({c.w[0]}, kF64, &gen).to(kBF16) : Tensor();
  Tensor xl = x.clone().set_requires_grad(), wl = w.clone().set_requires_grad();
  Tensor bl = c.bias ? b.clone().set_requires_grad() : Tensor();
  Tensor out = conv2d(xl, wl, bl, c.p.stride, c.p.padding, c.p.dilation, c.p.groups);
  ASSERT_EQ(out.dtype(), kBF16);
  const Tensor gy = randn(out.sizes(), kF64, &gen).to(kBF16);
  out.backward(gy);
  const Tensor xd = x.to(kF64), wd = w.to(kF64), bd = c.bias ? b.to(kF64) : Tensor(), gyd = gy.to(kF64);
  const ConvReference ref = reference_conv2d(xd, wd, bd, c.p, gyd);
  const ConvReference mags = reference_conv2d(abs_of(xd), abs_of(wd), Tensor(), c.p, abs_of(gyd));
  const double terms = static_cast<double>(c.w[1] * c.w[2] * c.w[3] + 1);
  const double gx_terms = static_cast<double>(c.w[0] / c.p.groups * c.w[2] * c.w[3]);
  const double per_weight = static_cast<double>(out.numel() / c.w[0]);
  EXPECT_TRUE(within_bf16_rounding(out, ref.out, ref.magnitude, terms)) << "forward";
  EXPECT_TRUE(within_bf16_rounding(xl.grad(), ref.gx, mags.gx, gx_terms)) << "d input";
  EXPECT_TRUE(within_bf16_rounding(wl.grad(), ref.gw, mags.gw, per_weight)) << "d weight";
  if (c.bias) {
    EXPECT_TRUE(within_bf16_rounding(bl.grad(), ref.gb, mags.gb, per_weight)) << "d bias";
    // Summed from the bf16 values in place: exactly the sum of their f32 copy.
    EXPECT_EQ(bl.grad().to_vector<float>(), cpu::conv2d_backward_bias(gy.to(kF32)).to(kBF16).to_vector<float>());
  }
}

const std::vector<ConvCase> kBf16Cases = {
    {{3, 40, 9, 11}, {36, 40, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true},     // 3x3 same, tails in every dimension
    {{2, 8, 30, 30}, {8, 8, 3, 3}, {}, false},                               // no padding
    {{2, 64, 16, 17}, {70, 64, 1, 1}, {}, true},                             // pointwise, several images
    {{1, 33, 7, 5}, {16, 33, 1, 1}, {}, false},                              // pointwise, one image
    {{2, 16, 15, 15}, {16, 16, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1}, false},   // AmoebaNet's 1x7
    {{2, 16, 15, 15}, {24, 16, 7, 1}, {{1, 1}, {3, 0}, {1, 1}, 1}, false},   // and 7x1
    {{2, 24, 13, 12}, {40, 24, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}, true},    // strided
    {{2, 12, 11, 12}, {8, 12, 3, 2}, {{1, 2}, {2, 1}, {2, 1}, 1}, true},     // dilated, mixed strides
    {{2, 3, 17, 16}, {32, 3, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, false},     // a stem: three channels
    {{2, 32, 9, 9}, {48, 8, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 4}, true},       // groups
    {{2, 20, 6, 6}, {10, 20, 5, 5}, {{1, 1}, {4, 4}, {1, 1}, 1}, false},     // padding past the kernel's reach
    {{1, 40, 40, 40}, {34, 40, 1, 1}, {{2, 2}, {0, 0}, {1, 1}, 1}, false},   // 1x1 stride 2
    {{2, 16, 13, 14}, {24, 16, 3, 3}, {{3, 2}, {1, 2}, {2, 1}, 1}, true},    // stride 3 x 2 with dilation: every phase
    {{2, 16, 13, 17}, {24, 16, 3, 3}, {{2, 3}, {1, 2}, {3, 2}, 1}, false},   // and 2 x 3, taps out of phase order
    {{2, 8, 17, 9}, {8, 8, 7, 1}, {{2, 1}, {3, 0}, {1, 1}, 1}, false},      // 7x1 stride 2 along the kernel
    // The input gradient by phases of gx (NOTE [AMX direct convolution]): AmoebaNet's reduction
    // 3x3 stride 2 across two blocks of channels; stride 1 padded past the kernel's reach; rows
    // and columns no tap reaches (zero); a 1x1 stride 2 with odd sizes.
    {{2, 40, 14, 15}, {36, 40, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}, true},
    {{2, 16, 7, 9}, {24, 16, 3, 3}, {{1, 1}, {3, 2}, {1, 1}, 1}, false},
    {{2, 16, 8, 9}, {24, 16, 3, 3}, {{2, 2}, {0, 0}, {1, 1}, 1}, false},
    {{1, 16, 9, 11}, {16, 16, 1, 1}, {{2, 2}, {0, 0}, {1, 1}, 1}, false},
    // The weight gradient's spans of pixels: two in an image, then more images than one span
    // holds; four blocks of channels, so that one thread rounds each block as it ends.
    {{1, 64, 34, 34}, {64, 64, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, false},
    {{11, 32, 7, 7}, {100, 32, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, false},
    // Shifted columns (NOTE [AMX shifted columns]): dilated, and AmoebaNet's 1x7 on 7 x 7 maps
    // (the 1x7 on 15 x 15 and the 7 x 7 maps above take them too).
    {{2, 24, 7, 7}, {40, 24, 3, 3}, {{1, 1}, {2, 2}, {2, 2}, 1}, true},
    {{2, 40, 7, 7}, {36, 40, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1}, false},
    // Pointwise passes on one row of pixels (NOTE [AMX pointwise blocks]): 300 channels laid out
    // whole, their input gradient's 40 block by block, and odd pixel counts above.
    {{1, 300, 5, 7}, {40, 300, 1, 1}, {}, true},
    // Channels past one chunk of the direct kernels (kDirectChannels, 128) in both directions.
    {{2, 150, 6, 7}, {140, 150, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true},
};
}  // namespace

TEST(Conv2d, Bf16OnTheBf16GemmKernels) {
  // NOTE [bf16 convolutions]: bf16 convolutions (autocast's on the CPU) on the AMX or
  // AVX512-BF16 GEMM kernels, every pass, on 1 and 3 threads, and with every image its own chunk.
  const std::vector<cpu::Bf16Gemm> kernels = bf16_kernels();
  if (kernels.empty()) GTEST_SKIP() << kNoBf16Kernel;
  for (const cpu::Bf16Gemm k : kernels) {
    SCOPED_TRACE(k == cpu::Bf16Gemm::Amx ? "AMX" : "AVX512-BF16");
    const cpu::Bf16Gemm before = cpu::set_bf16_gemm_kernel_for_testing(k);
    on_one_and_three_threads(kBf16Cases, 8100, check_bf16_against_reference);
    cpu::set_conv_copy_budget_bytes_for_testing(1);
    on_one_and_three_threads(kBf16Cases, 8200, check_bf16_against_reference);
    cpu::set_conv_copy_budget_bytes_for_testing(0);
    cpu::set_bf16_gemm_kernel_for_testing(before);
  }
}

TEST(Conv2d, Bf16AmxGroupsOfOutputChannelBlocks) {
  // NOTE [AMX direct convolution]: the blocks of 32 output channels go in groups whose weights
  // fit a budget (a sixteenth of the copy budget): one block a group, then two blocks of 18 KB
  // a group with three blocks in all (a group's second slot past the last block, skipped), in the
  // forward pass and both input gradients (stride 1, and strided by phases), each within the
  // f64 reference's bound on 1 and 3 threads.
  const std::vector<cpu::Bf16Gemm> kernels = bf16_kernels();
  if (std::find(kernels.begin(), kernels.end(), cpu::Bf16Gemm::Amx) == kernels.end()) GTEST_SKIP() << kNoBf16Kernel;
  const cpu::Bf16Gemm before = cpu::set_bf16_gemm_kernel_for_testing(cpu::Bf16Gemm::Amx);
  const std::vector<ConvCase> cases = {
      {{2, 32, 9, 10}, {70, 32, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true},
      {{2, 70, 9, 10}, {32, 70, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}, false},  // gx's 70 channels: three blocks
  };
  for (const int64_t budget : {int64_t{1}, int64_t{16 * 2 * 9 * 32 * 32 * 2}}) {
    SCOPED_TRACE(budget);
    cpu::set_conv_copy_budget_bytes_for_testing(budget);
    on_one_and_three_threads(cases, 8450, check_bf16_against_reference);
  }
  cpu::set_conv_copy_budget_bytes_for_testing(0);
  cpu::set_bf16_gemm_kernel_for_testing(before);
}

TEST(Conv2d, Bf16AmxShiftedColumns) {
  // NOTE [AMX shifted columns]: forced on, every stride-1 case with kW > 1 (3x3 with tails, the
  // 1x7 and the 7 x 7 maps, dilation, padding past the kernel's reach, both input gradients' and
  // the weight gradient's layouts) within the f64 reference's bound on 1 and 3 threads and with
  // every image its own chunk; and the rule's choices: a 512-channel 3x3 on 7 x 7 maps shifts
  // (two blocks of pixels an image instead of three), AmoebaNet-D(6, 32)'s 1x7 of 32 channels
  // on 15 x 15 maps does not (seven copies for little work), nor does a 14 x 14 map (no block
  // saved).
  const std::vector<cpu::Bf16Gemm> kernels = bf16_kernels();
  if (std::find(kernels.begin(), kernels.end(), cpu::Bf16Gemm::Amx) == kernels.end()) GTEST_SKIP() << kNoBf16Kernel;
  const cpu::Bf16Gemm before = cpu::set_bf16_gemm_kernel_for_testing(cpu::Bf16Gemm::Amx);
  const int mode = cpu::set_amx_shifted_columns_for_testing(1);
  on_one_and_three_threads(kBf16Cases, 8470, check_bf16_against_reference);
  cpu::set_conv_copy_budget_bytes_for_testing(1);
  on_one_and_three_threads(kBf16Cases, 8480, check_bf16_against_reference);
  cpu::set_conv_copy_budget_bytes_for_testing(0);
  EXPECT_TRUE(cpu::amx_conv_shifts_columns(geometry_of({8, 32, 15, 15}, {32, 32, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1})));
  EXPECT_FALSE(cpu::amx_conv_shifts_columns(geometry_of({8, 32, 15, 15}, {32, 32, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1})));
  cpu::set_amx_shifted_columns_for_testing(-1);
  EXPECT_TRUE(cpu::amx_conv_shifts_columns(geometry_of({8, 512, 7, 7}, {512, 512, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1})));
  EXPECT_FALSE(cpu::amx_conv_shifts_columns(geometry_of({8, 32, 15, 15}, {32, 32, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1})));
  EXPECT_FALSE(cpu::amx_conv_shifts_columns(geometry_of({8, 256, 14, 14}, {256, 256, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1})));
  cpu::set_amx_shifted_columns_for_testing(mode);
  cpu::set_bf16_gemm_kernel_for_testing(before);
}

TEST(Conv2d, Bf16NarrowWeightGradientIsTheF32OneRoundedOnce) {
  // NOTE [Narrow weight gradients]: a bf16 weight gradient on the narrow kernel (taken before the
  // bf16 GEMM kernels) widens its operands exactly, so it is bit for bit the f32 narrow kernel's
  // result on the widened tensors, rounded to bf16; and within the f64 reference's bound.
  const std::vector<cpu::Bf16Gemm> kernels = bf16_kernels();
  if (kernels.empty()) GTEST_SKIP() << kNoBf16Kernel;
  const std::vector<ConvCase> cases = {
      {{2, 8, 30, 30}, {8, 8, 1, 7}, {{1, 1}, {0, 3}, {1, 1}, 1}, false},  // AmoebaNet-D(6, 32)'s 1x7
      {{2, 3, 70, 61}, {5, 3, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, false},  // three bands, tails of both blocks
      {{3, 8, 9, 10}, {8, 8, 1, 1}, {}, false},                            // pointwise
  };
  const int mode = cpu::set_narrow_backward_weight_for_testing(-1);
  for (const cpu::Bf16Gemm k : kernels) {
    SCOPED_TRACE(k == cpu::Bf16Gemm::Amx ? "AMX" : "AVX512-BF16");
    const cpu::Bf16Gemm before = cpu::set_bf16_gemm_kernel_for_testing(k);
    uint64_t seed = 8500;
    for (const ConvCase& c : cases) {
      SCOPED_TRACE(describe(c.p, c.x, c.w));
      Generator gen(seed++);
      const Tensor x = randn(c.x, kF64, &gen).to(kBF16), w = randn(c.w, kF64, &gen).to(kBF16);
      const cpu::Conv2dGeometry geo = geometry_of(c.x, c.w, c.p);
      const Tensor gy = randn({geo.N, geo.O, geo.OH, geo.OW}, kF64, &gen).to(kBF16);
      EXPECT_TRUE(cpu::narrow_backward_weight_applies(geo, true));
      const Tensor gw = cpu::conv2d_backward_weight(gy, x, geo);
      ASSERT_EQ(gw.dtype(), kBF16);
      EXPECT_EQ(gw.to_vector<float>(), cpu::conv2d_backward_weight(gy.to(kF32), x.to(kF32), geo).to(kBF16).to_vector<float>());
      const ConvReference ref = reference_conv2d(x.to(kF64), w.to(kF64), Tensor(), c.p, gy.to(kF64));
      const ConvReference mags = reference_conv2d(abs_of(x.to(kF64)), abs_of(w.to(kF64)), Tensor(), c.p, abs_of(gy.to(kF64)));
      EXPECT_TRUE(within_bf16_rounding(gw, ref.gw, mags.gw, static_cast<double>(gy.numel() / c.w[0])));
    }
    cpu::set_bf16_gemm_kernel_for_testing(before);
  }
  cpu::set_narrow_backward_weight_for_testing(mode);
}

TEST(Conv2d, Bf16OnTheBf16GemmKernelsDoesNotDependOnTheThreads) {
  const std::vector<cpu::Bf16Gemm> kernels = bf16_kernels();
  if (kernels.empty()) GTEST_SKIP() << kNoBf16Kernel;
  const int threads_before = get_num_threads();
  for (const cpu::Bf16Gemm k : kernels) {
    const cpu::Bf16Gemm before = cpu::set_bf16_gemm_kernel_for_testing(k);
    uint64_t seed = 8300;
    for (const ConvCase& c : kBf16Cases) {
      SCOPED_TRACE(describe(c.p, c.x, c.w));
      Generator gen(seed++);
      const Tensor x = randn(c.x, kF32, &gen).to(kBF16), w = randn(c.w, kF32, &gen).to(kBF16);
      std::vector<std::vector<float>> results[2];
      for (int run = 0; run < 2; ++run) {
        set_num_threads(run == 0 ? 1 : 3);
        Tensor xl = x.clone().set_requires_grad(), wl = w.clone().set_requires_grad();
        Tensor out = conv2d(xl, wl, Tensor(), c.p.stride, c.p.padding, c.p.dilation, c.p.groups);
        Generator gg(seed);
        out.backward(randn(out.sizes(), kF32, &gg).to(kBF16));
        results[run] = {out.to_vector<float>(), xl.grad().to_vector<float>(), wl.grad().to_vector<float>()};
      }
      for (size_t i = 0; i < 3; ++i) EXPECT_EQ(results[0][i], results[1][i]) << "result " << i;
    }
    cpu::set_bf16_gemm_kernel_for_testing(before);
  }
  set_num_threads(threads_before);
}

TEST(Conv2d, Bf16OnTheBf16GemmKernelsKeepsNaNWhereItReaches) {
  // One NaN input pixel: exactly the outputs whose window covers it are NaN, in every channel,
  // and the rounding to bf16 keeps them NaN; likewise one NaN in gy for the input gradient.
  const std::vector<cpu::Bf16Gemm> kernels = bf16_kernels();
  if (kernels.empty()) GTEST_SKIP() << kNoBf16Kernel;
  for (const cpu::Bf16Gemm k : kernels) {
    const cpu::Bf16Gemm before = cpu::set_bf16_gemm_kernel_for_testing(k);
    Generator gen(8400);
    std::vector<float> xv = randn({2, 16, 7, 6}, kF32, &gen).to_vector<float>();
    xv[static_cast<size_t>(((1 * 16 + 5) * 7 + 3) * 6 + 2)] = std::nanf("");  // image 1, channel 5, (3, 2)
    const Tensor x = from_vector<float>(xv, {2, 16, 7, 6}).to(kBF16), w = randn({20, 16, 3, 3}, kF32, &gen).to(kBF16);
    Tensor wl = w.clone().set_requires_grad(), xl = x.clone().set_requires_grad();
    Tensor out = conv2d(xl, wl, Tensor(), {1, 1}, {1, 1});
    const std::vector<float> y = out.to_vector<float>();
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t o = 0; o < 20; ++o)
        for (int64_t h = 0; h < 7; ++h)
          for (int64_t c = 0; c < 6; ++c) {
            const bool reached = n == 1 && std::abs(h - 3) <= 1 && std::abs(c - 2) <= 1;
            EXPECT_EQ(std::isnan(y[static_cast<size_t>(((n * 20 + o) * 7 + h) * 6 + c)]), reached) << n << " " << o << " " << h << " " << c;
          }
    std::vector<float> gv(y.size(), 1.0f);
    gv[static_cast<size_t>(((0 * 20 + 7) * 7 + 0) * 6 + 5)] = std::nanf("");  // image 0, channel 7, (0, 5)
    out.backward(from_vector<float>(gv, out.sizes()).to(kBF16));
    const std::vector<float> gx = xl.grad().to_vector<float>();
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 16; ++c)
        for (int64_t h = 0; h < 7; ++h)
          for (int64_t ww = 0; ww < 6; ++ww) {
            const bool reached = n == 0 && h <= 1 && ww >= 4;
            EXPECT_EQ(std::isnan(gx[static_cast<size_t>(((n * 16 + c) * 7 + h) * 6 + ww)]), reached) << n << " " << c << " " << h << " " << ww;
          }
    // Stride 2: one NaN in gy reaches exactly the gx pixels of its window's taps (output (2, 1)
    // reads rows 3-5 and columns 1-3 with padding 1), each phase's pass reading only its own taps.
    Tensor x2 = randn({1, 16, 8, 7}, kF32, &gen).to(kBF16).set_requires_grad();
    Tensor w2 = randn({20, 16, 3, 3}, kF32, &gen).to(kBF16);
    Tensor out2 = conv2d(x2, w2, Tensor(), {2, 2}, {1, 1});
    std::vector<float> g2(static_cast<size_t>(out2.numel()), 1.0f);
    g2[static_cast<size_t>((3 * 4 + 2) * 4 + 1)] = std::nanf("");  // channel 3, (2, 1)
    out2.backward(from_vector<float>(g2, out2.sizes()).to(kBF16));
    const std::vector<float> gx2 = x2.grad().to_vector<float>();
    for (int64_t c = 0; c < 16; ++c)
      for (int64_t h = 0; h < 8; ++h)
        for (int64_t ww = 0; ww < 7; ++ww) {
          const bool reached = h >= 3 && h <= 5 && ww >= 1 && ww <= 3;
          EXPECT_EQ(std::isnan(gx2[static_cast<size_t>((c * 8 + h) * 7 + ww)]), reached) << c << " " << h << " " << ww;
        }
    cpu::set_bf16_gemm_kernel_for_testing(before);
  }
}
