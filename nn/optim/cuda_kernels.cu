#include "nn/optim/cuda_kernels.h"

#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/loops.cuh"
#include "core/cuda/stream.h"
#include "core/dtype.h"
#include "core/factory.h"

namespace trident::nn::optim::cuda {

using trident::cuda::current_stream;
using trident::cuda::DeviceGuard;
using trident::cuda::grid_size;

namespace {

constexpr int kThreads = 256;
constexpr int64_t kNormBlock = int64_t{1} << 13;  // LAMB: elements per partial sum, as on the CPU

template <typename T>
T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

#define TRIDENT_OPTIM_LOOP(n) \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <typename T>
__global__ void __launch_bounds__(kThreads) sgd_kernel(int64_t n, T* __restrict__ p, const T* __restrict__ g,
                                                       T* __restrict__ buf, math::SGDUpdate<T> f) {
  TRIDENT_OPTIM_LOOP(n) {
    if (buf != nullptr) {
      f(p[i], g[i], buf[i]);
    } else {
      f(p[i], g[i]);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) adam_kernel(int64_t n, T* __restrict__ p, const T* __restrict__ g,
                                                        T* __restrict__ m, T* __restrict__ v, T* __restrict__ vmax,
                                                        math::AdamUpdate<T> f) {
  TRIDENT_OPTIM_LOOP(n) {
    if (vmax != nullptr) {
      f(p[i], g[i], m[i], v[i], vmax[i]);
    } else {
      f(p[i], g[i], m[i], v[i]);
    }
  }
}

template <typename T, bool kCentered, bool kMomentum>
__global__ void __launch_bounds__(kThreads) rmsprop_kernel(int64_t n, T* __restrict__ p, const T* __restrict__ g,
                                                           T* __restrict__ sq, T* __restrict__ ga, T* __restrict__ buf,
                                                           math::RMSPropUpdate<T> f) {
  TRIDENT_OPTIM_LOOP(n) {
    T unused = 0;  // stands in for the buffers this variant does not have
    f.template apply<kCentered, kMomentum>(p[i], g[i], sq[i], kCentered ? ga[i] : unused, kMomentum ? buf[i] : unused);
  }
}

// One block per kNormBlock elements: updates m and v, and writes the block's f64 sums of p^2 and
// r^2 (r the update direction) to psq[block], rsq[block].
template <typename T>
__global__ void __launch_bounds__(kThreads) lamb_moments_kernel(int64_t n, const T* __restrict__ p, const T* __restrict__ g,
                                                                T* __restrict__ m, T* __restrict__ v,
                                                                math::LambUpdate<T> f, double* __restrict__ psq,
                                                                double* __restrict__ rsq) {
  __shared__ double sp[kThreads / 32], sr[kThreads / 32];
  const int64_t b = static_cast<int64_t>(blockIdx.x) * kNormBlock;
  const int64_t e = b + kNormBlock < n ? b + kNormBlock : n;
  double ps = 0, rs = 0;
  for (int64_t i = b + threadIdx.x; i < e; i += kThreads) {
    const T x = p[i];
    const T r = f.moments(x, g[i], m[i], v[i]);
    ps += static_cast<double>(x) * static_cast<double>(x);
    rs += static_cast<double>(r) * static_cast<double>(r);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    ps += __shfl_xor_sync(0xffffffffu, ps, o);
    rs += __shfl_xor_sync(0xffffffffu, rs, o);
  }
  if (threadIdx.x % 32 == 0) {
    sp[threadIdx.x / 32] = ps;
    sr[threadIdx.x / 32] = rs;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double pt = 0, rt = 0;
    for (int w = 0; w < kThreads / 32; ++w) {
      pt += sp[w];
      rt += sr[w];
    }
    psq[blockIdx.x] = pt;
    rsq[blockIdx.x] = rt;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) lamb_apply_kernel(int64_t n, T* __restrict__ p, const T* __restrict__ m,
                                                              const T* __restrict__ v, math::LambUpdate<T> f, T scale) {
  TRIDENT_OPTIM_LOOP(n) { p[i] = p[i] - scale * f.direction(p[i], m[i], v[i]); }
}

#undef TRIDENT_OPTIM_LOOP

}  // namespace

void sgd(const Tensor& p, const Tensor& g, const Tensor& buf, const math::SGDUpdate<double>& fd) {
  const int64_t n = p.numel();
  if (n == 0) return;
  DeviceGuard dg(p.device().index);
  TRIDENT_DISPATCH_F32_F64(p.dtype(), "SGD (CUDA)", [&] {
    using T = scalar_t;
    sgd_kernel<T><<<grid_size(n), kThreads, 0, current_stream(p.device().index).handle()>>>(
        n, ptr<T>(p), ptr<T>(g), ptr<T>(buf), fd.template cast<T>());
  });
  TRIDENT_CUDA_KERNEL_CHECK();
}

void adam(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
          const math::AdamUpdate<double>& fd) {
  const int64_t n = p.numel();
  if (n == 0) return;
  DeviceGuard dg(p.device().index);
  TRIDENT_DISPATCH_F32_F64(p.dtype(), "Adam (CUDA)", [&] {
    using T = scalar_t;
    adam_kernel<T><<<grid_size(n), kThreads, 0, current_stream(p.device().index).handle()>>>(
        n, ptr<T>(p), ptr<T>(g), ptr<T>(m), ptr<T>(v), ptr<T>(vmax), fd.template cast<T>());
  });
  TRIDENT_CUDA_KERNEL_CHECK();
}

void rmsprop(const Tensor& p, const Tensor& g, const Tensor& square_avg, const Tensor& grad_avg, const Tensor& buf,
             const math::RMSPropUpdate<double>& fd) {
  const int64_t n = p.numel();
  if (n == 0) return;
  DeviceGuard dg(p.device().index);
  const cudaStream_t stream = current_stream(p.device().index).handle();
  TRIDENT_DISPATCH_F32_F64(p.dtype(), "RMSProp (CUDA)", [&] {
    using T = scalar_t;
    const math::RMSPropUpdate<T> f = fd.template cast<T>();
    T* pp = ptr<T>(p);
    const T* gp = ptr<T>(g);
    T* sp = ptr<T>(square_avg);
    T* ap = ptr<T>(grad_avg);
    T* bp = ptr<T>(buf);
    const int blocks = grid_size(n);
    if (ap && bp) {
      rmsprop_kernel<T, true, true><<<blocks, kThreads, 0, stream>>>(n, pp, gp, sp, ap, bp, f);
    } else if (ap) {
      rmsprop_kernel<T, true, false><<<blocks, kThreads, 0, stream>>>(n, pp, gp, sp, ap, bp, f);
    } else if (bp) {
      rmsprop_kernel<T, false, true><<<blocks, kThreads, 0, stream>>>(n, pp, gp, sp, ap, bp, f);
    } else {
      rmsprop_kernel<T, false, false><<<blocks, kThreads, 0, stream>>>(n, pp, gp, sp, ap, bp, f);
    }
  });
  TRIDENT_CUDA_KERNEL_CHECK();
}

cpu::LambNorms lamb_moments(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                            const math::LambUpdate<double>& fd) {
  const int64_t n = p.numel();
  if (n == 0) return {};
  const int64_t nblocks = (n + kNormBlock - 1) / kNormBlock;
  DeviceGuard dg(p.device().index);
  const Tensor sums = empty({2, nblocks}, TensorOptions(DType::F64).device(p.device()));
  auto* psq = static_cast<double*>(sums.data_ptr());
  TRIDENT_DISPATCH_F32_F64(p.dtype(), "LAMB (CUDA)", [&] {
    using T = scalar_t;
    lamb_moments_kernel<T><<<static_cast<unsigned>(nblocks), kThreads, 0, current_stream(p.device().index).handle()>>>(
        n, ptr<T>(p), ptr<T>(g), ptr<T>(m), ptr<T>(v), fd.template cast<T>(), psq, psq + nblocks);
  });
  TRIDENT_CUDA_KERNEL_CHECK();
  // The trust ratio is a host value in the CPU contract: one copy back (a synchronization).
  const std::vector<double> host = sums.to(Device::cpu()).to_vector<double>();
  double pt = 0, rt = 0;
  for (int64_t b = 0; b < nblocks; ++b) {
    pt += host[static_cast<size_t>(b)];
    rt += host[static_cast<size_t>(nblocks + b)];
  }
  return {std::sqrt(pt), std::sqrt(rt)};
}

void lamb_apply(const Tensor& p, const Tensor& m, const Tensor& v, const math::LambUpdate<double>& fd, double scale) {
  const int64_t n = p.numel();
  if (n == 0) return;
  DeviceGuard dg(p.device().index);
  TRIDENT_DISPATCH_F32_F64(p.dtype(), "LAMB (CUDA)", [&] {
    using T = scalar_t;
    lamb_apply_kernel<T><<<grid_size(n), kThreads, 0, current_stream(p.device().index).handle()>>>(
        n, ptr<T>(p), ptr<T>(m), ptr<T>(v), fd.template cast<T>(), static_cast<T>(scale));
  });
  TRIDENT_CUDA_KERNEL_CHECK();
}

}  // namespace trident::nn::optim::cuda
