// conv2d (cuDNN) and the pooling kernels on CUDA, on what the cross-backend table cannot reach:
// weight and bias gradients at AmoebaNet-like sizes against the CPU in f64, their bit-for-bit
// repeatability (deterministic backward algorithms, fixed-order bias sums), the algorithm cache
// (a second call with the same key asks cuDNN nothing; TF32 and the shapes are part of the key),
// a conv -> batch norm -> relu -> max pool training step with the running statistics and then
// eval mode, max pooling's NaN / -inf / index rules, misaligned and empty inputs, and the errors.
// Every device allocation is poisoned with NaN, so an element a kernel forgets to write fails.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/cuda/allocator.h"
#include "cuda/cuda_test_util.h"
#include "ops/cuda/conv.h"
#include "ops/cuda/linalg.h"
#include "test_util.h"

using namespace trident;

namespace {

const Device kGPU = Device::cuda(0);
using trident::testing::relative_error;
using trident::testing::tolerance;

class CudaConv : public trident::testing::PoisonedCuda<> {};

Tensor randn_dt(const Shape& s, DType dt, uint64_t seed) {
  Generator g(seed);
  return randn(s, kF64, &g).to(dt);
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.to(kCPU).to_vector<double>() == b.to(kCPU).to_vector<double>();
}

struct ConvCase {
  Shape x, w;
  Int2 stride, padding, dilation;
  int64_t groups;
};

// AmoebaNet's shapes, larger than the table's: 3x3 and 1x7 / 7x1 stacks, a strided reduction
// cell, a separable (depthwise then pointwise) pair.
const std::vector<ConvCase> kCases = {
    {{8, 32, 28, 28}, {32, 32, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
    {{8, 32, 28, 28}, {48, 32, 1, 7}, {1, 1}, {0, 3}, {1, 1}, 1},
    {{8, 32, 28, 28}, {32, 32, 7, 1}, {2, 2}, {3, 0}, {1, 1}, 1},
    {{8, 32, 27, 29}, {32, 1, 5, 5}, {2, 2}, {2, 2}, {1, 1}, 32},
    {{8, 32, 28, 28}, {64, 32, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},
    {{4, 24, 17, 19}, {24, 6, 3, 3}, {1, 1}, {2, 2}, {2, 2}, 4},
};

TEST_F(CudaConv, WeightAndBiasGradientsMatchTheCpuInF64) {
  uint64_t seed = 1;
  for (DType dt : {kF32, kF16, kBF16}) {
    for (const ConvCase& c : kCases) {
      SCOPED_TRACE(detail::str(dtype_name(dt), " x ", c.x, " w ", c.w, " groups ", c.groups));
      const Tensor x = randn_dt(c.x, dt, seed++), w = randn_dt(c.w, dt, seed++), b = randn_dt({c.w[0]}, dt, seed++);
      std::vector<Tensor> ref = {x.to(kF64), w.to(kF64), b.to(kF64)}, dev = {x.to(kGPU), w.to(kGPU), b.to(kGPU)};
      for (Tensor& t : ref) t = t.detach().set_requires_grad(true);
      for (Tensor& t : dev) t = t.detach().set_requires_grad(true);
      const Tensor yr = conv2d(ref[0], ref[1], ref[2], c.stride, c.padding, c.dilation, c.groups);
      const Tensor yg = conv2d(dev[0], dev[1], dev[2], c.stride, c.padding, c.dilation, c.groups);
      ASSERT_EQ(yg.sizes(), yr.sizes());
      EXPECT_LE(relative_error(yg.to(kCPU), yr), tolerance(dt, false)) << "forward";
      const Tensor gy = randn_dt(yr.sizes(), dt, seed++);
      sum(mul(yr, gy.to(kF64))).backward();
      sum(mul(yg, gy.to(kGPU))).backward();
      EXPECT_LE(relative_error(dev[0].grad().to(kCPU), ref[0].grad()), tolerance(dt, true)) << "d input";
      EXPECT_LE(relative_error(dev[1].grad().to(kCPU), ref[1].grad()), tolerance(dt, true)) << "d weight";
      EXPECT_LE(relative_error(dev[2].grad().to(kCPU), ref[2].grad()), tolerance(dt, true)) << "d bias";
      EXPECT_EQ(dev[1].grad().dtype(), dt);
    }
  }
}

TEST_F(CudaConv, BackwardIsBitForBitRepeatable) {
  for (DType dt : {kF32, kBF16}) {
    for (const ConvCase& c : kCases) {
      SCOPED_TRACE(detail::str(dtype_name(dt), " x ", c.x, " w ", c.w));
      const Tensor x = randn_dt(c.x, dt, 11).to(kGPU), w = randn_dt(c.w, dt, 12).to(kGPU);
      const Tensor b = randn_dt({c.w[0]}, dt, 13).to(kGPU);
      std::vector<Tensor> grads[2];
      for (int run = 0; run < 2; ++run) {
        const Tensor xr = x.detach().set_requires_grad(true), wr = w.detach().set_requires_grad(true);
        const Tensor br = b.detach().set_requires_grad(true);
        const Tensor y = conv2d(xr, wr, br, c.stride, c.padding, c.dilation, c.groups);
        sum(mul(y, randn_dt(y.sizes(), dt, 14).to(kGPU))).backward();
        grads[run] = {xr.grad(), wr.grad(), br.grad()};
      }
      EXPECT_TRUE(bitwise_equal(grads[0][0], grads[1][0])) << "d input";
      EXPECT_TRUE(bitwise_equal(grads[0][1], grads[1][1])) << "d weight";
      EXPECT_TRUE(bitwise_equal(grads[0][2], grads[1][2])) << "d bias";
    }
  }
}

TEST_F(CudaConv, AlgorithmsAreChosenOncePerKey) {
  cuda::clear_conv_algorithm_cache();
  const bool tf32 = cuda::allow_tf32();
  cuda::set_allow_tf32(false);
  const Tensor x = randn_dt({2, 8, 10, 10}, kF32, 1).to(kGPU), w = randn_dt({16, 8, 3, 3}, kF32, 2).to(kGPU);
  const int64_t q0 = cuda::conv_algorithm_queries();
  {
    NoGradGuard no_grad;
    conv2d(x, w, Tensor(), {1, 1}, {1, 1});
    EXPECT_EQ(cuda::conv_algorithm_queries(), q0 + 1) << "the forward's first call asks once";
    conv2d(x, w, Tensor(), {1, 1}, {1, 1});
    EXPECT_EQ(cuda::conv_algorithm_queries(), q0 + 1) << "the same key asks nothing";
  }
  for (int step = 0; step < 2; ++step) {
    const Tensor xr = x.detach().set_requires_grad(true), wr = w.detach().set_requires_grad(true);
    sum(conv2d(xr, wr, Tensor(), {1, 1}, {1, 1})).backward();
    // Step 0 adds the two backward passes; step 1 finds all three cached.
    EXPECT_EQ(cuda::conv_algorithm_queries(), q0 + 3) << "step " << step;
  }
  {
    NoGradGuard no_grad;
    conv2d(x, w, Tensor(), {2, 2}, {1, 1});  // another stride: another key
    EXPECT_EQ(cuda::conv_algorithm_queries(), q0 + 4);
    conv2d(x.to(kBF16), w.to(kBF16), Tensor(), {1, 1}, {1, 1});  // another dtype
    EXPECT_EQ(cuda::conv_algorithm_queries(), q0 + 5);
    cuda::set_allow_tf32(true);  // another math mode for f32
    conv2d(x, w, Tensor(), {1, 1}, {1, 1});
    EXPECT_EQ(cuda::conv_algorithm_queries(), q0 + 6);
    cuda::set_allow_tf32(false);
    conv2d(x, w, Tensor(), {1, 1}, {1, 1});
    EXPECT_EQ(cuda::conv_algorithm_queries(), q0 + 6) << "back to the first key";
    cuda::clear_conv_algorithm_cache();
    conv2d(x, w, Tensor(), {1, 1}, {1, 1});
    EXPECT_EQ(cuda::conv_algorithm_queries(), q0 + 7) << "after clearing, asked again";
  }
  cuda::set_allow_tf32(tf32);
}

// A block of AmoebaNet: conv -> batch norm (training, running statistics) -> relu -> max pool,
// two training steps then eval, on the GPU against the CPU in f64 on the same rounded inputs.
TEST_F(CudaConv, ConvBatchNormPoolTrainingStepAndEvalMatchTheCpu) {
  for (DType dt : {kF32, kF16, kBF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor w = randn_dt({12, 6, 3, 3}, dt, 21), gamma = randn_dt({12}, dt, 22), beta = randn_dt({12}, dt, 23);
    Tensor rm_c = zeros({12}), rv_c = ones({12});  // f32 running statistics on both sides
    Tensor rm_g = zeros({12}).to(kGPU), rv_g = ones({12}).to(kGPU);
    // Max pooling in f32 only: in f16/bf16 the GPU's conv output is rounded to dt and the CPU's is
    // not, so two near-equal values of a window could swap places and send a gradient elsewhere.
    auto block = [dt](const Tensor& x, const Tensor& w, const Tensor& rm, const Tensor& rv, const Tensor& g,
                      const Tensor& b, bool training) {
      const Tensor y = relu(batch_norm(conv2d(x, w, Tensor(), {1, 1}, {1, 1}), rm, rv, g, b, training, 0.1, 1e-5));
      return dt == kF32 ? max_pool2d(y, {3, 3}, Int2{2, 2}, {1, 1}) : avg_pool2d(y, {3, 3}, Int2{2, 2}, {1, 1});
    };
    for (int step = 0; step < 2; ++step) {
      const Tensor x = randn_dt({4, 6, 15, 13}, dt, 30 + static_cast<uint64_t>(step));
      std::vector<Tensor> ref = {x.to(kF64), w.to(kF64), gamma.to(kF64), beta.to(kF64)};
      std::vector<Tensor> dev = {x.to(kGPU), w.to(kGPU), gamma.to(kGPU), beta.to(kGPU)};
      for (Tensor& t : ref) t = t.detach().set_requires_grad(true);
      for (Tensor& t : dev) t = t.detach().set_requires_grad(true);
      const Tensor yr = block(ref[0], ref[1], rm_c, rv_c, ref[2], ref[3], true);
      const Tensor yg = block(dev[0], dev[1], rm_g, rv_g, dev[2], dev[3], true);
      EXPECT_LE(relative_error(yg.to(kCPU), yr), tolerance(dt, true)) << "forward, step " << step;
      const Tensor gy = randn_dt(yr.sizes(), dt, 40 + static_cast<uint64_t>(step));
      sum(mul(yr, gy.to(kF64))).backward();
      sum(mul(yg, gy.to(kGPU))).backward();
      for (size_t i = 0; i < ref.size(); ++i)
        EXPECT_LE(relative_error(dev[i].grad().to(kCPU), ref[i].grad()), 2 * tolerance(dt, true)) << "input " << i;
      // The running statistics come from the batch statistics of the conv output, which the two
      // sides compute from slightly different conv outputs (dt rounding on the GPU).
      EXPECT_LE(relative_error(rm_g.to(kCPU), rm_c), tolerance(dt, true)) << "running_mean, step " << step;
      EXPECT_LE(relative_error(rv_g.to(kCPU), rv_c), tolerance(dt, true)) << "running_var, step " << step;
    }
    const Tensor x = randn_dt({3, 6, 9, 9}, dt, 50);
    const Tensor yr = block(x.to(kF64), w.to(kF64), rm_c, rv_c, gamma.to(kF64), beta.to(kF64), false);
    const Tensor yg = block(x.to(kGPU), w.to(kGPU), rm_g, rv_g, gamma.to(kGPU), beta.to(kGPU), false);
    EXPECT_LE(relative_error(yg.to(kCPU), yr), tolerance(dt, true)) << "eval";
  }
}

TEST_F(CudaConv, MaxPoolNanInfAndIndicesFollowTheCpu) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  // One 4x5 plane: a NaN, a row of -inf, and ties.
  const std::vector<double> v = {1, 2, 2, -inf, 0,  //
                                 -inf, -inf, -inf, -inf, -inf,  //
                                 3, nan, 3, 1, 1,  //
                                 0, 0, -1, 5, 5};
  const Tensor x = from_vector<double>(v, {1, 1, 4, 5});
  struct P {
    Int2 k, s, p, d;
    bool ceil;
  };
  for (const P& q : {P{{2, 2}, {2, 2}, {0, 0}, {1, 1}, false}, P{{2, 2}, {1, 1}, {1, 1}, {1, 1}, true},
                     P{{3, 3}, {2, 2}, {1, 1}, {1, 2}, true}, P{{1, 3}, {1, 2}, {0, 1}, {1, 1}, true}}) {
    for (DType dt : {kF32, kF16, kBF16}) {
      SCOPED_TRACE(detail::str(dtype_name(dt), " kernel ", Shape{q.k[0], q.k[1]}, " stride ", Shape{q.s[0], q.s[1]}));
      const Tensor xd = x.to(dt);
      auto [yc, ic] = max_pool2d_with_indices(xd, q.k, q.s, q.p, q.d, q.ceil);
      auto [yg, ig] = max_pool2d_with_indices(xd.to(kGPU), q.k, q.s, q.p, q.d, q.ceil);
      EXPECT_EQ(ig.dtype(), kI64);
      EXPECT_EQ(ig.to(kCPU).to_vector<int64_t>(), ic.to_vector<int64_t>());
      const std::vector<double> a = yg.to(kCPU).to_vector<double>(), b = yc.to_vector<double>();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        if (std::isnan(b[i])) {
          EXPECT_TRUE(std::isnan(a[i])) << i;
        } else {
          EXPECT_EQ(a[i], b[i]) << i;
        }
      }
      // The gradient of every output lands on its index: gx on the device equals the CPU's.
      const Tensor xc = xd.detach().set_requires_grad(true), xg = xd.to(kGPU).detach().set_requires_grad(true);
      const Tensor gy = randn_dt(yc.sizes(), dt, 60);
      sum(mul(max_pool2d(xc, q.k, q.s, q.p, q.d, q.ceil), gy)).backward();
      sum(mul(max_pool2d(xg, q.k, q.s, q.p, q.d, q.ceil), gy.to(kGPU))).backward();
      EXPECT_LE(relative_error(xg.grad().to(kCPU), xc.grad()), tolerance(dt, true));
    }
  }
}

TEST_F(CudaConv, MisalignedNonContiguousAndEmptyInputs) {
  // A contiguous view 4 bytes into its storage (cuDNN's 16-byte loads need a copy).
  const Tensor flat = randn_dt({1 + 2 * 3 * 9 * 9}, kF32, 70);
  const Tensor x = reshape(slice(flat, 0, 1, flat.numel()), {2, 3, 9, 9});
  const Tensor w = randn_dt({4, 3, 3, 3}, kF32, 71);
  const Tensor ref = conv2d(x.to(kF64), w.to(kF64), Tensor(), {1, 1}, {1, 1});
  const Tensor got = conv2d(reshape(slice(flat.to(kGPU), 0, 1, flat.numel()), {2, 3, 9, 9}), w.to(kGPU), Tensor(),
                            {1, 1}, {1, 1});
  EXPECT_LE(relative_error(got.to(kCPU), ref), tolerance(kF32, false));
  // An empty batch: empty outputs, zero weight and bias gradients.
  const Tensor xe = zeros({0, 3, 9, 9}, TensorOptions(kF32).device(kGPU)).set_requires_grad(true);
  const Tensor we = w.to(kGPU).detach().set_requires_grad(true);
  const Tensor be = zeros({4}, TensorOptions(kF32).device(kGPU)).set_requires_grad(true);
  const Tensor ye = conv2d(xe, we, be, {1, 1}, {1, 1});
  EXPECT_EQ(ye.sizes(), (Shape{0, 4, 9, 9}));
  sum(ye).backward();
  EXPECT_EQ(we.grad().to(kCPU).to_vector<float>(), std::vector<float>(4 * 3 * 3 * 3, 0.0f));
  EXPECT_EQ(be.grad().to(kCPU).to_vector<float>(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(xe.grad().sizes(), (Shape{0, 3, 9, 9}));
  const Tensor pe = max_pool2d(zeros({0, 2, 6, 6}, TensorOptions(kF32).device(kGPU)), {2, 2});
  EXPECT_EQ(pe.sizes(), (Shape{0, 2, 3, 3}));
}

TEST_F(CudaConv, ErrorsNameTheOpAndTheValues) {
  const Tensor x = ones({1, 2, 5, 5}, TensorOptions(kF64).device(kGPU)), w = ones({3, 2, 3, 3}, TensorOptions(kF64).device(kGPU));
  const std::string f64 = trident::testing::error_message([&] { conv2d(x, w); });
  EXPECT_NE(f64.find("conv2d"), std::string::npos) << f64;
  EXPECT_NE(f64.find("f64"), std::string::npos) << f64;
  const std::string pool = trident::testing::error_message([&] { max_pool2d(x, {2, 2}); });
  EXPECT_NE(pool.find("max_pool2d"), std::string::npos) << pool;
  const std::string mixed = trident::testing::error_message([&] { conv2d(x.to(kF32), ones({3, 2, 3, 3})); });
  EXPECT_NE(mixed.find("same device"), std::string::npos) << mixed;
}

}  // namespace
