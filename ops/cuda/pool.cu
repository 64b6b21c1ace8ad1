#include "ops/cuda/pool.h"

#include <cmath>

#include "ops/cuda/common.cuh"
#include "ops/math/pool.h"

namespace trident::cuda {
namespace {

// NOTE [CUDA pooling] in ops/cuda/pool.h.

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The first in-range element of a dilated window starting at `start` (maybe in the padding), or
// -1 when none of its k taps is inside [0, in) (as ops/cpu/pool.cpp).
__device__ __forceinline__ int64_t first_valid(int64_t start, int64_t k, int64_t dilation, int64_t in) {
  const int64_t j = start < 0 ? (-start + dilation - 1) / dilation : 0;
  const int64_t i = start + j * dilation;
  return (j < k && i < in) ? i : -1;
}

// ---- max ----

template <typename T>
__global__ void max_pool_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t* __restrict__ ind,
                                        int64_t total, Pool2dGeometry g) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t ow = i % g.OW, t = i / g.OW, oh = t % g.OH, p = t / g.OH;
    const T* xp = x + p * g.H * g.W;
    const int64_t hstart = oh * g.sh - g.ph, wstart = ow * g.sw - g.pw;
    float best = -INFINITY;
    int64_t idx = -1;
    for (int64_t kh = 0; kh < g.kH; ++kh) {
      const int64_t ih = hstart + kh * g.dh;
      if (ih < 0 || ih >= g.H) continue;
      for (int64_t kw = 0; kw < g.kW; ++kw) {
        const int64_t iw = wstart + kw * g.dw;
        if (iw < 0 || iw >= g.W) continue;
        const float v = static_cast<float>(xp[ih * g.W + iw]);
        if (v > best || v != v) {  // v != v: NaN wins (the last NaN, as the CPU)
          best = v;
          idx = ih * g.W + iw;
        }
      }
    }
    if (idx < 0) {  // every element -inf (or none in range): the first in-range one, or -1
      const int64_t ih0 = first_valid(hstart, g.kH, g.dh, g.H), iw0 = first_valid(wstart, g.kW, g.dw, g.W);
      idx = (ih0 >= 0 && iw0 >= 0) ? ih0 * g.W + iw0 : -1;
    }
    y[i] = static_cast<T>(best);
    ind[i] = idx;
  }
}

// The outputs along one dim whose dilated window has a tap at input position `i`: tap k of
// output o sits at o * stride - pad + k * dilation. Visits o in ascending order (k descending).
template <typename F>
__device__ __forceinline__ void for_each_tap_output(int64_t i, int64_t k_count, int64_t stride, int64_t pad,
                                                    int64_t dilation, int64_t out, F f) {
  for (int64_t k = k_count - 1; k >= 0; --k) {
    const int64_t t = i + pad - k * dilation;
    if (t < 0 || t % stride != 0) continue;
    const int64_t o = t / stride;
    if (o < out) f(o);
  }
}

template <typename T>
__global__ void max_pool_backward_kernel(const T* __restrict__ gy, const int64_t* __restrict__ ind,
                                         T* __restrict__ gx, int64_t total, Pool2dGeometry g) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t iw = i % g.W, t = i / g.W, ih = t % g.H, p = t / g.H;
    const int64_t flat = ih * g.W + iw, base = p * g.OH * g.OW;
    float s = 0.0f;
    for_each_tap_output(ih, g.kH, g.sh, g.ph, g.dh, g.OH, [&](int64_t oh) {
      for_each_tap_output(iw, g.kW, g.sw, g.pw, g.dw, g.OW, [&](int64_t ow) {
        const int64_t j = base + oh * g.OW + ow;
        if (ind[j] == flat) s += static_cast<float>(gy[j]);
      });
    });
    gx[i] = static_cast<T>(s);
  }
}

// ---- avg ----

// The divisor of an output from its two windows; 0 when the window holds no input element.
__device__ __forceinline__ int64_t avg_divisor(const math::AvgWindow& h, const math::AvgWindow& w,
                                               bool count_include_pad) {
  if (h.start >= h.end || w.start >= w.end) return 0;
  return count_include_pad ? h.padded * w.padded : (h.end - h.start) * (w.end - w.start);
}

template <typename T>
__global__ void avg_pool_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t total, Pool2dGeometry g) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t ow = i % g.OW, t = i / g.OW, oh = t % g.OH, p = t / g.OH;
    const math::AvgWindow hw = math::avg_pool_window(oh, g.H, g.kH, g.ph, g.sh);
    const math::AvgWindow ww = math::avg_pool_window(ow, g.W, g.kW, g.pw, g.sw);
    const T* xp = x + p * g.H * g.W;
    float s = 0.0f;
    for (int64_t ih = hw.start; ih < hw.end; ++ih)
      for (int64_t iw = ww.start; iw < ww.end; ++iw) s += static_cast<float>(xp[ih * g.W + iw]);
    const int64_t d = avg_divisor(hw, ww, g.count_include_pad);
    y[i] = static_cast<T>(d > 0 ? s / static_cast<float>(d) : 0.0f);
  }
}

// The outputs along one dim whose (unclipped) average window [o * stride - pad, + kernel) holds
// input position i, as [lo, hi] (empty when lo > hi). The right cut at in + pad never excludes an
// input position.
__device__ __forceinline__ void avg_outputs_of(int64_t i, int64_t kernel, int64_t pad, int64_t stride, int64_t out,
                                               int64_t& lo, int64_t& hi) {
  const int64_t first = i + pad - kernel + 1;  // the smallest window start that reaches i
  lo = first <= 0 ? 0 : (first + stride - 1) / stride;
  hi = (i + pad) / stride;
  if (hi > out - 1) hi = out - 1;
}

template <typename T>
__global__ void avg_pool_backward_kernel(const T* __restrict__ gy, T* __restrict__ gx, int64_t total, Pool2dGeometry g) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t iw = i % g.W, t = i / g.W, ih = t % g.H, p = t / g.H;
    int64_t oh0, oh1, ow0, ow1;
    avg_outputs_of(ih, g.kH, g.ph, g.sh, g.OH, oh0, oh1);
    avg_outputs_of(iw, g.kW, g.pw, g.sw, g.OW, ow0, ow1);
    const T* gyp = gy + p * g.OH * g.OW;
    float s = 0.0f;
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      const math::AvgWindow hw = math::avg_pool_window(oh, g.H, g.kH, g.ph, g.sh);
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const math::AvgWindow ww = math::avg_pool_window(ow, g.W, g.kW, g.pw, g.sw);
        const int64_t d = avg_divisor(hw, ww, g.count_include_pad);
        if (d > 0) s += static_cast<float>(gyp[oh * g.OW + ow]) / static_cast<float>(d);
      }
    }
    gx[i] = static_cast<T>(s);
  }
}

// ---- adaptive avg ----

// A warp per output: the lanes walk the window (row-major, so whole rows are coalesced), then a
// shuffle tree adds the 32 partial sums. Every lane of a warp has the same output, so the loops
// and the shuffles are uniform across the warp.
template <typename T>
__global__ void adaptive_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t total, int64_t H,
                                        int64_t W, int64_t OH, int64_t OW) {
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int64_t o = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; o < total; o += warps) {
    const int64_t ow = o % OW, t = o / OW, oh = t % OH, p = t / OH;
    const int64_t hs = math::adaptive_start(oh, H, OH), he = math::adaptive_end(oh, H, OH);
    const int64_t ws = math::adaptive_start(ow, W, OW), we = math::adaptive_end(ow, W, OW);
    const int64_t wn = we - ws, n = (he - hs) * wn;
    const T* xp = x + p * H * W;
    float s = 0.0f;
    for (int64_t k = lane; k < n; k += 32) s += static_cast<float>(xp[(hs + k / wn) * W + ws + k % wn]);
    s = warp_sum(s);
    if (lane == 0) y[o] = static_cast<T>(s / static_cast<float>(n));
  }
}

// Output o of `out` covers [floor(o in / out), ceil((o + 1) in / out)); the outputs holding input
// position i are floor(i out / in) .. floor(((i + 1) out - 1) / in).
template <typename T>
__global__ void adaptive_backward_kernel(const T* __restrict__ gy, T* __restrict__ gx, int64_t total, int64_t H,
                                         int64_t W, int64_t OH, int64_t OW) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t iw = i % W, t = i / W, ih = t % H, p = t / H;
    const int64_t oh0 = ih * OH / H, oh1 = ((ih + 1) * OH - 1) / H;
    const int64_t ow0 = iw * OW / W, ow1 = ((iw + 1) * OW - 1) / W;
    const T* gyp = gy + p * OH * OW;
    float s = 0.0f;
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      const int64_t rows = math::adaptive_end(oh, H, OH) - math::adaptive_start(oh, H, OH);
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const int64_t cols = math::adaptive_end(ow, W, OW) - math::adaptive_start(ow, W, OW);
        s += static_cast<float>(gyp[oh * OW + ow]) / static_cast<float>(rows * cols);
      }
    }
    gx[i] = static_cast<T>(s);
  }
}

}  // namespace

// The host side: not compiled by the CPU emulator (tests/simt/simt.h), whose tests launch the
// kernels above themselves.
#if !defined(TRIDENT_SIMT)
namespace {

void check_dtype(const char* op, DType dt) {
  TRIDENT_CHECK(dt == DType::F32 || dt == DType::F16 || dt == DType::BF16, op, " (CUDA): no kernel for dtype ", dt,
                " (supported: f32, f16, bf16)");
}

Shape with_plane(Shape s, int64_t h, int64_t w) {
  s[s.size() - 2] = h;
  s.back() = w;
  return s;
}

template <typename T>
const T* cptr(const Tensor& t) {
  return static_cast<const T*>(t.data_ptr());
}
template <typename T>
T* mptr(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

}  // namespace

std::pair<Tensor, Tensor> max_pool2d_forward(const Tensor& input, const Pool2dGeometry& g) {
  check_dtype("max_pool2d", input.dtype());
  const Tensor x = input.detach().contiguous();
  const Device dev = x.device();
  const Shape out_shape = with_plane(x.sizes(), g.OH, g.OW);
  Tensor y = empty_on(out_shape, x.dtype(), dev), ind = empty_on(out_shape, DType::I64, dev);
  const int64_t total = y.numel();
  if (total == 0) return {y, ind};
  DeviceGuard guard(dev.index);
  const cudaStream_t stream = current_stream(dev.index).handle();
  TRIDENT_DISPATCH_CUDA_FLOATING(x.dtype(), "max_pool2d", [&] {
    max_pool_forward_kernel<scalar_t><<<grid_size(total), kThreads, 0, stream>>>(cptr<scalar_t>(x), mptr<scalar_t>(y),
                                                                                 mptr<int64_t>(ind), total, g);
  });
  TRIDENT_CUDA_KERNEL_CHECK();
  return {y, ind};
}

Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Shape& input_sizes,
                           const Pool2dGeometry& g) {
  check_dtype("max_pool2d_backward", grad_out.dtype());
  const Tensor gy = grad_out.detach().contiguous(), ind = indices.detach().to(DType::I64).contiguous();
  const Device dev = gy.device();
  Tensor gx = empty_on(input_sizes, gy.dtype(), dev);
  const int64_t total = gx.numel();
  if (total == 0) return gx;
  if (gy.numel() == 0) return zeros(input_sizes, TensorOptions(gy.dtype()).device(dev));
  DeviceGuard guard(dev.index);
  const cudaStream_t stream = current_stream(dev.index).handle();
  TRIDENT_DISPATCH_CUDA_FLOATING(gy.dtype(), "max_pool2d_backward", [&] {
    max_pool_backward_kernel<scalar_t><<<grid_size(total), kThreads, 0, stream>>>(
        cptr<scalar_t>(gy), cptr<int64_t>(ind), mptr<scalar_t>(gx), total, g);
  });
  TRIDENT_CUDA_KERNEL_CHECK();
  return gx;
}

Tensor avg_pool2d_forward(const Tensor& input, const Pool2dGeometry& g) {
  check_dtype("avg_pool2d", input.dtype());
  const Tensor x = input.detach().contiguous();
  const Device dev = x.device();
  Tensor y = empty_on(with_plane(x.sizes(), g.OH, g.OW), x.dtype(), dev);
  const int64_t total = y.numel();
  if (total == 0) return y;
  DeviceGuard guard(dev.index);
  const cudaStream_t stream = current_stream(dev.index).handle();
  TRIDENT_DISPATCH_CUDA_FLOATING(x.dtype(), "avg_pool2d", [&] {
    avg_pool_forward_kernel<scalar_t><<<grid_size(total), kThreads, 0, stream>>>(cptr<scalar_t>(x), mptr<scalar_t>(y),
                                                                                 total, g);
  });
  TRIDENT_CUDA_KERNEL_CHECK();
  return y;
}

Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& input_sizes, const Pool2dGeometry& g) {
  check_dtype("avg_pool2d_backward", grad_out.dtype());
  const Tensor gy = grad_out.detach().contiguous();
  const Device dev = gy.device();
  Tensor gx = empty_on(input_sizes, gy.dtype(), dev);
  const int64_t total = gx.numel();
  if (total == 0) return gx;
  if (gy.numel() == 0) return zeros(input_sizes, TensorOptions(gy.dtype()).device(dev));
  DeviceGuard guard(dev.index);
  const cudaStream_t stream = current_stream(dev.index).handle();
  TRIDENT_DISPATCH_CUDA_FLOATING(gy.dtype(), "avg_pool2d_backward", [&] {
    avg_pool_backward_kernel<scalar_t><<<grid_size(total), kThreads, 0, stream>>>(cptr<scalar_t>(gy),
                                                                                  mptr<scalar_t>(gx), total, g);
  });
  TRIDENT_CUDA_KERNEL_CHECK();
  return gx;
}

Tensor adaptive_avg_pool2d_forward(const Tensor& input, int64_t OH, int64_t OW) {
  check_dtype("adaptive_avg_pool2d", input.dtype());
  const Tensor x = input.detach().contiguous();
  const Device dev = x.device();
  const int64_t H = x.size(-2), W = x.size(-1);
  Tensor y = empty_on(with_plane(x.sizes(), OH, OW), x.dtype(), dev);
  const int64_t total = y.numel();
  if (total == 0) return y;
  DeviceGuard guard(dev.index);
  const cudaStream_t stream = current_stream(dev.index).handle();
  TRIDENT_DISPATCH_CUDA_FLOATING(x.dtype(), "adaptive_avg_pool2d", [&] {
    adaptive_forward_kernel<scalar_t><<<grid_size(total * 32), kThreads, 0, stream>>>(
        cptr<scalar_t>(x), mptr<scalar_t>(y), total, H, W, OH, OW);
  });
  TRIDENT_CUDA_KERNEL_CHECK();
  return y;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Shape& input_sizes) {
  check_dtype("adaptive_avg_pool2d_backward", grad_out.dtype());
  const Tensor gy = grad_out.detach().contiguous();
  const Device dev = gy.device();
  const int64_t H = input_sizes[input_sizes.size() - 2], W = input_sizes.back();
  const int64_t OH = gy.size(-2), OW = gy.size(-1);
  Tensor gx = empty_on(input_sizes, gy.dtype(), dev);
  const int64_t total = gx.numel();
  if (total == 0) return gx;
  // No outputs (output_size 0 along a dim): no gradient reaches the input.
  if (OH == 0 || OW == 0) return zeros(input_sizes, TensorOptions(gy.dtype()).device(dev));
  DeviceGuard guard(dev.index);
  const cudaStream_t stream = current_stream(dev.index).handle();
  TRIDENT_DISPATCH_CUDA_FLOATING(gy.dtype(), "adaptive_avg_pool2d_backward", [&] {
    adaptive_backward_kernel<scalar_t><<<grid_size(total), kThreads, 0, stream>>>(
        cptr<scalar_t>(gy), mptr<scalar_t>(gx), total, H, W, OH, OW);
  });
  TRIDENT_CUDA_KERNEL_CHECK();
  return gx;
}

#endif  // !TRIDENT_SIMT

}  // namespace trident::cuda
