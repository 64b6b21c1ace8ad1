// The CUDA layer norm and batch norm against the CPU kernels, on what the cross-backend table
// cannot reach: batch norm's running statistics (updated in place, f32 or the input's dtype),
// long layer-norm rows, dw/db over many row chunks (and bit-for-bit repeatable), each subset of
// the wanted gradients, and the errors. Every device allocation is poisoned with NaN, so an
// element a kernel forgets to write fails. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/cuda/allocator.h"
#include "ops/cuda/norm.h"
#include "cuda/cuda_test_util.h"
#include "test_util.h"

using namespace trident;

namespace {

const Device kGPU = Device::cuda(0);

class CudaNorm : public trident::testing::PoisonedCuda<> {};

Tensor randn_dt(const Shape& s, DType dt, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  Generator g(seed);
  return add(mul(randn(s, kF64, &g), scale), shift).to(dt);
}

// max |a - b| / (max |b| + tiny) over all elements; NaN in either side is a failure.
::testing::AssertionResult close(const Tensor& got, const Tensor& ref, double tol) {
  const std::vector<double> a = got.to(kCPU).to_vector<double>(), b = ref.to(kCPU).to_vector<double>();
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i]))
      return ::testing::AssertionFailure() << "NaN at " << i << ": " << a[i] << " vs " << b[i];
    worst = std::max(worst, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  if (worst <= tol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max abs difference " << worst << " > " << tol << " * " << scale;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.to(kCPU).to_vector<double>() == b.to(kCPU).to_vector<double>();
}

// f32 accumulation against the CPU (f64 sums in f32 rows): a few ulps of f32 growing with the
// reduction length; half types add one rounding of the result.
double tol(DType dt) { return dt == kF32 ? 2e-5 : (dt == kF16 ? 2e-3 : 1.6e-2); }

TEST_F(CudaNorm, BatchNormTrainingUpdatesRunningStatsAsTheCpu) {
  struct Case {
    Shape shape;
    DType dt, running_dt;
  };
  const std::vector<Case> cases = {
      {{8, 5, 6, 7}, kF32, kF32},     {{16, 3}, kF32, kF32},           {{2, 4, 33, 35}, kF32, kF32},
      {{4, 6, 5, 5}, kF16, kF32},     {{4, 6, 5, 5}, kF16, kF16},      {{3, 2, 17, 9}, kBF16, kF32},
      {{3, 2, 17, 9}, kBF16, kBF16}, {{2, 300, 1, 1}, kF32, kF32}};
  uint64_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(detail::str(c.shape, " ", dtype_name(c.dt), " running ", dtype_name(c.running_dt)));
    const int64_t ch = c.shape[1];
    const Tensor rm0 = randn_dt({ch}, c.running_dt, seed++), rv0 = add(abs(randn_dt({ch}, c.running_dt, seed++)), 0.5);
    Tensor rm_cpu = rm0.clone(), rv_cpu = rv0.clone();
    Tensor rm_gpu = rm0.to(kGPU), rv_gpu = rv0.to(kGPU);
    const Tensor w = randn_dt({ch}, c.dt, seed++), b = randn_dt({ch}, c.dt, seed++);
    // Two training steps (the second moves the already-moved statistics), then eval with them.
    for (int step = 0; step < 2; ++step) {
      // Inputs with a large mean against their spread: the two-pass variance keeps its digits.
      const Tensor x = randn_dt(c.shape, c.dt, seed++, 2.0, 3.0);
      const Tensor xc = x.detach().set_requires_grad(true), xg = x.to(kGPU).detach().set_requires_grad(true);
      const Tensor wc = w.detach().set_requires_grad(true), wg = w.to(kGPU).detach().set_requires_grad(true);
      const Tensor bc = b.detach().set_requires_grad(true), bg = b.to(kGPU).detach().set_requires_grad(true);
      const Tensor yc = batch_norm(xc, rm_cpu, rv_cpu, wc, bc, true, 0.1, 1e-5);
      const Tensor yg = batch_norm(xg, rm_gpu, rv_gpu, wg, bg, true, 0.1, 1e-5);
      ASSERT_EQ(yg.device(), kGPU);
      ASSERT_EQ(yg.dtype(), c.dt);
      EXPECT_TRUE(close(yg, yc, tol(c.dt))) << "y, step " << step;
      EXPECT_EQ(rm_gpu.dtype(), c.running_dt);
      EXPECT_TRUE(close(rm_gpu, rm_cpu, tol(c.running_dt))) << "running_mean, step " << step;
      EXPECT_TRUE(close(rv_gpu, rv_cpu, tol(c.running_dt))) << "running_var, step " << step;
      const Tensor gw = randn_dt(c.shape, c.dt, seed++);
      sum(mul(yc, gw)).backward();
      sum(mul(yg, gw.to(kGPU))).backward();
      EXPECT_TRUE(close(xg.grad(), xc.grad(), 2 * tol(c.dt))) << "dx, step " << step;
      EXPECT_TRUE(close(wg.grad(), wc.grad(), 2 * tol(c.dt))) << "dw, step " << step;
      EXPECT_TRUE(close(bg.grad(), bc.grad(), 2 * tol(c.dt))) << "db, step " << step;
    }
    // Eval: the running statistics normalize; dx = g w rstd; they stay unchanged.
    const Tensor x = randn_dt(c.shape, c.dt, seed++);
    const Tensor xc = x.detach().set_requires_grad(true), xg = x.to(kGPU).detach().set_requires_grad(true);
    const Tensor rm_before = rm_gpu.to(kCPU).clone();
    const Tensor yc = batch_norm(xc, rm_cpu, rv_cpu, w, b, false, 0.1, 1e-5);
    const Tensor yg = batch_norm(xg, rm_gpu, rv_gpu, w.to(kGPU), b.to(kGPU), false, 0.1, 1e-5);
    EXPECT_TRUE(close(yg, yc, tol(c.dt))) << "eval y";
    EXPECT_TRUE(bitwise_equal(rm_gpu, rm_before)) << "eval must not move running_mean";
    const Tensor gw = randn_dt(c.shape, c.dt, seed++);
    sum(mul(yc, gw)).backward();
    sum(mul(yg, gw.to(kGPU))).backward();
    EXPECT_TRUE(close(xg.grad(), xc.grad(), 2 * tol(c.dt))) << "eval dx";
  }
}

// nn::BatchNorm2d moved to the GPU (as AmoebaNet's are by train_imagenet --device cuda) trains
// as on the CPU: its i64 num_batches_tracked buffer counts the training forwards on the device
// (an add the CUDA arithmetic ops, floating only, cannot do), the running statistics follow the
// CPU module's, and an evaluation forward uses them.
TEST_F(CudaNorm, BatchNorm2dModuleCountsBatchesAndTracksStatsOnTheGpu) {
  nn::BatchNorm2d cpu(5), gpu(5);
  gpu.to(kGPU);
  for (int i = 0; i < 3; ++i) {
    const Tensor x = randn_dt({4, 5, 3, 7}, kF32, 300 + static_cast<uint64_t>(i), 2.0, 0.5);
    EXPECT_TRUE(close(gpu.forward(x.to(kGPU)), cpu.forward(x), tol(kF32))) << "forward " << i;
  }
  ASSERT_EQ(gpu.num_batches_tracked.device(), kGPU);
  EXPECT_EQ(gpu.num_batches_tracked.dtype(), DType::I64);
  EXPECT_EQ(gpu.num_batches_tracked.item<int64_t>(), 3);
  EXPECT_EQ(cpu.num_batches_tracked.item<int64_t>(), 3);
  EXPECT_TRUE(close(gpu.running_mean, cpu.running_mean, tol(kF32)));
  EXPECT_TRUE(close(gpu.running_var, cpu.running_var, tol(kF32)));
  cpu.eval();
  gpu.eval();
  const Tensor x = randn_dt({2, 5, 3, 3}, kF32, 320);
  EXPECT_TRUE(close(gpu.forward(x.to(kGPU)), cpu.forward(x), tol(kF32)));
  EXPECT_EQ(gpu.num_batches_tracked.item<int64_t>(), 3) << "an evaluation forward counts no batch";
}

// NOTE [Deferred batch norm] on the GPU (train_imagenet --device cuda defers every batch norm,
// NOTE [Batch norm in the apps]): the totals are f32 there (no f64 reductions), the commit runs
// on the device, and the running statistics after two micro-batches follow the CPU module's;
// through commit_deferred_batch_norms with a reduction too (the host tensor it sums is f64).
TEST_F(CudaNorm, DeferredBatchNormCommitsOnTheGpuAsOnTheCpu) {
  for (const bool reduced : {false, true}) {
    SCOPED_TRACE(reduced ? "reduced" : "plain");
    nn::BatchNorm2d cpu(6), gpu(6);
    gpu.to(kGPU);
    cpu.deferred = gpu.deferred = true;
    for (int i = 0; i < 2; ++i) {
      const Tensor x = randn_dt({3 + i, 6, 4, 5}, kF32, 400 + static_cast<uint64_t>(i), 1.5, 0.7);
      EXPECT_TRUE(close(gpu.forward(x.to(kGPU)), cpu.forward(x), tol(kF32))) << "forward " << i;
    }
    ASSERT_EQ(gpu.deferred_count(), cpu.deferred_count());
    if (reduced) {
      // A second "rank" with the same rows: the totals and counts double (the mean stays the rows').
      auto twice = [](Tensor& t) {
        ASSERT_EQ(t.device(), kCPU);
        ASSERT_EQ(t.dtype(), DType::F64);
        t = mul(t, 2.0);
      };
      nn::commit_deferred_batch_norms({&cpu}, twice);
      nn::commit_deferred_batch_norms({&gpu}, twice);
    } else {
      cpu.commit_deferred();
      gpu.commit_deferred();
    }
    EXPECT_EQ(gpu.deferred_count(), 0);
    EXPECT_EQ(gpu.num_batches_tracked.item<int64_t>(), 1);
    ASSERT_EQ(gpu.running_mean.device(), kGPU);
    EXPECT_TRUE(close(gpu.running_mean, cpu.running_mean, tol(kF32)));
    EXPECT_TRUE(close(gpu.running_var, cpu.running_var, tol(kF32)));
  }
}

TEST_F(CudaNorm, BatchNormWithoutRunningStatsAndEmptyBatch) {
  // No running statistics: batch statistics in both modes' wrapper paths; an empty batch gives
  // an empty result and leaves the running statistics alone (m = 0).
  const Tensor x = randn_dt({5, 4, 3}, kF32, 9);
  EXPECT_TRUE(close(batch_norm(x.to(kGPU), Tensor(), Tensor(), Tensor(), Tensor(), true),
                    batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true), tol(kF32)));
  Tensor rm = zeros({4}, TensorOptions(kF32).device(kGPU)), rv = ones({4}, TensorOptions(kF32).device(kGPU));
  const Tensor y = batch_norm(zeros({0, 4, 3}, TensorOptions(kF32).device(kGPU)), rm, rv, Tensor(), Tensor(), true);
  EXPECT_EQ(y.sizes(), (Shape{0, 4, 3}));
  EXPECT_EQ(rm.to(kCPU).to_vector<float>(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(rv.to(kCPU).to_vector<float>(), std::vector<float>(4, 1.0f));
}

// Layer norm forward and all gradients against the CPU in f64 on the same inputs; run twice on
// the GPU, the gradients must agree bit for bit (NOTE [CUDA norm reductions]: no atomics).
void check_layer_norm(const Shape& shape, int64_t cols, DType dt, bool affine, uint64_t seed) {
  SCOPED_TRACE(detail::str(shape, " ", dtype_name(dt), affine ? " affine" : " plain"));
  const Tensor x = randn_dt(shape, dt, seed, 1.5, -2.0), g = randn_dt(shape, dt, seed + 1);
  const Tensor w = randn_dt({cols}, dt, seed + 2), b = randn_dt({cols}, dt, seed + 3);
  const Tensor xr = x.to(kF64).detach().set_requires_grad(true);
  const Tensor wr = affine ? w.to(kF64).detach().set_requires_grad(true) : Tensor();
  const Tensor br = affine ? b.to(kF64).detach().set_requires_grad(true) : Tensor();
  const Tensor yr = layer_norm(xr, {cols}, wr, br);
  sum(mul(yr, g.to(kF64))).backward();
  std::vector<Tensor> first;
  for (int run = 0; run < 2; ++run) {
    const Tensor xg = x.to(kGPU).detach().set_requires_grad(true);
    const Tensor wg = affine ? w.to(kGPU).detach().set_requires_grad(true) : Tensor();
    const Tensor bg = affine ? b.to(kGPU).detach().set_requires_grad(true) : Tensor();
    const Tensor yg = layer_norm(xg, {cols}, wg, bg);
    ASSERT_EQ(yg.dtype(), dt);
    sum(mul(yg, g.to(kGPU))).backward();
    const std::vector<Tensor> got = {yg, xg.grad(), affine ? wg.grad() : Tensor(), affine ? bg.grad() : Tensor()};
    if (run == 0) {
      EXPECT_TRUE(close(yg, yr, tol(dt))) << "y";
      EXPECT_TRUE(close(xg.grad(), xr.grad(), 2 * tol(dt))) << "dx";
      if (affine) {
        EXPECT_TRUE(close(wg.grad(), wr.grad(), 2 * tol(dt))) << "dw";
        EXPECT_TRUE(close(bg.grad(), br.grad(), 2 * tol(dt))) << "db";
      }
      first = got;
    } else {
      for (size_t i = 0; i < got.size(); ++i) {
        if (!got[i].defined()) continue;
        EXPECT_TRUE(bitwise_equal(got[i], first[i])) << "result " << i << " differs";
      }
    }
  }
}

TEST_F(CudaNorm, LayerNormLongRowsAndManyRowChunks) {
  check_layer_norm({3, 8192}, 8192, kF32, true, 10);
  check_layer_norm({2, 20000}, 20000, kF32, true, 20);
  check_layer_norm({2, 1023}, 1023, kBF16, true, 30);  // the last warp-per-row width
  check_layer_norm({1000, 768}, 768, kF32, true, 40);   // 32 chunks of rows for dw, db
  check_layer_norm({4, 5000, 64}, 64, kF16, true, 50);  // 254 chunks of 79 rows (the last shorter)
  check_layer_norm({300, 4097}, 4097, kF32, false, 60);
}

TEST_F(CudaNorm, LayerNormEachSubsetOfGradients) {
  // need_dx, need_dw, need_db honoured: only the inputs that require grad get one, and each
  // equals the CPU's.
  const Tensor x = randn_dt({9, 70}, kF32, 70), w = randn_dt({70}, kF32, 71), b = randn_dt({70}, kF32, 72);
  const Tensor g = randn_dt({9, 70}, kF32, 73);
  for (int mask = 1; mask < 8; ++mask) {
    SCOPED_TRACE("mask " + std::to_string(mask));
    auto run = [&](Device d) {
      std::vector<Tensor> in = {x.to(d).detach().set_requires_grad((mask & 1) != 0),
                                w.to(d).detach().set_requires_grad((mask & 2) != 0),
                                b.to(d).detach().set_requires_grad((mask & 4) != 0)};
      sum(mul(layer_norm(in[0], {70}, in[1], in[2]), g.to(d))).backward();
      return in;
    };
    const std::vector<Tensor> c = run(kCPU), d = run(kGPU);
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_EQ(d[i].grad().defined(), ((mask >> i) & 1) != 0) << "input " << i;
      if (d[i].grad().defined()) {
        EXPECT_TRUE(close(d[i].grad(), c[i].grad(), 2e-5)) << "input " << i;
      }
    }
  }
}

TEST_F(CudaNorm, LayerNormEmptyRowsAndZeroWidth) {
  const TensorOptions o = TensorOptions(kF32).device(kGPU);
  EXPECT_EQ(layer_norm(zeros({0, 8}, o), {8}).sizes(), (Shape{0, 8}));
  // Zero columns: an empty result, and weight/bias gradients of zero length.
  const Tensor x = zeros({3, 0}, o).set_requires_grad(true), w = ones({0}, o).set_requires_grad(true);
  const Tensor y = layer_norm(x, {0}, w);
  EXPECT_EQ(y.sizes(), (Shape{3, 0}));
  sum(y).backward();
  EXPECT_EQ(w.grad().sizes(), (Shape{0}));
}

// The fused residual kernel (NOTE [Fused residual layer norm] in ops/norm.h) against the two
// separate device ops it replaces: its sum must be add's bits (x + r in f32, rounded once to the
// dtype) and its output, mean and rstd layer_norm's bits on that sum (the same per-thread order
// of the same rounded values). Covers both row widths (warp rows below 1024 columns, block rows
// from 1024), rows that leave the last block's warps without a row (37, 1001), many rows, one
// column, empty rows and zero columns.
TEST_F(CudaNorm, AddLayerNormIsAddThenLayerNormBitForBit) {
  struct Case {
    int64_t rows, cols;
  };
  const std::vector<Case> cases = {{37, 33}, {37, 1}, {1001, 1023}, {3, 1024}, {5, 5000}, {9, 64}, {0, 16}, {4, 0}};
  uint64_t seed = 300;
  for (DType dt : {kF32, kF16, kBF16}) {
    for (const Case& c : cases) {
      for (bool affine : {true, false}) {
        SCOPED_TRACE(detail::str(dtype_name(dt), " rows ", c.rows, " cols ", c.cols, affine ? " affine" : " plain"));
        const Tensor x = randn_dt({c.rows, c.cols}, dt, seed++, 3.0, 1.0).to(kGPU);
        const Tensor r = randn_dt({c.rows, c.cols}, dt, seed++).to(kGPU);
        const Tensor w = affine ? randn_dt({c.cols}, dt, seed++).to(kGPU) : Tensor();
        const Tensor b = affine ? randn_dt({c.cols}, dt, seed++).to(kGPU) : Tensor();
        const cuda::AddLayerNormForward f = cuda::add_layer_norm(x, r, c.rows, c.cols, w, b, 1e-5);
        const Tensor s = add(x, r);
        const cuda::LayerNormForward ln = cuda::layer_norm(s, c.rows, c.cols, w, b, 1e-5);
        EXPECT_EQ(f.sum.dtype(), dt);
        EXPECT_EQ(f.y.dtype(), dt);
        EXPECT_EQ(f.sum.numel(), c.rows * c.cols);
        EXPECT_EQ(f.mean.numel(), c.rows);
        EXPECT_TRUE(bitwise_equal(f.sum, s)) << "sum";
        EXPECT_TRUE(bitwise_equal(f.y, ln.y)) << "y";
        if (c.cols == 0) {  // no elements: NaN statistics, as layer_norm's
          for (double v : f.mean.to(kCPU).to_vector<double>()) EXPECT_TRUE(std::isnan(v));
          for (double v : f.rstd.to(kCPU).to_vector<double>()) EXPECT_TRUE(std::isnan(v));
        } else {
          EXPECT_TRUE(bitwise_equal(f.mean, ln.mean)) << "mean";
          EXPECT_TRUE(bitwise_equal(f.rstd, ln.rstd)) << "rstd";
        }
      }
    }
  }
}

TEST_F(CudaNorm, ErrorsNameTheOpTheDtypeAndTheDevices) {
  const Tensor x = ones({2, 3}, TensorOptions(kF32).device(kGPU));
  const std::string f64 = trident::testing::error_message([&] { layer_norm(x.to(kF64), {3}); });
  EXPECT_NE(f64.find("layer_norm"), std::string::npos) << f64;
  EXPECT_NE(f64.find("f64"), std::string::npos) << f64;
  const std::string dev = trident::testing::error_message([&] { layer_norm(x, {3}, ones({3})); });
  EXPECT_NE(dev.find("weight"), std::string::npos) << dev;
  EXPECT_NE(dev.find("cuda:0"), std::string::npos) << dev;
  const std::string run = trident::testing::error_message([&] { batch_norm(x, zeros({3}), ones({3}), Tensor(), Tensor(), true); });
  EXPECT_NE(run.find("running_mean"), std::string::npos) << run;
  const std::string bf64 =
      trident::testing::error_message([&] { batch_norm(x.to(kF64), Tensor(), Tensor(), Tensor(), Tensor(), true); });
  EXPECT_NE(bf64.find("batch_norm"), std::string::npos) << bf64;
  EXPECT_NE(bf64.find("f64"), std::string::npos) << bf64;
}

}  // namespace
