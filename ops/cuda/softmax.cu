#include "ops/cuda/softmax.h"

#include <algorithm>

#include "ops/cuda/common.cuh"
#include "ops/shape.h"

namespace trident::cuda {

namespace {

constexpr int kBlock = 256;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float u = __shfl_xor_sync(0xffffffffu, v, o);
    v = (u > v || u != u) ? u : v;
  }
  return v;
}

// Sum or max over the threads of a row: a warp (tpr 32) or the whole block (tpr 256).
__device__ float row_sum(float v, int tpr, float* smem) {
  v = warp_sum(v);
  if (tpr == 32) return v;
  __syncthreads();
  if (threadIdx.x % 32 == 0) smem[threadIdx.x / 32] = v;
  __syncthreads();
  return warp_sum(smem[threadIdx.x % 32 < kBlock / 32 ? threadIdx.x % 32 : 0] * (threadIdx.x % 32 < kBlock / 32 ? 1.f : 0.f));
}
__device__ float row_max(float v, int tpr, float* smem) {
  v = warp_max(v);
  if (tpr == 32) return v;
  __syncthreads();
  if (threadIdx.x % 32 == 0) smem[threadIdx.x / 32] = v;
  __syncthreads();
  return warp_max(smem[threadIdx.x % 32 < kBlock / 32 ? threadIdx.x % 32 : 0]);
}

// y = softmax(x) or log_softmax(x) over rows of n; three passes over the row (max, sum, write),
// the row stays in L1/L2 between them.
template <typename T>
__global__ void __launch_bounds__(kBlock) softmax_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t n,
                                                         int tpr, bool log) {
  __shared__ float smem[kBlock / 32];
  const int per_block = kBlock / tpr;
  const int t = threadIdx.x % tpr;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * per_block; base < rows; base += static_cast<int64_t>(gridDim.x) * per_block) {
    const int64_t row = base + threadIdx.x / tpr;
    const bool active = row < rows;
    const T* xr = x + (active ? row : 0) * n;
    float m = -INFINITY;
    if (active)
      for (int64_t j = t; j < n; j += tpr) {
        const float v = static_cast<float>(xr[j]);
        m = (v > m || v != v) ? v : m;
      }
    m = row_max(m, tpr, smem);
    float s = 0.0f;
    if (active)
      for (int64_t j = t; j < n; j += tpr) s += expf(static_cast<float>(xr[j]) - m);
    s = row_sum(s, tpr, smem);
    if (!active) continue;
    T* yr = y + row * n;
    if (log) {
      const float lse = m + logf(s);
      for (int64_t j = t; j < n; j += tpr) yr[j] = static_cast<T>(static_cast<float>(xr[j]) - lse);
    } else {
      const float inv = 1.0f / s;
      for (int64_t j = t; j < n; j += tpr) yr[j] = static_cast<T>(expf(static_cast<float>(xr[j]) - m) * inv);
    }
  }
}

// softmax: gx = y * (g - sum(g * y)); log_softmax: gx = g - exp(y) * sum(g).
template <typename T>
__global__ void __launch_bounds__(kBlock) softmax_backward_kernel(const T* __restrict__ g, const T* __restrict__ y,
                                                                  T* __restrict__ gx, int64_t rows, int64_t n, int tpr,
                                                                  bool log) {
  __shared__ float smem[kBlock / 32];
  const int per_block = kBlock / tpr;
  const int t = threadIdx.x % tpr;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * per_block; base < rows; base += static_cast<int64_t>(gridDim.x) * per_block) {
    const int64_t row = base + threadIdx.x / tpr;
    const bool active = row < rows;
    const int64_t o = (active ? row : 0) * n;
    float s = 0.0f;
    if (active)
      for (int64_t j = t; j < n; j += tpr)
        s += log ? static_cast<float>(g[o + j]) : static_cast<float>(g[o + j]) * static_cast<float>(y[o + j]);
    s = row_sum(s, tpr, smem);
    if (!active) continue;
    for (int64_t j = t; j < n; j += tpr) {
      const float gv = static_cast<float>(g[o + j]), yv = static_cast<float>(y[o + j]);
      gx[o + j] = static_cast<T>(log ? gv - expf(yv) * s : yv * (gv - s));
    }
  }
}

// NOTE [Register softmax]: rows of up to 32 * E (a warp per row) or 256 * E (a block per row)
// elements, E <= 32, are read once into registers, reduced there and written once: one trip to
// memory each way, where the general kernels above read the row two or three times. Thread t holds
// elements t, t + tpr, t + 2 tpr, ... (coalesced across the warp). E is a template parameter in
// four buckets so that the arrays stay in registers. When the row length is a multiple of the pack
// (16 bytes) and rows start aligned, each thread loads and stores whole packs: thread t holds packs
// t, t + tpr, ... instead.
// Elements per load when rows are packed: 16 bytes, or E when that is fewer.
template <typename T, int E>
constexpr int pack_width() {
  return static_cast<int>(16 / sizeof(T)) < E ? static_cast<int>(16 / sizeof(T)) : E;
}

// A thread's share of a row in registers (NOTE [Register softmax]): element i * tpr + t, or with
// packs the P elements of pack i * tpr + t; positions past the row (or of an inactive row) read
// `pad`.
template <typename T, int E, int P>
__device__ __forceinline__ void load_row(const T* row, int n, int t, int tpr, bool active, bool packed, float pad,
                                         float (&v)[E]) {
  if (packed) {
#pragma unroll
    for (int i = 0; i < E / P; ++i) {
      const int q = t + i * tpr;  // pack index
      const bool in = active && q * P < n;
      Pack<T, P> pk{};
      if (in) pk = reinterpret_cast<const Pack<T, P>*>(row)[q];
#pragma unroll
      for (int u = 0; u < P; ++u) v[i * P + u] = in ? static_cast<float>(pk.v[u]) : pad;
    }
  } else {
#pragma unroll
    for (int i = 0; i < E; ++i) {
      const int j = t + i * tpr;
      v[i] = active && j < n ? static_cast<float>(row[j]) : pad;
    }
  }
}

template <typename T, int E, int P>
__device__ __forceinline__ void store_row(T* row, int n, int t, int tpr, bool packed, const float (&v)[E]) {
  if (packed) {
#pragma unroll
    for (int i = 0; i < E / P; ++i) {
      const int q = t + i * tpr;
      if (q * P >= n) continue;
      Pack<T, P> pk;
#pragma unroll
      for (int u = 0; u < P; ++u) pk.v[u] = static_cast<T>(v[i * P + u]);
      reinterpret_cast<Pack<T, P>*>(row)[q] = pk;
    }
  } else {
#pragma unroll
    for (int i = 0; i < E; ++i) {
      const int j = t + i * tpr;
      if (j < n) row[j] = static_cast<T>(v[i]);
    }
  }
}

template <typename T, int E>
__global__ void __launch_bounds__(kBlock) softmax_regs_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows,
                                                              int n, int tpr, bool log, bool packed) {
  constexpr int P = pack_width<T, E>();
  __shared__ float smem[kBlock / 32];
  const int per_block = kBlock / tpr;
  const int t = threadIdx.x % tpr;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * per_block; base < rows; base += static_cast<int64_t>(gridDim.x) * per_block) {
    const int64_t row = base + threadIdx.x / tpr;
    const bool active = row < rows;
    const T* xr = x + (active ? row : 0) * n;
    float v[E];
    float m = -INFINITY;
    load_row<T, E, P>(xr, n, t, tpr, active, packed, -INFINITY, v);
#pragma unroll
    for (int i = 0; i < E; ++i) m = (v[i] > m || v[i] != v[i]) ? v[i] : m;
    m = row_max(m, tpr, smem);
    // v becomes x - m (log_softmax) or e^(x - m) (softmax); the padding's e^-inf is 0.
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < E; ++i) {
      const float d = v[i] - m;
      const float e = expf(d);
      v[i] = log ? d : e;
      s += e;
    }
    s = row_sum(s, tpr, smem);
    if (!active) continue;
    T* yr = y + row * n;
    const float inv = 1.0f / s, log_s = logf(s);
#pragma unroll
    for (int i = 0; i < E; ++i) v[i] = log ? v[i] - log_s : v[i] * inv;
    store_row<T, E, P>(yr, n, t, tpr, packed, v);
  }
}

template <typename T, int E>
__global__ void __launch_bounds__(kBlock) softmax_backward_regs_kernel(const T* __restrict__ g, const T* __restrict__ y,
                                                                       T* __restrict__ gx, int64_t rows, int n, int tpr,
                                                                       bool log, bool packed) {
  constexpr int P = pack_width<T, E>();
  __shared__ float smem[kBlock / 32];
  const int per_block = kBlock / tpr;
  const int t = threadIdx.x % tpr;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * per_block; base < rows; base += static_cast<int64_t>(gridDim.x) * per_block) {
    const int64_t row = base + threadIdx.x / tpr;
    const bool active = row < rows;
    const int64_t o = (active ? row : 0) * n;
    float gv[E], yv[E];
    load_row<T, E, P>(g + o, n, t, tpr, active, packed, 0.0f, gv);
    load_row<T, E, P>(y + o, n, t, tpr, active, packed, 0.0f, yv);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < E; ++i) s += log ? gv[i] : gv[i] * yv[i];
    s = row_sum(s, tpr, smem);
    if (!active) continue;
#pragma unroll
    for (int i = 0; i < E; ++i) gv[i] = log ? gv[i] - expf(yv[i]) * s : yv[i] * (gv[i] - s);
    store_row<T, E, P>(gx + o, n, t, tpr, packed, gv);
  }
}

// How a row of n is spread: threads per row and elements per thread (0: too long for registers).
struct RowPlan {
  int tpr, per_thread;
};
RowPlan plan_rows(int64_t n) {
  for (int tpr : {32, kBlock})
    for (int e : {4, 8, 16, 32})
      if (n <= static_cast<int64_t>(tpr) * e && (tpr == kBlock || n <= 1024)) return {tpr, e};
  return {n >= 1024 ? kBlock : 32, 0};
}

// Whether rows of n at p load as packs of the bucket's width (aligned starts, whole packs).
template <typename T>
bool can_pack(int e, int n, const void* p) {
  if (e <= 0) return false;  // no register bucket (the row is too long): nothing to pack
  const int w = std::min(e, static_cast<int>(16 / sizeof(T)));
  return n % w == 0 && reinterpret_cast<uintptr_t>(p) % (static_cast<size_t>(w) * sizeof(T)) == 0;
}

}  // namespace

// The host side: not compiled by the CPU emulator (tests/simt/simt.h), whose tests launch the
// kernels above themselves.
#if !defined(TRIDENT_SIMT)
namespace {

// Launches the register kernel of the plan's bucket; false when the row is too long for it.
template <typename T>
bool launch_regs(int e, int blocks, cudaStream_t st, const T* x, T* y, int64_t rows, int n, int tpr, bool log) {
  const bool packed = can_pack<T>(e, n, x) && can_pack<T>(e, n, y);
  switch (e) {
    case 4: softmax_regs_kernel<T, 4><<<blocks, kBlock, 0, st>>>(x, y, rows, n, tpr, log, packed); return true;
    case 8: softmax_regs_kernel<T, 8><<<blocks, kBlock, 0, st>>>(x, y, rows, n, tpr, log, packed); return true;
    case 16: softmax_regs_kernel<T, 16><<<blocks, kBlock, 0, st>>>(x, y, rows, n, tpr, log, packed); return true;
    case 32: softmax_regs_kernel<T, 32><<<blocks, kBlock, 0, st>>>(x, y, rows, n, tpr, log, packed); return true;
    default: return false;
  }
}
template <typename T>
bool launch_regs_backward(int e, int blocks, cudaStream_t st, const T* g, const T* y, T* gx, int64_t rows, int n,
                          int tpr, bool log) {
  const bool packed = can_pack<T>(e, n, g) && can_pack<T>(e, n, y) && can_pack<T>(e, n, gx);
  switch (e) {
    case 4: softmax_backward_regs_kernel<T, 4><<<blocks, kBlock, 0, st>>>(g, y, gx, rows, n, tpr, log, packed); return true;
    case 8: softmax_backward_regs_kernel<T, 8><<<blocks, kBlock, 0, st>>>(g, y, gx, rows, n, tpr, log, packed); return true;
    case 16: softmax_backward_regs_kernel<T, 16><<<blocks, kBlock, 0, st>>>(g, y, gx, rows, n, tpr, log, packed); return true;
    case 32: softmax_backward_regs_kernel<T, 32><<<blocks, kBlock, 0, st>>>(g, y, gx, rows, n, tpr, log, packed); return true;
    default: return false;
  }
}

// x with `dim` moved last, contiguous; returns the permutation used (empty when none was needed).
Tensor last_dim_rows(const Tensor& x, int64_t dim, std::vector<int64_t>& perm) {
  perm.clear();
  if (x.dim() == 0 || dim == x.dim() - 1) return x.detach().contiguous();
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != dim) perm.push_back(d);
  perm.push_back(dim);
  return permute(x.detach(), perm).contiguous();
}

Tensor restore(const Tensor& y, const std::vector<int64_t>& perm) {
  if (perm.empty()) return y;
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  return permute(y, inv).contiguous();
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim, bool log) {
  std::vector<int64_t> perm;
  const Tensor xr = last_dim_rows(x, dim, perm);
  const int64_t n = x.dim() == 0 ? 1 : x.size(dim);
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  Tensor y = empty_on(xr.sizes(), x.dtype(), x.device());
  if (rows > 0) {
    const RowPlan plan = plan_rows(n);
    const int tpr = plan.tpr;
    DeviceGuard dg(x.device().index);
    const int blocks = grid_size((rows + kBlock / tpr - 1) / (kBlock / tpr), 1);
    const cudaStream_t stream = current_stream(x.device().index).handle();
    TRIDENT_DISPATCH_CUDA_FLOATING(x.dtype(), "softmax", [&] {
      const auto* xp = static_cast<const scalar_t*>(xr.data_ptr());
      auto* yp = static_cast<scalar_t*>(y.data_ptr());
      if (!launch_regs(plan.per_thread, blocks, stream, xp, yp, rows, static_cast<int>(n), tpr, log)) softmax_kernel<scalar_t><<<blocks, kBlock, 0, stream>>>(xp, yp, rows, n, tpr, log);
    });
    TRIDENT_CUDA_KERNEL_CHECK();
  }
  return restore(y, perm);
}

Tensor softmax_backward(const Tensor& g, const Tensor& y, int64_t dim, bool log) {
  std::vector<int64_t> perm;
  const Tensor gr = last_dim_rows(g, dim, perm);
  const Tensor yr = last_dim_rows(y, dim, perm);
  const int64_t n = y.dim() == 0 ? 1 : y.size(dim);
  const int64_t rows = n == 0 ? 0 : y.numel() / n;
  Tensor gx = empty_on(yr.sizes(), y.dtype(), y.device());
  if (rows > 0) {
    const RowPlan plan = plan_rows(n);
    const int tpr = plan.tpr;
    DeviceGuard dg(y.device().index);
    const int blocks = grid_size((rows + kBlock / tpr - 1) / (kBlock / tpr), 1);
    const cudaStream_t stream = current_stream(y.device().index).handle();
    TRIDENT_DISPATCH_CUDA_FLOATING(y.dtype(), "softmax_backward", [&] {
      const auto* gp = static_cast<const scalar_t*>(gr.data_ptr());
      const auto* yp = static_cast<const scalar_t*>(yr.data_ptr());
      auto* gxp = static_cast<scalar_t*>(gx.data_ptr());
      if (!launch_regs_backward(plan.per_thread, blocks, stream, gp, yp, gxp, rows, static_cast<int>(n), tpr, log)) softmax_backward_kernel<scalar_t><<<blocks, kBlock, 0, stream>>>(gp, yp, gxp, rows, n, tpr, log);
    });
    TRIDENT_CUDA_KERNEL_CHECK();
  }
  return restore(gx, perm);
}

#endif  // !TRIDENT_SIMT

}  // namespace trident::cuda
