// The CUDA dropout against the CPU: for the same generator state both backends keep the same
// elements and give bit-identical outputs and gradients (NOTE in ops/math/dropout.h), in f32,
// f16 and bf16, and the generators advance alike. Skips without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/cuda/allocator.h"
#include "cuda/cuda_test_util.h"
#include "test_util.h"

using namespace trident;

namespace {

const Device kGPU = Device::cuda(0);

class CudaDropout : public trident::testing::PoisonedCuda<> {};

TEST_F(CudaDropout, SameMaskOutputAndGradientAsTheCpu) {
  uint64_t seed = 5;
  for (DType dt : {kF32, kF16, kBF16}) {
    for (double p : {0.1, 0.5}) {
      // Odd sizes: a last Philox block of 1, 2 or 3 elements; a transposed (non-contiguous) input.
      for (const Shape& shape : {Shape{1001}, Shape{37, 130}, Shape{3, 5, 7}}) {
        SCOPED_TRACE(detail::str(dtype_name(dt), " p ", p, " shape ", shape));
        Generator init(seed++);
        const Tensor x = randn(shape, kF64, &init).to(dt), gy = randn(shape, kF64, &init).to(dt);
        // The generator's offset is not 0: the draw starts mid-stream, as in training.
        Generator gc(seed), gg(seed);
        ++seed;
        gc.reserve(3);
        gg.reserve(3);
        const Tensor xc = x.detach().set_requires_grad(true), xg = x.to(kGPU).detach().set_requires_grad(true);
        const Tensor yc = dropout(xc, p, true, &gc), yg = dropout(xg, p, true, &gg);
        ASSERT_EQ(yg.device(), kGPU);
        ASSERT_EQ(yg.dtype(), dt);
        EXPECT_EQ(gg.state(), gc.state());
        const std::vector<double> a = yg.to(kCPU).to_vector<double>(), b = yc.to_vector<double>();
        EXPECT_EQ(a, b) << "outputs differ";
        if (b.size() >= 1000) {  // the dropped fraction within 5 standard deviations (<= 0.016) of p
          int64_t dropped = 0;
          for (double v : b) dropped += v == 0.0 ? 1 : 0;  // (randn never gives an exact 0)
          EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(b.size()), p, 0.08) << "dropped fraction";
        }
        yc.backward(gy);
        yg.backward(gy.to(kGPU));
        EXPECT_EQ(xg.grad().to(kCPU).to_vector<double>(), xc.grad().to_vector<double>()) << "gradients differ";
        // The gradient is zero exactly where the output is.
        const std::vector<double> gx = xc.grad().to_vector<double>();
        for (size_t i = 0; i < gx.size(); ++i) ASSERT_EQ(gx[i] == 0.0, b[i] == 0.0) << "element " << i;
      }
    }
  }
}

TEST_F(CudaDropout, NonContiguousAndLargeInputs) {
  Generator init(3);
  // A transposed input is read in row-major order of its logical shape, as on the CPU.
  const Tensor xt = transpose(randn({40, 33}, kF64, &init).to(kF32), 0, 1);
  Generator gc(8), gg(8);
  EXPECT_EQ(dropout(xt.to(kGPU), 0.25, true, &gg).to(kCPU).to_vector<float>(),
            dropout(xt, 0.25, true, &gc).to_vector<float>());
  // 2^20 + 3 elements: a grid-stride loop over many Philox blocks.
  const Tensor big = randn({(1 << 20) + 3}, kF32, &init);
  EXPECT_EQ(dropout(big.to(kGPU), 0.5, true, &gg).to(kCPU).to_vector<float>(),
            dropout(big, 0.5, true, &gc).to_vector<float>());
  // p = 1 drops everything.
  const std::vector<float> all = dropout(big.to(kGPU), 1.0, true, &gg).to(kCPU).to_vector<float>();
  for (float v : all) ASSERT_EQ(v, 0.0f);
}

TEST_F(CudaDropout, ReplayingTheStateGivesTheSameMask) {
  // Saving the state and restoring it (re-materialization) replays the same draw on the GPU.
  Generator g(21);
  const Tensor x = ones({4, 257}, TensorOptions(kBF16).device(kGPU));
  const PhiloxState s = g.state();
  const std::vector<float> first = dropout(x, 0.5, true, &g).to(kCPU).to_vector<float>();
  g.set_state(s);
  EXPECT_EQ(dropout(x, 0.5, true, &g).to(kCPU).to_vector<float>(), first);
  const std::string f64 = trident::testing::error_message([&] { dropout(x.to(kF64), 0.5, true, &g); });
  EXPECT_NE(f64.find("dropout"), std::string::npos) << f64;
  EXPECT_NE(f64.find("f64"), std::string::npos) << f64;
}

}  // namespace
