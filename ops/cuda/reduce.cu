#include "ops/cuda/reduce.h"

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
      if (active)
        for (int64_t j = t; j < n; j += tpr) {
          float v = static_cast<float>(xr[j]);
          switch (prm.op) {
            case RowOp::NormP: v = prm.p == 1.0f ? fabsf(v) : (prm.p == 2.0f ? v * v : powf(fabsf(v), prm.p)); break;
            case RowOp::NormInf:
            case RowOp::NormNegInf: v = fabsf(v); break;
            case RowOp::Norm0: v = v != 0.0f ? 1.0f : 0.0f; break;
            default: break;
          }
          acc = combine(prm.op, acc, v);
        }
      result = row_reduce(acc, prm.op, tpr, smem);
      if (prm.op == RowOp::Mean) result /= static_cast<float>(n);
      if (prm.op == RowOp::NormP) result = prm.p == 1.0f ? result : (prm.p == 2.0f ? sqrtf(result) : powf(result, 1.0f / prm.p));
    }
    if (active && t == 0) out[row] = static_cast<T>(result);
  }
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
  int64_t rows = 0, n = 0;
  const Tensor xr = as_rows(x, dims, rows, n);
  const Shape shape = reduced_shape(x.sizes(), dims, keepdim);
  Tensor out = empty_on(shape, x.dtype(), x.device());
  Tensor idx;
  const bool indexed = op == RowOp::ArgMax || op == RowOp::ArgMin;
  if (indexed) idx = empty_on(shape, DType::I64, x.device());
  if (rows == 0) return {out, idx};
  RowParams prm{op, rows, n, p, static_cast<float>(std::max(0.0, static_cast<double>(n) - correction)), take_sqrt,
                n >= 1024 ? 256 : 32};
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

}  // namespace trident::cuda
