#include "ops/cuda/dropout.h"

#include "ops/cuda/common.cuh"
#include "ops/math/dropout.h"

namespace trident::cuda {

namespace {

constexpr int kBlock = 256;

// A thread per Philox block of 4 elements (NOTE [Philox streams]): block b gives elements
// 4b .. 4b + 3 their 32-bit numbers, exactly as the CPU kernel's loop over blocks does. Loads of
// neighbouring threads are 4 elements apart: a warp still reads one contiguous span.
template <typename T>
__global__ void __launch_bounds__(kBlock) dropout_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t n,
                                                         uint64_t seed, uint64_t offset, uint32_t threshold,
                                                         float scale) {
  const int64_t blocks = (n + 3) / 4;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t bits[4];
    philox::block(seed, offset, static_cast<uint64_t>(b), bits);
    const int64_t i0 = b * 4;
#pragma unroll
    for (int l = 0; l < 4; ++l)
      if (i0 + l < n)
        out[i0 + l] = static_cast<T>(math::dropout_apply(static_cast<float>(x[i0 + l]), bits[l], threshold, scale));
  }
}

}  // namespace

// The host side: not compiled by the CPU emulator (tests/simt/simt.h), whose tests launch the
// kernels above themselves.
#if !defined(TRIDENT_SIMT)
Tensor dropout(const Tensor& x_in, const PhiloxState& state, double p) {
  const Device dev = x_in.device();
  const Tensor x = x_in.detach().contiguous();  // row-major order, as the CPU reads it
  Tensor out = empty_on(x.sizes(), x.dtype(), dev);
  const int64_t n = x.numel();
  // The threshold and the f32 scale exactly as the CPU kernel computes them.
  const uint32_t threshold = math::dropout_threshold(p);
  const float scale = static_cast<float>(p >= 1.0 ? 0.0 : 1.0 / (1.0 - p));
  TRIDENT_DISPATCH_CUDA_FLOATING(x.dtype(), "dropout", [&] {
    if (n == 0) return;
    DeviceGuard guard(dev.index);
    dropout_kernel<scalar_t><<<grid_size((n + 3) / 4), kBlock, 0, current_stream(dev.index).handle()>>>(
        static_cast<const scalar_t*>(x.data_ptr()), static_cast<scalar_t*>(out.data_ptr()), n, state.seed,
        state.offset, threshold, scale);
    TRIDENT_CUDA_KERNEL_CHECK();
  });
  return out;
}

#endif  // !TRIDENT_SIMT

}  // namespace trident::cuda
