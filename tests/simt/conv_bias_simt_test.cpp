// The bias kernels of CUDA conv2d (ops/cuda/conv_bias.cu: adding the bias to cuDNN's output, and
// the bias gradient), which no GPU has run yet, on the SIMT emulator (NOTE [Kernels on the CPU
// emulator] in tests/simt/simt.h) against sums in f64 on the same (rounded) inputs, with more
// channels than blocks (the block loop over channels) and planes smaller and larger than a block.
#include "tests/simt/simt.h"  // first: it defines what the kernels below take from nvcc

#include "ops/cuda/conv_bias.cu"

#include <gtest/gtest.h>

#include <string>

#include "simt/simt_test_util.h"
#include "test_util.h"

using namespace trident;
using namespace trident::simt_testing;
namespace cu = trident::cuda;

namespace {

template <typename T>
void bias_case(DType dt, int64_t n, int64_t channels, int64_t spatial, unsigned blocks, uint64_t seed) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " [" + std::to_string(n) + ", " + std::to_string(channels) + ", " +
               std::to_string(spatial) + "] on " + std::to_string(blocks) + " blocks");
  Generator g(seed);
  const Tensor y0 = randn({n, channels, spatial}, kF64, &g).to(dt), b = randn({channels}, kF64, &g).to(dt);
  const Tensor gy = randn({n, channels, spatial}, kF64, &g).to(dt);
  const int64_t numel = n * channels * spatial;
  Tensor y[2], db[2];
  for (int o = 0; o < 2; ++o) {
    const simt::Order order = o == 0 ? simt::Order::Forward : simt::Order::Reverse;
    y[o] = y0.clone();
    db[o] = nans({channels}, dt);
    simt::launch({dim3(blocks), dim3(cu::kThreads), 0, order},
                 [&] { cu::add_channel_bias_kernel<T>(ptr<T>(y[o]), ptr<T>(b), numel, channels, spatial); });
    simt::launch({dim3(blocks), dim3(cu::kReduceThreads), 0, order},
                 [&] { cu::channel_sum_kernel<T>(ptr<T>(gy), ptr<T>(db[o]), n, channels, spatial); });
  }
  EXPECT_TRUE(same_bits(y[0], y[1]) && same_bits(db[0], db[1])) << "depends on the thread order";
  // y + b in f32, rounded once to T: exactly what the kernel computes.
  EXPECT_TRUE(same_bits(y[0], add(y0.to(kF32), reshape(b.to(kF32), {1, channels, 1})).to(dt))) << "y + b";
  EXPECT_LE(relative_error(db[0], sum(gy.to(kF64), {0, 2})), tolerance(dt, true)) << "db";
}

TEST(SimtConvBias, AddAndGradientMatchTheCpu) {
  bias_case<float>(DType::F32, 2, 5, 300, 3, 1);     // planes larger than a block
  bias_case<BFloat16>(DType::BF16, 3, 7, 9, 2, 2);   // more channels than blocks
  bias_case<Half>(DType::F16, 1, 4, 1, 4, 3);        // one position per plane
}

}  // namespace
