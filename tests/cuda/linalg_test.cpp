// cuBLASLt GEMM beyond the cross-backend table: big products in every dtype, TF32 on and off,
// operands that are misaligned views, permuted batches, the plan cache reused with new data, and
// the empty cases. Each result is compared with the CPU in f64 on the same (rounded) inputs.
#include <gtest/gtest.h>

#include "core/cuda/allocator.h"
#include "cuda/cuda_test_util.h"
#include "test_util.h"

using namespace trident;
using trident::testing::rel_error;

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
    EXPECT_LE(rel_error(matmul(a.to(kGPU), b.to(kGPU)).to(kCPU), ref), tol) << dt;
  }
}

TEST_F(CudaLinalg, Tf32IsOptIn) {
  const Tensor a = rand_in({256, 2048}, kF32, 3), b = rand_in({2048, 256}, kF32, 4);
  const Tensor ref = matmul(a.to(kF64), b.to(kF64));
  EXPECT_FALSE(matmul_allow_tf32());
  const double exact = rel_error(matmul(a.to(kGPU), b.to(kGPU)).to(kCPU), ref);
  set_matmul_allow_tf32(true);
  const double tf32 = rel_error(matmul(a.to(kGPU), b.to(kGPU)).to(kCPU), ref);
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
    EXPECT_LE(rel_error(linear(a, w, bias).to(kCPU), ref), trident::testing::tolerance(dt, false)) << dt;
    // A batch with permuted dims (no single batch stride): copied, then one strided batch.
    const Tensor p = rand_in({6, 3, 5, 8}, dt, 8), q = rand_in({3, 6, 8, 4}, dt, 9);
    const Tensor pp = permute(p, {1, 0, 2, 3});
    const Tensor refb = matmul(pp.to(kF64), q.to(kF64));
    EXPECT_LE(rel_error(matmul(pp.to(kGPU), q.to(kGPU)).to(kCPU), refb), trident::testing::tolerance(dt, false)) << dt;
  }
}

TEST_F(CudaLinalg, CachedPlansTakeEachCallsPointers) {
  // The same shapes twice: the cached plan must use the second call's data and bias.
  const Tensor x = rand_in({16, 32}, kF32, 10), w = rand_in({8, 32}, kF32, 11);
  for (uint64_t seed : {12, 13, 14}) {
    const Tensor b = rand_in({8}, kF32, seed);
    const Tensor x2 = mul(x, static_cast<double>(seed));
    const Tensor got = linear(x2.to(kGPU), w.to(kGPU), b.to(kGPU)).to(kCPU);
    EXPECT_LE(rel_error(got, linear(x2.to(kF64), w.to(kF64), b.to(kF64))), 1e-6) << seed;
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
