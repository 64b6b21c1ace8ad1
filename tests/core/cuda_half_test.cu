// The f16/bf16 conversions and Philox run as device code: the GPU must produce the CPU's bits.
// Skips (with the reason) on machines without a GPU; compiles everywhere CUDA is found.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "core/device.h"
#include "core/half.h"
#include "core/rng.h"

using namespace trident;

namespace {

__global__ void convert_kernel(const uint32_t* in, uint16_t* h, uint16_t* b, float* back, uint32_t* rnd, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float f = detail::f32_from_bits(in[i]);
  h[i] = Half(f).bits;
  b[i] = BFloat16(f).bits;
  back[i] = static_cast<float>(Half::from_bits(static_cast<uint16_t>(i & 0xffff)));
  rnd[i] = detail::f32_bits(philox::uniform_f32_at(1234, 77, static_cast<uint64_t>(i)));
}

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << cudaGetErrorString(x)

}  // namespace

TEST(CudaHalf, DeviceConversionsAndPhiloxMatchTheCpu) {
  if (!cuda_is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  const int n = 1 << 20;
  std::vector<uint32_t> in(n);
  for (int i = 0; i < n; ++i) in[static_cast<size_t>(i)] = static_cast<uint32_t>(i) * 4099u + 0x9e3779b9u;
  uint32_t *d_in = nullptr, *d_rnd = nullptr;
  uint16_t *d_h = nullptr, *d_b = nullptr;
  float* d_back = nullptr;
  CUDA_OK(cudaMalloc(&d_in, n * 4));
  CUDA_OK(cudaMalloc(&d_h, n * 2));
  CUDA_OK(cudaMalloc(&d_b, n * 2));
  CUDA_OK(cudaMalloc(&d_back, n * 4));
  CUDA_OK(cudaMalloc(&d_rnd, n * 4));
  CUDA_OK(cudaMemcpy(d_in, in.data(), n * 4, cudaMemcpyHostToDevice));
  convert_kernel<<<(n + 255) / 256, 256>>>(d_in, d_h, d_b, d_back, d_rnd, n);
  CUDA_OK(cudaGetLastError());
  std::vector<uint16_t> h(n), b(n);
  std::vector<float> back(n);
  std::vector<uint32_t> rnd(n);
  CUDA_OK(cudaMemcpy(h.data(), d_h, n * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(b.data(), d_b, n * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(back.data(), d_back, n * 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(rnd.data(), d_rnd, n * 4, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    const float f = detail::f32_from_bits(in[static_cast<size_t>(i)]);
    ASSERT_EQ(h[static_cast<size_t>(i)], Half(f).bits) << i;
    ASSERT_EQ(b[static_cast<size_t>(i)], BFloat16(f).bits) << i;
    ASSERT_EQ(detail::f32_bits(back[static_cast<size_t>(i)]),
              detail::f32_bits(static_cast<float>(Half::from_bits(static_cast<uint16_t>(i & 0xffff)))))
        << i;
    ASSERT_EQ(rnd[static_cast<size_t>(i)], detail::f32_bits(philox::uniform_f32_at(1234, 77, static_cast<uint64_t>(i)))) << i;
  }
  cudaFree(d_in);
  cudaFree(d_h);
  cudaFree(d_b);
  cudaFree(d_back);
  cudaFree(d_rnd);
}
