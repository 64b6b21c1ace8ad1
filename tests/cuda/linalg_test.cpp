// cuBLASLt GEMM beyond the cross-backend table: big products in every dtype, TF32 on and off,
// operands that are misaligned views, permuted batches, the plan cache reused with new data, and
// the empty cases. Each result is compared with the CPU in f64 on the same (rounded) inputs.
#include <gtest/gtest.h>

#include "core/cuda/allocator.h"
#include "cuda/cuda_test_util.h"
#include "test_util.h"

using namespace trident;
using trident::testing::relative_error;

namespace {

const Device kGPU = Device::cuda(0);

Tensor rand_in(const Shape& s, DType dt, uint64_t seed) {
  Generator g(seed);
  return randn(s, kF64, &g).to(dt);
}

class CudaLinalg : public trident::testing::PoisonedCuda<> {
 protected:
  void TearDown() override {
    PoisonedCuda::TearDown();
    set_matmul_allow_tf32(false);
  }
};

TEST_F(CudaLinalg, LargeProductsInEveryDtype) {
  // f32 accumulates in f32 over k = 1024 (error ~ sqrt(k) 2^-24); f16/bf16 round the output once.
  const std::vector<std::pair<DType, double>> cases = {{kF32, 1e-6}, {kF16, 1e-3}, {kBF16, 6e-3}};
  for (const auto& [dt, tol] : cases) {
    const Tensor a = rand_in({300, 1024}, dt, 1), b = rand_in({1024, 257}, dt, 2);
    const Tensor ref = matmul(a.to(kF64), b.to(kF64));
    EXPECT_LE(relative_error(matmul(a.to(kGPU), b.to(kGPU)).to(kCPU), ref), tol) << dt;
  }
}

TEST_F(CudaLinalg, Tf32IsOptIn) {
  const Tensor a = rand_in({256, 2048}, kF32, 3), b = rand_in({2048, 256}, kF32, 4);
  const Tensor ref = matmul(a.to(kF64), b.to(kF64));
  EXPECT_FALSE(matmul_allow_tf32());
  const double exact = relative_error(matmul(a.to(kGPU), b.to(kGPU)).to(kCPU), ref);
  set_matmul_allow_tf32(true);
  const double tf32 = relative_error(matmul(a.to(kGPU), b.to(kGPU)).to(kCPU), ref);
  EXPECT_LE(exact, 1e-6);
  // TF32 keeps 10 mantissa bits of each input: relative error near 2^-11, far above f32's.
  EXPECT_LE(tf32, 2e-3);
  EXPECT_GT(tf32, 10 * exact);
}

TEST_F(CudaLinalg, MisalignedAndStridedViews) {
  for (DType dt : {kF32, kF16, kBF16}) {
    // One element in: 2- or 4-byte aligned operands, which most tensor-core kernels refuse.
    const Tensor big = rand_in({1 + 64 * 96}, dt, 5).to(kGPU);
    const Tensor a = reshape(slice(big, 0, 1, 1 + 64 * 96), {64, 96});
    const Tensor w = rand_in({40, 96}, dt, 6).to(kGPU);
    const Tensor bias_big = rand_in({41}, dt, 7).to(kGPU);
    const Tensor bias = slice(bias_big, 0, 1, 41);
    const Tensor ref = linear(a.to(kCPU).to(kF64), w.to(kCPU).to(kF64), bias.to(kCPU).to(kF64));
    EXPECT_LE(relative_error(linear(a, w, bias).to(kCPU), ref), trident::testing::tolerance(dt, false)) << dt;
    // A batch with permuted dims (no single batch stride): copied, then one strided batch.
    const Tensor p = rand_in({6, 3, 5, 8}, dt, 8), q = rand_in({3, 6, 8, 4}, dt, 9);
    const Tensor pp = permute(p, {1, 0, 2, 3});
    const Tensor refb = matmul(pp.to(kF64), q.to(kF64));
    EXPECT_LE(relative_error(matmul(pp.to(kGPU), q.to(kGPU)).to(kCPU), refb), trident::testing::tolerance(dt, false)) << dt;
  }
}

TEST_F(CudaLinalg, CachedPlansTakeEachCallsPointers) {
  // The same shapes twice: the cached plan must use the second call's data and bias.
  const Tensor x = rand_in({16, 32}, kF32, 10), w = rand_in({8, 32}, kF32, 11);
  for (uint64_t seed : {12, 13, 14}) {
    const Tensor b = rand_in({8}, kF32, seed);
    const Tensor x2 = mul(x, static_cast<double>(seed));
    const Tensor got = linear(x2.to(kGPU), w.to(kGPU), b.to(kGPU)).to(kCPU);
    EXPECT_LE(relative_error(got, linear(x2.to(kF64), w.to(kF64), b.to(kF64))), 1e-6) << seed;
  }
}

TEST_F(CudaLinalg, ExpandedSharedRightOperand) {
  // b is a view expanded over the batch (stride 0, numel 4 * k * n in shape terms): the shared
  // right operand of the folded GEMM is b's first batch entry, not reshape(b, {k, n}).
  for (DType dt : {kF32, kF16, kBF16}) {
    const Tensor a = rand_in({4, 7, 24}, dt, 16), b = rand_in({24, 10}, dt, 17);
    const Tensor ref = matmul(a.to(kF64), b.to(kF64));
    const Tensor got = matmul(a.to(kGPU), expand(b.to(kGPU), {4, 24, 10})).to(kCPU);
    EXPECT_LE(relative_error(got, ref), trident::testing::tolerance(dt, false)) << dt;
    // Transposed and expanded: the shared matrix is read with op T.
    const Tensor bt = rand_in({10, 24}, dt, 18);
    const Tensor reft = matmul(a.to(kF64), transpose(bt.to(kF64), 0, 1));
    const Tensor gott = matmul(a.to(kGPU), expand(transpose(bt.to(kGPU), 0, 1), {4, 24, 10})).to(kCPU);
    EXPECT_LE(relative_error(gott, reft), trident::testing::tolerance(dt, false)) << dt;
  }
}

TEST_F(CudaLinalg, FusedGeluPlansTakeEachCallsAuxAndBias) {
  // linear_gelu's cached plan reused by two calls of one shape: each call's pre-activation (the
  // epilogue's aux output) must land in its own buffer, so both backward passes match the CPU.
  // A misaligned bias (one element in) gets its own plan.
  for (DType dt : {kF16, kBF16}) {
    const Tensor w = rand_in({24, 48}, dt, 19);
    const Tensor bias_big = rand_in({25}, dt, 20);
    std::vector<Tensor> xs_gpu, xs_cpu, ws_gpu, ws_cpu;
    std::vector<Tensor> ys_gpu, ys_cpu;
    for (int i = 0; i < 3; ++i) {
      const Tensor x = rand_in({9, 48}, dt, 21 + static_cast<uint64_t>(i));
      const Tensor b = i == 2 ? slice(bias_big, 0, 1, 25) : slice(bias_big, 0, 0, 24);
      Tensor xg = x.to(kGPU).set_requires_grad(), wg = w.to(kGPU).set_requires_grad();
      Tensor xc = x.to(kF64).set_requires_grad(), wc = w.to(kF64).set_requires_grad();
      ys_gpu.push_back(linear_gelu(xg, wg, b.to(kGPU), GeluApproximation::Tanh));
      ys_cpu.push_back(linear_gelu(xc, wc, b.to(kF64), GeluApproximation::Tanh));
      xs_gpu.push_back(xg), xs_cpu.push_back(xc), ws_gpu.push_back(wg), ws_cpu.push_back(wc);
    }
    const double tol = trident::testing::tolerance(dt, true);
    for (size_t i = 0; i < ys_gpu.size(); ++i) {  // backward only after every forward ran
      const Tensor gy = rand_in(ys_cpu[i].sizes(), dt, 30 + i);
      sum(mul(ys_gpu[i], gy.to(kGPU))).backward();
      sum(mul(ys_cpu[i], gy.to(kF64))).backward();
      EXPECT_LE(relative_error(ys_gpu[i].to(kCPU), ys_cpu[i].detach()), tol) << dt << " call " << i;
      EXPECT_LE(relative_error(xs_gpu[i].grad().to(kCPU), xs_cpu[i].grad()), tol) << dt << " dx, call " << i;
      EXPECT_LE(relative_error(ws_gpu[i].grad().to(kCPU), ws_cpu[i].grad()), tol) << dt << " dw, call " << i;
    }
  }
}

TEST_F(CudaLinalg, EmptyAndZeroInner) {
  const TensorOptions o = TensorOptions(kF32).device(kGPU);
  EXPECT_EQ(matmul(empty({0, 4}, o), empty({4, 3}, o)).sizes(), (Shape{0, 3}));
  const Tensor z = matmul(empty({5, 0}, o), empty({0, 3}, o));
  EXPECT_EQ(z.to(kCPU).to_vector<float>(), std::vector<float>(15, 0.f));
  const Tensor bias = rand_in({3}, kF32, 15);
  const Tensor lb = linear(empty({2, 0}, o), empty({3, 0}, o), bias.to(kGPU)).to(kCPU);
  const std::vector<float> bv = bias.to_vector<float>();
  EXPECT_EQ(lb.to_vector<float>(), (std::vector<float>{bv[0], bv[1], bv[2], bv[0], bv[1], bv[2]}));
}

TEST_F(CudaLinalg, F64IsRefusedByName) {
  const Tensor a = ones({2, 2}, TensorOptions(kF64).device(kGPU));
  const std::string msg = trident::testing::error_message([&] { matmul(a, a); });
  EXPECT_NE(msg.find("f64"), std::string::npos) << msg;
}

}  // namespace
