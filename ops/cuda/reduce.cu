#include "ops/cuda/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/cuda/arith.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/compare.h"
#include "ops/cuda/unary.h"
#include "ops/reduce.h"
#include "ops/shape.h"

namespace trident::cuda {

namespace {

enum class RowOp : uint8_t { Sum, Mean, Max, Min, ArgMax, ArgMin, Var, LogSumExp, NormP, NormInf, NormNegInf, Norm0 };

struct RowParams {
  RowOp op;
  int64_t rows, n;
  float p;           // the norm's p
  float divisor;     // var: max(0, n - correction)
  bool take_sqrt;    // var -> std
  int threads_per_row;  // 32 (a warp per row) or 256 (a block per row)
  bool packed;          // rows load as 16-byte packs (aligned, n a multiple of the pack)
};

// value, index pairs for max/min: NaN wins, then the larger (smaller) value, then the lower index.
struct VI {
  float v;
  int64_t i;
};

__device__ __forceinline__ VI better(VI a, VI b, bool is_max) {
  const bool an = a.v != a.v, bn = b.v != b.v;
  if (an || bn) {
    if (an && bn) return a.i <= b.i ? a : b;
    return an ? a : b;
  }
  if (a.v == b.v) return a.i <= b.i ? a : b;
  return (is_max ? a.v > b.v : a.v < b.v) ? a : b;
}

__device__ __forceinline__ float combine(RowOp op, float a, float b) {
  switch (op) {
    case RowOp::Max:
    case RowOp::NormInf:
    case RowOp::LogSumExp: return (a > b || a != a) ? a : b;
    case RowOp::Min:
    case RowOp::NormNegInf: return (a < b || a != a) ? a : b;
    default: return a + b;
  }
}

__device__ __forceinline__ float identity(RowOp op) {
  switch (op) {
    case RowOp::Max:
    case RowOp::NormInf:
    case RowOp::LogSumExp: return -INFINITY;
    case RowOp::Min:
    case RowOp::NormNegInf: return INFINITY;
    default: return 0.0f;
  }
}

// What an element contributes (norms), and what the combined value becomes (mean, p-th root).
__device__ __forceinline__ float pre_transform(RowOp op, float p, float v) {
  switch (op) {
    case RowOp::NormP: return p == 1.0f ? fabsf(v) : (p == 2.0f ? v * v : powf(fabsf(v), p));
    case RowOp::NormInf:
    case RowOp::NormNegInf: return fabsf(v);
    case RowOp::Norm0: return v != 0.0f ? 1.0f : 0.0f;
    default: return v;
  }
}

__device__ __forceinline__ float post_transform(RowOp op, float p, int64_t n, float v) {
  if (op == RowOp::Mean) return v / static_cast<float>(n);
  if (op == RowOp::NormP) return p == 1.0f ? v : (p == 2.0f ? sqrtf(v) : powf(v, 1.0f / p));
  return v;
}

// Reduces v over the threads of a row (a warp, or the block through shared memory).
__device__ float row_reduce(float v, RowOp op, int tpr, float* smem) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = combine(op, v, __shfl_xor_sync(0xffffffffu, v, o));
  if (tpr == 32) return v;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // smem may still be read from the previous reduction
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? smem[lane] : identity(op);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = combine(op, v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ VI row_reduce_vi(VI v, bool is_max, int tpr, VI* smem) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    VI other{__shfl_xor_sync(0xffffffffu, v.v, o), __shfl_xor_sync(0xffffffffu, v.i, o)};
    v = better(v, other, is_max);
  }
  if (tpr == 32) return v;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  v = smem[lane < static_cast<int>(blockDim.x / 32) ? lane : 0];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    VI other{__shfl_xor_sync(0xffffffffu, v.v, o), __shfl_xor_sync(0xffffffffu, v.i, o)};
    v = better(v, other, is_max);
  }
  return v;
}

template <typename T>
__global__ void __launch_bounds__(256) reduce_rows_kernel(const T* __restrict__ x, RowParams prm, T* __restrict__ out,
                                                          int64_t* __restrict__ idx_out) {
  __shared__ VI smem_vi[8];
  __shared__ float smem[8];
  const int tpr = prm.threads_per_row;
  const int rows_per_block = blockDim.x / tpr;
  const int t = threadIdx.x % tpr;
  const int64_t n = prm.n;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * rows_per_block; base < prm.rows;
       base += static_cast<int64_t>(gridDim.x) * rows_per_block) {
    const int64_t row = base + threadIdx.x / tpr;
    const bool active = row < prm.rows;  // whole warps share a row, so the shuffles stay uniform
    const T* xr = x + (active ? row : 0) * n;
    float result;
    if (prm.op == RowOp::ArgMax || prm.op == RowOp::ArgMin) {
      const bool is_max = prm.op == RowOp::ArgMax;
      VI acc{is_max ? -INFINITY : INFINITY, std::numeric_limits<int64_t>::max()};
      if (active)
        for (int64_t j = t; j < n; j += tpr) acc = better(acc, VI{static_cast<float>(xr[j]), j}, is_max);
      acc = row_reduce_vi(acc, is_max, tpr, smem_vi);
      if (active && t == 0) {
        out[row] = static_cast<T>(acc.v);
        idx_out[row] = acc.i;
      }
      continue;
    }
    float acc = identity(prm.op);
    if (prm.op == RowOp::Var) {
      if (active)
        for (int64_t j = t; j < n; j += tpr) acc += static_cast<float>(xr[j]);
      const float mean = row_reduce(acc, RowOp::Sum, tpr, smem) / static_cast<float>(n);
      acc = 0.0f;
      if (active)
        for (int64_t j = t; j < n; j += tpr) {
          const float d = static_cast<float>(xr[j]) - mean;
          acc += d * d;
        }
      const float v = row_reduce(acc, RowOp::Sum, tpr, smem) / prm.divisor;
      result = prm.take_sqrt ? sqrtf(v) : v;
    } else if (prm.op == RowOp::LogSumExp) {
      if (active)
        for (int64_t j = t; j < n; j += tpr) acc = combine(RowOp::Max, acc, static_cast<float>(xr[j]));
      const float m = row_reduce(acc, RowOp::Max, tpr, smem);
      const float shift = isinf(m) ? 0.0f : m;
      acc = 0.0f;
      if (active)
        for (int64_t j = t; j < n; j += tpr) acc += expf(static_cast<float>(xr[j]) - shift);
      result = shift + logf(row_reduce(acc, RowOp::Sum, tpr, smem));
    } else {
      constexpr int V = 16 / sizeof(T);
      if (active && prm.packed) {
        // 16-byte loads: n is a multiple of V and every row starts aligned.
        const auto* xp = reinterpret_cast<const Pack<T, V>*>(xr);
        for (int64_t q = t; q < n / V; q += tpr) {
          const Pack<T, V> pk = xp[q];
#pragma unroll
          for (int u = 0; u < V; ++u) acc = combine(prm.op, acc, pre_transform(prm.op, prm.p, static_cast<float>(pk.v[u])));
        }
      } else if (active) {
        for (int64_t j = t; j < n; j += tpr) acc = combine(prm.op, acc, pre_transform(prm.op, prm.p, static_cast<float>(xr[j])));
      }
      result = post_transform(prm.op, prm.p, n, row_reduce(acc, prm.op, tpr, smem));
    }
    if (active && t == 0) out[row] = static_cast<T>(result);
  }
}

// NOTE [CUDA column reductions]: a contiguous x whose reduced dims are one run of adjacent dims
// is [outer, r, inner] reduced over r. With inner > 1 (a sum over the batch of a bias gradient, a
// mean over dim 0) the row kernel would need x transposed first, a full extra copy; instead warps
// read 32 adjacent columns, or 32 16-byte packs of them, of a row at a time (coalesced), the 8
// warps of a block take every 8th row of a chunk of r, and the chunk count (`splits`) is chosen
// to fill the device. Each split
// writes f32 partials [splits, outer, inner] that a second kernel combines in split order, so the
// result does not depend on timing.
struct ColParams {
  RowOp op;
  int64_t outer, r, inner, chunk;
  int splits;
  float p;
};

// V adjacent columns per thread (V = 1, or a 16-byte pack: 4 f32, 8 bf16 or f16, when inner is a
// multiple of V and x is 16-byte aligned, so every pack is): a warp reads 32 V columns of a row,
// whole 128-byte lines even for 2-byte types (V = 1 read half lines there: column sums of bf16
// at 0.42 of PyTorch's speed, f32 at 0.63, on an H200). Each column's rows are summed in the
// same order whatever V, so the result does not depend on it.
template <typename T, int V>
__global__ void __launch_bounds__(256) reduce_cols_kernel(const T* __restrict__ x, ColParams prm, float* __restrict__ partial) {
  __shared__ float smem[8][32 * V + 1];
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  const int64_t j = (static_cast<int64_t>(blockIdx.x) * 32 + tx) * V;  // the thread's first column
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * prm.chunk;
  const int64_t r1 = r0 + prm.chunk < prm.r ? r0 + prm.chunk : prm.r;
  for (int64_t a = blockIdx.z; a < prm.outer; a += gridDim.z) {
    float acc[V];
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] = identity(prm.op);
    if (j < prm.inner) {
      // Four rows in flight per thread (independent accumulators), then the tail.
      const T* xa = x + a * prm.r * prm.inner + j;
      float acc4[4][V];
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int e = 0; e < V; ++e) acc4[u][e] = acc[e];
      const auto load = [&](int64_t r, float* dst) {
        Pack<T, V> pk;
        if constexpr (V == 1) {
          pk.v[0] = xa[r * prm.inner];
        } else {
          pk = *reinterpret_cast<const Pack<T, V>*>(xa + r * prm.inner);
        }
#pragma unroll
        for (int e = 0; e < V; ++e) dst[e] = combine(prm.op, dst[e], pre_transform(prm.op, prm.p, static_cast<float>(pk.v[e])));
      };
      int64_t r = r0 + ty;
      for (; r + 24 < r1; r += 32) {
#pragma unroll
        for (int u = 0; u < 4; ++u) load(r + 8 * u, acc4[u]);
      }
      for (; r < r1; r += 8) load(r, acc4[0]);
#pragma unroll
      for (int e = 0; e < V; ++e)
        acc[e] = combine(prm.op, combine(prm.op, acc4[0][e], acc4[1][e]), combine(prm.op, acc4[2][e], acc4[3][e]));
    }
#pragma unroll
    for (int e = 0; e < V; ++e) smem[ty][tx * V + e] = acc[e];
    __syncthreads();
    // The 8 row groups' sums of the block's 32 V columns, added in ty order; thread t < 32 V
    // finishes column t of the block (coalesced writes).
    const int64_t jb = static_cast<int64_t>(blockIdx.x) * 32 * V;
    for (int t = threadIdx.x; t < 32 * V; t += blockDim.x) {
      float v = smem[0][t];
#pragma unroll
      for (int k = 1; k < 8; ++k) v = combine(prm.op, v, smem[k][t]);
      if (jb + t < prm.inner) partial[(static_cast<int64_t>(blockIdx.y) * prm.outer + a) * prm.inner + jb + t] = v;
    }
    __syncthreads();
  }
}

template <typename T>
__global__ void __launch_bounds__(256) finish_cols_kernel(const float* __restrict__ partial, ColParams prm, T* __restrict__ out) {
  const int64_t m = prm.outer * prm.inner;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = partial[i];
    for (int s = 1; s < prm.splits; ++s) acc = combine(prm.op, acc, partial[s * m + i]);
    out[i] = static_cast<T>(post_transform(prm.op, prm.p, prm.r, acc));
  }
}

// How reduce_columns cuts [outer, r, inner]: 16-byte packs of columns when inner is a multiple
// of the pack (`pack` elements) and x is 16-byte aligned; blocks of 32 columns (or packs) along
// grid.x, the outer index along grid.z, and enough splits of r along grid.y for about 8 blocks
// per multiprocessor (`sms` of them), each at least 64 rows.
struct ColLaunch {
  ColParams prm;
  bool packed;
  dim3 grid;
};
inline ColLaunch column_launch(RowOp op, int64_t outer, int64_t r, int64_t inner, float p, int64_t pack, bool aligned,
                               int sms) {
  ColLaunch l{{op, outer, r, inner, r, 1, p}, inner % pack == 0 && aligned, dim3()};
  const int64_t cols_per_block = 32 * (l.packed ? pack : 1);
  const int64_t col_blocks = (inner + cols_per_block - 1) / cols_per_block;
  const int64_t z = std::min<int64_t>(outer, 65535);
  const int64_t want = (static_cast<int64_t>(sms) * 8 + col_blocks * z - 1) / (col_blocks * z);
  const int64_t splits = std::max<int64_t>(1, std::min<int64_t>({want, (r + 63) / 64, 65535}));
  l.prm.chunk = (r + splits - 1) / splits;
  l.prm.splits = static_cast<int>((r + l.prm.chunk - 1) / l.prm.chunk);
  l.grid = dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(l.prm.splits), static_cast<unsigned>(z));
  return l;
}

// Threads per row of reduce_rows_kernel: a warp for short rows, the whole block for long ones.
inline int row_threads(int64_t n) { return n >= 1024 ? 256 : 32; }

}  // namespace

// The host side: not compiled by the CPU emulator (tests/simt/simt.h), whose tests launch the
// kernels above themselves.
#if !defined(TRIDENT_SIMT)
namespace {

// [outer, r, inner] when x is contiguous and `dims` are adjacent, with inner > 1; else false.
bool column_layout(const Tensor& x, std::vector<int64_t> dims, int64_t& outer, int64_t& r, int64_t& inner) {
  if (dims.empty() || !x.is_contiguous()) return false;
  std::sort(dims.begin(), dims.end());
  for (size_t i = 1; i < dims.size(); ++i)
    if (dims[i] != dims[i - 1] + 1) return false;
  outer = r = inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < dims.front()) outer *= x.size(d);
    else if (d <= dims.back()) r *= x.size(d);
    else inner *= x.size(d);
  }
  return inner > 1 && r > 0;
}

void reduce_columns(RowOp op, const Tensor& x, int64_t outer, int64_t r, int64_t inner, float p, const Tensor& out) {
  const ColLaunch l = column_launch(op, outer, r, inner, p, 16 / static_cast<int64_t>(itemsize(x.dtype())),
                                    reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0, multiprocessor_count());
  const ColParams& prm = l.prm;
  const bool packed = l.packed;
  DeviceGuard g(x.device().index);
  const cudaStream_t stream = current_stream(x.device().index).handle();
  const Tensor partial = empty_on({prm.splits, outer, inner}, DType::F32, x.device());
  TRIDENT_DISPATCH_CUDA_FLOATING(x.dtype(), "reduction", [&] {
    const dim3 grid = l.grid;
    constexpr int V = 16 / sizeof(scalar_t);
    if (packed) {
      reduce_cols_kernel<scalar_t, V><<<grid, 256, 0, stream>>>(static_cast<const scalar_t*>(x.data_ptr()), prm,
                                                                static_cast<float*>(partial.data_ptr()));
    } else {
      reduce_cols_kernel<scalar_t, 1><<<grid, 256, 0, stream>>>(static_cast<const scalar_t*>(x.data_ptr()), prm,
                                                                static_cast<float*>(partial.data_ptr()));
    }
    TRIDENT_CUDA_KERNEL_CHECK();
    finish_cols_kernel<scalar_t><<<grid_size(outer * inner), 256, 0, stream>>>(
        static_cast<const float*>(partial.data_ptr()), prm, static_cast<scalar_t*>(out.data_ptr()));
    TRIDENT_CUDA_KERNEL_CHECK();
  });
}

bool column_op(RowOp op) {
  return op == RowOp::Sum || op == RowOp::Mean || op == RowOp::Max || op == RowOp::Min || op == RowOp::NormP ||
         op == RowOp::NormInf || op == RowOp::NormNegInf || op == RowOp::Norm0;
}

// x with the reduced dims innermost, contiguous (NOTE [CUDA row reductions]); rows and n.
Tensor as_rows(const Tensor& x, const std::vector<int64_t>& dims, int64_t& rows, int64_t& n) {
  std::vector<int64_t> perm;
  std::vector<bool> reduced(static_cast<size_t>(x.dim()), false);
  for (int64_t d : dims) reduced[static_cast<size_t>(d)] = true;
  rows = 1;
  n = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!reduced[static_cast<size_t>(d)]) {
      perm.push_back(d);
      rows *= x.size(d);
    }
  for (int64_t d : dims) {
    perm.push_back(d);
    n *= x.size(d);
  }
  Tensor xd = x.detach();
  if (x.dim() == 0) return xd.contiguous();
  return permute(xd, perm).contiguous();
}

std::pair<Tensor, Tensor> run(RowOp op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, float p = 0,
                              double correction = 0, bool take_sqrt = false) {
  const Shape shape = reduced_shape(x.sizes(), dims, keepdim);
  Tensor out = empty_on(shape, x.dtype(), x.device());
  int64_t outer = 0, r = 0, inner = 0;
  if (column_op(op) && column_layout(x, dims, outer, r, inner)) {
    if (out.numel() > 0) reduce_columns(op, x.detach(), outer, r, inner, p, out);
    return {out, Tensor()};
  }
  int64_t rows = 0, n = 0;
  const Tensor xr = as_rows(x, dims, rows, n);
  Tensor idx;
  const bool indexed = op == RowOp::ArgMax || op == RowOp::ArgMin;
  if (indexed) idx = empty_on(shape, DType::I64, x.device());
  if (rows == 0) return {out, idx};
  RowParams prm{op, rows, n, p, static_cast<float>(std::max(0.0, static_cast<double>(n) - correction)), take_sqrt,
                row_threads(n),
                n % (16 / static_cast<int64_t>(itemsize(x.dtype()))) == 0 && reinterpret_cast<uintptr_t>(xr.data_ptr()) % 16 == 0};
  const int rows_per_block = 256 / prm.threads_per_row;
  DeviceGuard g(x.device().index);
  const int blocks = grid_size((rows + rows_per_block - 1) / rows_per_block, 1);
  TRIDENT_DISPATCH_CUDA_FLOATING(x.dtype(), "reduction", [&] {
    reduce_rows_kernel<scalar_t><<<blocks, 256, 0, current_stream(x.device().index).handle()>>>(
        static_cast<const scalar_t*>(xr.data_ptr()), prm, static_cast<scalar_t*>(out.data_ptr()),
        indexed ? static_cast<int64_t*>(idx.data_ptr()) : nullptr);
  });
  TRIDENT_CUDA_KERNEL_CHECK();
  return {out, idx};
}

}  // namespace

Tensor reduce(ReduceKind kind, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, DType out_dtype) {
  TRIDENT_CHECK(out_dtype == x.dtype(), "sum (CUDA): no kernel for dtype ", x.dtype(), " (supported: f32, f16, bf16)");
  return run(kind == ReduceKind::Sum ? RowOp::Sum : RowOp::Mean, x, dims, keepdim).first;
}

Tensor extreme(bool is_max, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return run(is_max ? RowOp::Max : RowOp::Min, x, dims, keepdim).first;
}

std::pair<Tensor, Tensor> extreme_index(bool is_max, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return run(is_max ? RowOp::ArgMax : RowOp::ArgMin, x, dims, keepdim);
}

Tensor var(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim, bool take_sqrt) {
  return run(RowOp::Var, x, dims, keepdim, 0, correction, take_sqrt).first;
}

Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return run(RowOp::LogSumExp, x, dims, keepdim).first;
}

Tensor norm(const Tensor& x, double p, const std::vector<int64_t>& dims, bool keepdim) {
  if (std::isinf(p)) return run(p > 0 ? RowOp::NormInf : RowOp::NormNegInf, x, dims, keepdim).first;
  if (p == 0.0) return run(RowOp::Norm0, x, dims, keepdim).first;
  return run(RowOp::NormP, x, dims, keepdim, static_cast<float>(p)).first;
}

// ---- backward, composed from the element-wise kernels (no autograd: detached inputs) ----

Tensor distribute_backward(const Tensor& x, const Tensor& value_k, const Tensor& g_k, const std::vector<int64_t>& dims,
                           bool abs_sign) {
  const Tensor xv = abs_sign ? cuda::unary(cpu::UnaryOp::Abs, x) : x;
  const Tensor hit = compare(CompareOp::Eq, xv, value_k);
  const Tensor count = run(RowOp::Sum, hit.to(x.dtype()), dims, /*keepdim=*/true).first;
  Tensor g = binary(BinaryOp::Div, g_k, count);
  if (abs_sign) g = cuda::unary_backward(cpu::UnaryOp::Abs, expand(g, x.sizes()).contiguous(), x);  // g * sign(x)
  return where_scalar(hit, expand(g, x.sizes()), 0.0, /*x_when_true=*/true, x.sizes());
}

Tensor var_backward(const Tensor& x, const Tensor& g_k, const Tensor& out_k, const std::vector<int64_t>& dims,
                    double correction, bool is_std) {
  int64_t n = 1;
  for (int64_t d : dims) n *= x.size(d);
  const double divisor = std::max(0.0, static_cast<double>(n) - correction);
  const Tensor mean = run(RowOp::Mean, x, dims, /*keepdim=*/true).first;
  Tensor scale = binary_scalar(BinaryOp::Mul, g_k, 2.0 / divisor, false);
  if (is_std) scale = binary(BinaryOp::Div, binary_scalar(BinaryOp::Mul, scale, 0.5, false), out_k);
  return binary(BinaryOp::Mul, binary(BinaryOp::Sub, x, mean), scale);
}

Tensor logsumexp_backward(const Tensor& x, const Tensor& g_k, const Tensor& out_k) {
  return binary(BinaryOp::Mul, cuda::unary(cpu::UnaryOp::Exp, binary(BinaryOp::Sub, x, out_k)), g_k);
}

Tensor norm_backward(const Tensor& x, const Tensor& g_k, const Tensor& norm_k, double p) {
  // d||x||_p / dx = sign(x) |x|^(p-1) / ||x||^(p-1); 0 where the norm is 0.
  const Tensor ax = cuda::unary(cpu::UnaryOp::Abs, x);
  const Tensor num = pow(ax, p - 1.0);
  const Tensor den = pow(norm_k, p - 1.0);
  Tensor r = binary(BinaryOp::Div, binary(BinaryOp::Mul, num, g_k), den);
  r = cuda::unary_backward(cpu::UnaryOp::Abs, r, x);  // times sign(x)
  const Tensor zero_norm = compare_scalar(CompareOp::Eq, norm_k, 0.0);
  return where_scalar(zero_norm, r, 0.0, /*x_when_true=*/false, x.sizes());
}

#endif  // !TRIDENT_SIMT

}  // namespace trident::cuda
