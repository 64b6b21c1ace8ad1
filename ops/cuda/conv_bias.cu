// The bias parts of conv2d on CUDA (NOTE [cuDNN convolutions] in ops/cuda/conv.h): adding the
// bias to cuDNN's output, and the bias gradient.
#include <algorithm>

#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/common.cuh"
#include "ops/cuda/conv.h"

namespace trident::cuda {
namespace {

// y[n, o, s] += b[o] over a contiguous [N, O, S] tensor; a grid-stride loop.
template <typename T>
__global__ void add_channel_bias_kernel(T* __restrict__ y, const T* __restrict__ b, int64_t numel, int64_t channels,
                                        int64_t spatial) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel; i += step) {
    const int64_t o = (i / spatial) % channels;
    y[i] = static_cast<T>(static_cast<float>(y[i]) + static_cast<float>(b[o]));
  }
}

// db[o] = sum over n, s of gy[n, o, s]: one block per channel (blocks stride over channels past
// the grid), threads walk the channel's n * S elements in a fixed order and the block combines
// them in a fixed tree: the same bits on every run.
template <typename T>
__global__ void __launch_bounds__(kReduceThreads) channel_sum_kernel(const T* __restrict__ gy, T* __restrict__ db,
                                                                     int64_t n, int64_t channels, int64_t spatial) {
  __shared__ float smem[kReduceThreads / 32];
  const int64_t per_channel = n * spatial;
  for (int64_t o = blockIdx.x; o < channels; o += gridDim.x) {
    float s = 0.0f;
    for (int64_t k = threadIdx.x; k < per_channel; k += blockDim.x) {
      const int64_t i = k / spatial, j = k - i * spatial;
      s += static_cast<float>(gy[(i * channels + o) * spatial + j]);
    }
    s = block_reduce(s, SumOp{}, 0.0f, smem);
    if (threadIdx.x == 0) db[o] = static_cast<T>(s);
  }
}

}  // namespace

// The host side: not compiled by the CPU emulator (tests/simt/simt.h), whose tests launch the
// kernels above themselves.
#if !defined(TRIDENT_SIMT)
void add_channel_bias_(const Tensor& y, const Tensor& b) {
  const int64_t numel = y.numel(), channels = y.size(1);
  if (numel == 0) return;
  const int64_t spatial = numel / (y.size(0) * channels);
  DeviceGuard guard(y.device().index);
  const cudaStream_t stream = current_stream(y.device().index).handle();
  TRIDENT_DISPATCH_CUDA_FLOATING(y.dtype(), "conv2d", [&] {
    add_channel_bias_kernel<scalar_t><<<grid_size(numel), kThreads, 0, stream>>>(
        static_cast<scalar_t*>(y.data_ptr()), static_cast<const scalar_t*>(b.data_ptr()), numel, channels, spatial);
  });
  TRIDENT_CUDA_KERNEL_CHECK();
}

Tensor conv2d_backward_bias(const Tensor& grad_out) {
  const Tensor gy = grad_out.detach().contiguous();
  TRIDENT_CHECK(gy.dim() >= 2, "conv2d_backward_bias (CUDA): expected gy [N, O, ...], got shape ", gy.sizes());
  const int64_t n = gy.size(0), channels = gy.size(1);
  const Device dev = gy.device();
  if (channels == 0) return empty({0}, TensorOptions(gy.dtype()).device(dev));
  if (gy.numel() == 0) return zeros({channels}, TensorOptions(gy.dtype()).device(dev));
  const int64_t spatial = gy.numel() / (n * channels);
  Tensor db = empty({channels}, TensorOptions(gy.dtype()).device(dev));
  DeviceGuard guard(dev.index);
  const cudaStream_t stream = current_stream(dev.index).handle();
  const int blocks = static_cast<int>(std::min<int64_t>(channels, 65535));
  TRIDENT_DISPATCH_CUDA_FLOATING(gy.dtype(), "conv2d_backward_bias", [&] {
    channel_sum_kernel<scalar_t><<<blocks, kReduceThreads, 0, stream>>>(
        static_cast<const scalar_t*>(gy.data_ptr()), static_cast<scalar_t*>(db.data_ptr()), n, channels, spatial);
  });
  TRIDENT_CUDA_KERNEL_CHECK();
  return db;
}

#endif  // !TRIDENT_SIMT

}  // namespace trident::cuda
