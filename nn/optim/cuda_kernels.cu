#include "nn/optim/cuda_kernels.h"

#include <cmath>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/dtype.h"
#include "core/factory.h"
#include "nn/optim/multi_tensor.cuh"

namespace trident::nn::optim::cuda {

namespace {

constexpr int kThreads = kMultiTensorThreads;

// Every element of the block's chunk, one per thread per iteration (coalesced).
#define TRIDENT_MT_LOOP(r) for (int64_t i = (r).begin + threadIdx.x; i < (r).end; i += kThreads)

int64_t total_chunks(const TensorVec& l) {
  int64_t c = 0;
  for (const Tensor& t : l) c += mt_chunks(t.numel());
  return c;
}

// ---- optimizer updates ----

template <typename T, bool kMomentum>
struct SGDOp {
  math::SGDUpdate<T> f;
  template <int K>
  __device__ void operator()(const TensorListMeta<K>& m, const ChunkRange& r) const {
    T* __restrict__ p = list_ptr<T>(m, 0, r.local);
    const T* __restrict__ g = list_ptr<T>(m, 1, r.local);
    if constexpr (kMomentum) {
      T* __restrict__ buf = list_ptr<T>(m, 2, r.local);
      TRIDENT_MT_LOOP(r) f(p[i], g[i], buf[i]);
    } else {
      TRIDENT_MT_LOOP(r) f(p[i], g[i]);
    }
  }
};

template <typename T, bool kAmsgrad>
struct AdamOp {
  math::AdamUpdate<T> f;
  template <int K>
  __device__ void operator()(const TensorListMeta<K>& m, const ChunkRange& r) const {
    T* __restrict__ p = list_ptr<T>(m, 0, r.local);
    const T* __restrict__ g = list_ptr<T>(m, 1, r.local);
    T* __restrict__ ea = list_ptr<T>(m, 2, r.local);
    T* __restrict__ eas = list_ptr<T>(m, 3, r.local);
    if constexpr (kAmsgrad) {
      T* __restrict__ vmax = list_ptr<T>(m, 4, r.local);
      TRIDENT_MT_LOOP(r) f(p[i], g[i], ea[i], eas[i], vmax[i]);
    } else {
      TRIDENT_MT_LOOP(r) f(p[i], g[i], ea[i], eas[i]);
    }
  }
};

// Lists: p, g, square_avg, then grad_avg when centered, then buf with momentum.
template <typename T, bool kCentered, bool kMomentum>
struct RMSPropOp {
  math::RMSPropUpdate<T> f;
  template <int K>
  __device__ void operator()(const TensorListMeta<K>& m, const ChunkRange& r) const {
    T* __restrict__ p = list_ptr<T>(m, 0, r.local);
    const T* __restrict__ g = list_ptr<T>(m, 1, r.local);
    T* __restrict__ sq = list_ptr<T>(m, 2, r.local);
    T* ga = kCentered ? list_ptr<T>(m, 3, r.local) : nullptr;
    T* buf = kMomentum ? list_ptr<T>(m, kCentered ? 4 : 3, r.local) : nullptr;
    TRIDENT_MT_LOOP(r) {
      T unused = 0;  // stands in for the buffers this variant does not have
      f.template apply<kCentered, kMomentum>(p[i], g[i], sq[i], kCentered ? ga[i] : unused, kMomentum ? buf[i] : unused);
    }
  }
};

// LAMB's first pass (lists p, g, m, v): updates m and v, and writes the chunk's f64 sums of p^2
// to psq[global_chunk] and of r^2 (r the update direction) to rsq[global_chunk].
template <typename T>
struct LambMomentsOp {
  math::LambUpdate<T> f;
  double* psq;
  double* rsq;
  template <int K>
  __device__ void operator()(const TensorListMeta<K>& m, const ChunkRange& r) const {
    __shared__ double smem[kThreads / 32];
    const T* __restrict__ p = list_ptr<T>(m, 0, r.local);
    const T* __restrict__ g = list_ptr<T>(m, 1, r.local);
    T* __restrict__ ea = list_ptr<T>(m, 2, r.local);
    T* __restrict__ eas = list_ptr<T>(m, 3, r.local);
    double ps = 0, rs = 0;
    TRIDENT_MT_LOOP(r) {
      const T x = p[i];
      const T d = f.moments(x, g[i], ea[i], eas[i]);
      ps += static_cast<double>(x) * static_cast<double>(x);
      rs += static_cast<double>(d) * static_cast<double>(d);
    }
    ps = mt_block_sum(ps, smem);
    rs = mt_block_sum(rs, smem);
    if (threadIdx.x == 0) {
      psq[r.global_chunk] = ps;
      rsq[r.global_chunk] = rs;
    }
  }
};

// LAMB's second pass (lists p, m, v): the parameter's norms from its chunks' sums, the trust
// ratio, then p = p - T(lr * ratio) * r. Chunk 0 records the ratio in ratios[tensor].
template <typename T>
struct LambApplyOp {
  math::LambUpdate<T> f;
  double lr;
  const double* psq;
  const double* rsq;
  double* ratios;
  template <int K>
  __device__ void operator()(const TensorListMeta<K>& m, const ChunkRange& r) const {
    __shared__ double smem[kThreads / 32];
    const int64_t base = r.global_chunk - r.chunk, nchunks = mt_chunks(r.numel);
    double ps = 0, rs = 0;
    for (int64_t j = threadIdx.x; j < nchunks; j += kThreads) {
      ps += psq[base + j];
      rs += rsq[base + j];
    }
    // The same partials in the same order in every block of this parameter: the same bits.
    ps = mt_block_sum(ps, smem);
    rs = mt_block_sum(rs, smem);
    const double ratio = math::lamb_trust_ratio(sqrt(ps), sqrt(rs));
    if (r.chunk == 0 && threadIdx.x == 0) ratios[r.tensor] = ratio;
    const T scale = static_cast<T>(lr * ratio);
    T* __restrict__ p = list_ptr<T>(m, 0, r.local);
    const T* __restrict__ ea = list_ptr<T>(m, 1, r.local);
    const T* __restrict__ eas = list_ptr<T>(m, 2, r.local);
    TRIDENT_MT_LOOP(r) p[i] = p[i] - scale * f.direction(p[i], ea[i], eas[i]);
  }
};

// LAMB without layer adaptation (lists p, g, m, v): the moments and p = p - T(lr) * r in one
// pass; r is what the two-pass form recomputes from the stored m and v, so the bits agree.
template <typename T>
struct LambFusedOp {
  math::LambUpdate<T> f;
  T lr;
  template <int K>
  __device__ void operator()(const TensorListMeta<K>& m, const ChunkRange& r) const {
    T* __restrict__ p = list_ptr<T>(m, 0, r.local);
    const T* __restrict__ g = list_ptr<T>(m, 1, r.local);
    T* __restrict__ ea = list_ptr<T>(m, 2, r.local);
    T* __restrict__ eas = list_ptr<T>(m, 3, r.local);
    TRIDENT_MT_LOOP(r) {
      const T x = p[i];
      p[i] = x - lr * f.moments(x, g[i], ea[i], eas[i]);
    }
  }
};

// ---- gradient utilities ----

template <typename T>
struct UnscaleOp {
  T inv_scale;
  float* found_inf;
  template <int K>
  __device__ void operator()(const TensorListMeta<K>& m, const ChunkRange& r) const {
    T* __restrict__ g = list_ptr<T>(m, 0, r.local);
    bool bad = false;
    TRIDENT_MT_LOOP(r) {
      const T x = g[i] * inv_scale;
      g[i] = x;
      bad |= !isfinite(x);
    }
    // Every writer writes the same value: no atomic needed.
    if (bad) *found_inf = 1.0f;
  }
};

// Per chunk: the f64 sum of g^2 into partials[global_chunk]; chunk 0 also records where the
// tensor's chunks are and whether its norm rounds to f32: seg[3 * (tensor_offset + tensor)].
template <typename T>
struct SumSquaresOp {
  double* partials;  // already offset to this dtype's chunks
  int32_t chunk_offset;
  int32_t tensor_offset;
  int32_t* seg;
  template <int K>
  __device__ void operator()(const TensorListMeta<K>& m, const ChunkRange& r) const {
    __shared__ double smem[kThreads / 32];
    const T* __restrict__ g = list_ptr<T>(m, 0, r.local);
    double s = 0;
    TRIDENT_MT_LOOP(r) {
      const double x = static_cast<double>(g[i]);
      s += x * x;
    }
    s = mt_block_sum(s, smem);
    if (threadIdx.x == 0) {
      partials[r.global_chunk] = s;
      if (r.chunk == 0) {
        int32_t* e = seg + 3 * (tensor_offset + r.tensor);
        e[0] = static_cast<int32_t>(chunk_offset + r.global_chunk);
        e[1] = static_cast<int32_t>(mt_chunks(r.numel));
        e[2] = sizeof(T) == 4;
      }
    }
  }
};

// One block: each warp takes tensors w, w + warps, ...: its norm (rounded to its dtype) squared
// into tensor_sq; then the block sums those; out = {total, max_norm / (total + 1e-6)}.
__global__ void __launch_bounds__(kThreads) norm_finish_kernel(int32_t n, const double* __restrict__ partials,
                                                               const int32_t* __restrict__ seg, double* tensor_sq,
                                                               double max_norm, double* out) {
  __shared__ double smem[kThreads / 32];
  constexpr int kWarps = kThreads / 32;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  for (int32_t t = warp; t < n; t += kWarps) {
    const int32_t base = seg[3 * t], count = seg[3 * t + 1];
    double s = 0;
    for (int32_t j = lane; j < count; j += 32) s += partials[base + j];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) {
      double nrm = sqrt(s);
      if (seg[3 * t + 2]) nrm = static_cast<double>(static_cast<float>(nrm));
      tensor_sq[t] = nrm * nrm;
    }
  }
  __syncthreads();  // tensor_sq is global memory written by this block: visible after the barrier
  double s = 0;
  for (int32_t t = static_cast<int32_t>(threadIdx.x); t < n; t += kThreads) s += tensor_sq[t];
  s = mt_block_sum(s, smem);
  if (threadIdx.x == 0) {
    const double total = sqrt(s);
    out[0] = total;
    out[1] = max_norm / (total + 1e-6);
  }
}

template <typename T>
struct ClipScaleOp {
  const double* norm_and_coef;
  template <int K>
  __device__ void operator()(const TensorListMeta<K>& m, const ChunkRange& r) const {
    const double coef = norm_and_coef[1];
    // As on the CPU: multiplying by a coefficient >= 1 would change nothing (min(1, coef)).
    if (!(coef < 1.0 || isnan(coef))) return;
    const T c = static_cast<T>(coef);
    T* __restrict__ g = list_ptr<T>(m, 0, r.local);
    TRIDENT_MT_LOOP(r) g[i] = g[i] * c;
  }
};

#undef TRIDENT_MT_LOOP

}  // namespace

// The host side: not compiled by the CPU emulator (tests/simt/simt.h), whose tests launch the
// ops above themselves.
#if !defined(TRIDENT_SIMT)
using trident::cuda::current_stream;
using trident::cuda::DeviceGuard;

namespace {

// The device, dtype and stream of a call; checks that every tensor of every list agrees.
struct Target {
  int device = 0;
  DType dtype = DType::F32;
  cudaStream_t stream = nullptr;
};
Target target_of(const char* name, std::initializer_list<const TensorVec*> lists) {
  const TensorVec& first = **lists.begin();
  TRIDENT_ASSERT(!first.empty(), name, ": empty tensor list");
  const Tensor& t0 = first[0];
  TRIDENT_CHECK(t0.device().is_cuda(), name, ": tensors on ", t0.device(), ", expected a CUDA device");
  for (const TensorVec* l : lists) {
    if (l->empty()) continue;  // an unused buffer list
    TRIDENT_ASSERT(l->size() == first.size(), name, ": lists of ", l->size(), " and ", first.size(), " tensors");
    for (size_t i = 0; i < l->size(); ++i) {
      const Tensor& t = (*l)[i];
      TRIDENT_CHECK(t.device() == t0.device() && t.dtype() == t0.dtype() && t.is_contiguous() &&
                        t.numel() == first[i].numel(),
                    name, ": tensor ", i, " (", t.dtype(), " on ", t.device(), ", shape ", t.sizes(),
                    ") does not match tensor 0 (", t0.dtype(), " on ", t0.device(), ") or its parameter's ",
                    first[i].numel(), " contiguous elements");
    }
  }
  return {t0.device().index, t0.dtype(), current_stream(t0.device().index).handle()};
}

}  // namespace

void sgd(const TensorVec& p, const TensorVec& g, const TensorVec& buf, const math::SGDUpdate<double>& fd) {
  const Target tg = target_of("SGD (CUDA)", {&p, &g, &buf});
  DeviceGuard dg(tg.device);
  TRIDENT_DISPATCH_F32_F64(tg.dtype, "SGD (CUDA)", [&] {
    using T = scalar_t;
    if (buf.empty()) {
      multi_tensor_apply<2>({&p, &g}, tg.stream, SGDOp<T, false>{fd.template cast<T>()});
    } else {
      multi_tensor_apply<3>({&p, &g, &buf}, tg.stream, SGDOp<T, true>{fd.template cast<T>()});
    }
  });
}

void adam(const TensorVec& p, const TensorVec& g, const TensorVec& m, const TensorVec& v, const TensorVec& vmax,
          const math::AdamUpdate<double>& fd) {
  const Target tg = target_of("Adam (CUDA)", {&p, &g, &m, &v, &vmax});
  DeviceGuard dg(tg.device);
  TRIDENT_DISPATCH_F32_F64(tg.dtype, "Adam (CUDA)", [&] {
    using T = scalar_t;
    if (vmax.empty()) {
      multi_tensor_apply<4>({&p, &g, &m, &v}, tg.stream, AdamOp<T, false>{fd.template cast<T>()});
    } else {
      multi_tensor_apply<5>({&p, &g, &m, &v, &vmax}, tg.stream, AdamOp<T, true>{fd.template cast<T>()});
    }
  });
}

void rmsprop(const TensorVec& p, const TensorVec& g, const TensorVec& square_avg, const TensorVec& grad_avg,
             const TensorVec& buf, const math::RMSPropUpdate<double>& fd) {
  const Target tg = target_of("RMSProp (CUDA)", {&p, &g, &square_avg, &grad_avg, &buf});
  DeviceGuard dg(tg.device);
  TRIDENT_DISPATCH_F32_F64(tg.dtype, "RMSProp (CUDA)", [&] {
    using T = scalar_t;
    const math::RMSPropUpdate<T> f = fd.template cast<T>();
    const bool centered = !grad_avg.empty(), momentum = !buf.empty();
    if (centered && momentum) {
      multi_tensor_apply<5>({&p, &g, &square_avg, &grad_avg, &buf}, tg.stream, RMSPropOp<T, true, true>{f});
    } else if (centered) {
      multi_tensor_apply<4>({&p, &g, &square_avg, &grad_avg}, tg.stream, RMSPropOp<T, true, false>{f});
    } else if (momentum) {
      multi_tensor_apply<4>({&p, &g, &square_avg, &buf}, tg.stream, RMSPropOp<T, false, true>{f});
    } else {
      multi_tensor_apply<3>({&p, &g, &square_avg}, tg.stream, RMSPropOp<T, false, false>{f});
    }
  });
}

void lamb(const TensorVec& p, const TensorVec& g, const TensorVec& m, const TensorVec& v,
          const math::LambUpdate<double>& fd, double lr, bool layer_adaptation, const Tensor& ratios) {
  const Target tg = target_of("LAMB (CUDA)", {&p, &g, &m, &v});
  DeviceGuard dg(tg.device);
  TRIDENT_DISPATCH_F32_F64(tg.dtype, "LAMB (CUDA)", [&] {
    using T = scalar_t;
    const math::LambUpdate<T> f = fd.template cast<T>();
    if (!layer_adaptation) {
      multi_tensor_apply<4>({&p, &g, &m, &v}, tg.stream, LambFusedOp<T>{f, static_cast<T>(lr)});
      return;
    }
    TRIDENT_CHECK(ratios.defined() && ratios.device() == p[0].device() && ratios.dtype() == DType::F64 &&
                      ratios.is_contiguous() && ratios.numel() == static_cast<int64_t>(p.size()),
                  "LAMB (CUDA): the trust-ratio buffer must be a contiguous f64 tensor of ", p.size(),
                  " elements on ", p[0].device());
    const int64_t chunks = total_chunks(p);
    if (chunks == 0) return;
    const Tensor sums = empty({2, chunks}, TensorOptions(DType::F64).device(p[0].device()));
    double* psq = static_cast<double*>(sums.data_ptr());
    multi_tensor_apply<4>({&p, &g, &m, &v}, tg.stream, LambMomentsOp<T>{f, psq, psq + chunks});
    multi_tensor_apply<3>({&p, &m, &v}, tg.stream,
                          LambApplyOp<T>{f, lr, psq, psq + chunks, static_cast<double*>(ratios.data_ptr())});
  });
}

void unscale(const TensorVec& grads, double inv_scale, const Tensor& found_inf) {
  const Target tg = target_of("GradScaler::unscale_ (CUDA)", {&grads});
  TRIDENT_ASSERT(found_inf.device() == grads[0].device() && found_inf.dtype() == DType::F32,
                 "unscale: found_inf must be an f32 scalar on the gradients' device");
  DeviceGuard dg(tg.device);
  TRIDENT_DISPATCH_F32_F64(tg.dtype, "GradScaler::unscale_ (CUDA)", [&] {
    using T = scalar_t;
    multi_tensor_apply<1>({&grads}, tg.stream,
                          UnscaleOp<T>{static_cast<T>(inv_scale), static_cast<float*>(found_inf.data_ptr())});
  });
}

Tensor grad_norm_and_clip_coef(const TensorVec& grads, double max_norm) {
  TRIDENT_ASSERT(!grads.empty(), "grad_norm_and_clip_coef: no gradients");
  const Device dev = grads[0].device();
  // One list per dtype; a tensor's place in tensor_sq is its place in the two lists joined.
  TensorVec by_dtype[2];
  for (const Tensor& t : grads) {
    TRIDENT_CHECK(t.device() == dev && (t.dtype() == DType::F32 || t.dtype() == DType::F64) && t.is_contiguous() &&
                      t.numel() > 0,
                  "clip_grad_norm_ (CUDA): gradient (", t.dtype(), " on ", t.device(), ", shape ", t.sizes(),
                  ") must be a non-empty contiguous f32 or f64 tensor on ", dev);
    by_dtype[t.dtype() == DType::F64].push_back(t);
  }
  const int64_t n = static_cast<int64_t>(grads.size());
  TRIDENT_CHECK(n < (int64_t{1} << 30), "clip_grad_norm_ (CUDA): ", n, " gradients");
  const int64_t chunks = total_chunks(grads);
  TRIDENT_CHECK(chunks < (int64_t{1} << 31), "clip_grad_norm_ (CUDA): ", chunks, " chunks");
  DeviceGuard dg(dev.index);
  const cudaStream_t stream = current_stream(dev.index).handle();
  const TensorOptions f64 = TensorOptions(DType::F64).device(dev);
  const Tensor partials = empty({chunks}, f64);
  const Tensor tensor_sq = empty({n}, f64);
  const Tensor seg = empty({3 * n}, TensorOptions(DType::I32).device(dev));
  const Tensor out = empty({2}, f64);
  int32_t chunk_offset = 0, tensor_offset = 0;
  for (int k = 0; k < 2; ++k) {
    const TensorVec& list = by_dtype[k];
    if (list.empty()) continue;
    TRIDENT_DISPATCH_F32_F64(list[0].dtype(), "clip_grad_norm_ (CUDA)", [&] {
      using T = scalar_t;
      multi_tensor_apply<1>({&list}, stream,
                            SumSquaresOp<T>{static_cast<double*>(partials.data_ptr()) + chunk_offset, chunk_offset,
                                            tensor_offset, static_cast<int32_t*>(seg.data_ptr())});
    });
    chunk_offset += static_cast<int32_t>(total_chunks(list));
    tensor_offset += static_cast<int32_t>(list.size());
  }
  norm_finish_kernel<<<1, kThreads, 0, stream>>>(
      static_cast<int32_t>(n), static_cast<const double*>(partials.data_ptr()), static_cast<const int32_t*>(seg.data_ptr()),
      static_cast<double*>(tensor_sq.data_ptr()), max_norm, static_cast<double*>(out.data_ptr()));
  TRIDENT_CUDA_KERNEL_CHECK();
  return out;
}

void scale_by_clip_coef(const TensorVec& grads, const Tensor& norm_and_coef) {
  const Device dev = grads.at(0).device();
  TRIDENT_ASSERT(norm_and_coef.device() == dev && norm_and_coef.dtype() == DType::F64 && norm_and_coef.numel() == 2,
                 "scale_by_clip_coef: expected the result of grad_norm_and_clip_coef");
  TensorVec by_dtype[2];
  for (const Tensor& t : grads) by_dtype[t.dtype() == DType::F64].push_back(t);
  DeviceGuard dg(dev.index);
  const cudaStream_t stream = current_stream(dev.index).handle();
  for (const TensorVec& list : by_dtype) {
    if (list.empty()) continue;
    TRIDENT_DISPATCH_F32_F64(list[0].dtype(), "clip_grad_norm_ (CUDA)", [&] {
      multi_tensor_apply<1>({&list}, stream,
                            ClipScaleOp<scalar_t>{static_cast<const double*>(norm_and_coef.data_ptr())});
    });
  }
}

#endif  // !TRIDENT_SIMT

}  // namespace trident::nn::optim::cuda
