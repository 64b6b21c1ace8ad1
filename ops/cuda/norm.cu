#include "ops/cuda/norm.h"

#include <algorithm>
#include <cmath>

#include "core/copy.h"
#include "ops/cuda/common.cuh"
#include "ops/math/norm.h"

namespace trident::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int kWarps = kBlock / 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The sum of v over the threads of a row: a warp (tpr 32), or the whole block (tpr kBlock), in
// which case every thread of the block must call it (it synchronizes). The result is in every
// thread of the row.
__device__ float row_sum(float v, int tpr, float* smem) {
  v = warp_sum(v);
  if (tpr == 32) return v;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // smem may still be read by the previous call
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  return warp_sum(lane < kWarps ? smem[lane] : 0.0f);
}

// Threads per row: a warp for short rows, the whole block for long ones.
int threads_per_row(int64_t cols) { return cols >= 1024 ? kBlock : 32; }

template <typename T>
const T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}
template <typename T>
T* mut_ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// ============================================================================================
// Layer norm (NOTE [CUDA norm reductions]).
// ============================================================================================

// Forward of rows of n: mean, then the variance around it (two passes, as on the CPU; the row
// stays in L1/L2 between them), then y. w and b may be null (1 and 0). With a residual r (else
// null), the row is first x + r rounded to T, written to sum and read back from there by the
// later passes (each thread rereads only what it wrote itself).
// x and sum are deliberately not __restrict__ (NOTE [Restrict and read-only loads] in
// common.cuh): the later passes read through one pointer that is x's row or sum's, and with x a
// const __restrict__ pointer nvcc compiled every such read as ld.global.nc (the read-only,
// non-coherent path, whose data must not be written during the kernel) although on the residual
// path it reads what this kernel has just stored to sum.
template <typename T>
__global__ void __launch_bounds__(kBlock) layer_norm_kernel(const T* x, const T* __restrict__ r,
                                                            T* sum, const T* __restrict__ w,
                                                            const T* __restrict__ b, T* __restrict__ y,
                                                            float* __restrict__ mean, float* __restrict__ rstd,
                                                            int64_t rows, int64_t n, int tpr, float eps) {
  __shared__ float smem[kWarps];
  const int per_block = kBlock / tpr;
  const int t = threadIdx.x % tpr;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * per_block; base < rows;
       base += static_cast<int64_t>(gridDim.x) * per_block) {
    const int64_t row = base + threadIdx.x / tpr;
    const bool active = row < rows;  // uniform over a row's threads: the shuffles stay full-warp
    const T* xr = x + (active ? row : 0) * n;
    float s = 0.0f;
    if (active && r != nullptr) {
      const T* rr = r + row * n;
      T* sr = sum + row * n;
      for (int64_t j = t; j < n; j += tpr) {
        const T v = static_cast<T>(static_cast<float>(xr[j]) + static_cast<float>(rr[j]));
        sr[j] = v;
        s += static_cast<float>(v);
      }
      xr = sr;
    } else if (active) {
      for (int64_t j = t; j < n; j += tpr) s += static_cast<float>(xr[j]);
    }
    const float mu = row_sum(s, tpr, smem) / static_cast<float>(n);
    float v = 0.0f;
    if (active)
      for (int64_t j = t; j < n; j += tpr) {
        const float d = static_cast<float>(xr[j]) - mu;
        v += d * d;
      }
    const float var = row_sum(v, tpr, smem) / static_cast<float>(n);
    const float r = 1.0f / sqrtf(var + eps);  // IEEE sqrt and division (no fast math)
    if (!active) continue;
    T* yr = y + row * n;
    for (int64_t j = t; j < n; j += tpr) {
      const float wj = w != nullptr ? static_cast<float>(w[j]) : 1.0f;
      const float bj = b != nullptr ? static_cast<float>(b[j]) : 0.0f;
      yr[j] = static_cast<T>(math::layer_norm_value(static_cast<float>(xr[j]), mu, r, wj, bj));
    }
    if (t == 0) {
      mean[row] = mu;
      rstd[row] = r;
    }
  }
}

// dx of rows of n: a = mean(g w), c = mean(g w xhat) in one pass, then dx (ops/math/norm.h).
template <typename T>
__global__ void __launch_bounds__(kBlock) layer_norm_dx_kernel(const T* __restrict__ g, const T* __restrict__ x,
                                                               const float* __restrict__ mean,
                                                               const float* __restrict__ rstd, const T* __restrict__ w,
                                                               T* __restrict__ dx, int64_t rows, int64_t n, int tpr) {
  __shared__ float smem[kWarps];
  const int per_block = kBlock / tpr;
  const int t = threadIdx.x % tpr;
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * per_block; base < rows;
       base += static_cast<int64_t>(gridDim.x) * per_block) {
    const int64_t row = base + threadIdx.x / tpr;
    const bool active = row < rows;
    const int64_t o = (active ? row : 0) * n;
    const float mu = active ? mean[row] : 0.0f, r = active ? rstd[row] : 0.0f;
    float sa = 0.0f, sc = 0.0f;
    if (active)
      for (int64_t j = t; j < n; j += tpr) {
        const float dy = static_cast<float>(g[o + j]) * (w != nullptr ? static_cast<float>(w[j]) : 1.0f);
        sa += dy;
        sc += dy * ((static_cast<float>(x[o + j]) - mu) * r);
      }
    const float a = row_sum(sa, tpr, smem) * inv_n;
    const float c = row_sum(sc, tpr, smem) * inv_n;
    if (!active) continue;
    for (int64_t j = t; j < n; j += tpr) {
      const float dy = static_cast<float>(g[o + j]) * (w != nullptr ? static_cast<float>(w[j]) : 1.0f);
      const float xhat = (static_cast<float>(x[o + j]) - mu) * r;
      dx[o + j] = static_cast<T>(math::layer_norm_grad(dy, xhat, r, a, c));
    }
  }
}

// Stage 1 of dw_j = sum_i g_ij xhat_ij and db_j = sum_i g_ij: block (bx, k) covers columns
// [32 bx, 32 bx + 32) and rows [k rpc, (k + 1) rpc); a thread (tx, ty) sums rows ty, ty + 8, ...
// of column 32 bx + tx, and the 8 row-threads' sums are added in ty order into part[k, j].
// Neighbouring threads read neighbouring columns of a row (coalesced). pdw or pdb may be null.
constexpr int kColTile = 32;
constexpr int kRowThreads = kBlock / kColTile;

template <typename T>
__global__ void __launch_bounds__(kBlock) layer_norm_dwdb_partial_kernel(const T* __restrict__ g, const T* __restrict__ x,
                                                                         const float* __restrict__ mean,
                                                                         const float* __restrict__ rstd,
                                                                         float* __restrict__ pdw, float* __restrict__ pdb,
                                                                         int64_t rows, int64_t n, int64_t rpc) {
  __shared__ float sw[kRowThreads][kColTile + 1], sb[kRowThreads][kColTile + 1];
  const int tx = threadIdx.x % kColTile, ty = threadIdx.x / kColTile;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColTile + tx;
  const int64_t k = blockIdx.y;
  const int64_t rb = k * rpc, re = rb + rpc < rows ? rb + rpc : rows;
  float aw = 0.0f, ab = 0.0f;
  if (j < n)
    for (int64_t i = rb + ty; i < re; i += kRowThreads) {
      const float gv = static_cast<float>(g[i * n + j]);
      if (pdw != nullptr) aw += gv * ((static_cast<float>(x[i * n + j]) - mean[i]) * rstd[i]);
      ab += gv;
    }
  sw[ty][tx] = aw;
  sb[ty][tx] = ab;
  __syncthreads();
  if (ty == 0 && j < n) {
    float s_w = 0.0f, s_b = 0.0f;
#pragma unroll
    for (int r = 0; r < kRowThreads; ++r) {
      s_w += sw[r][tx];
      s_b += sb[r][tx];
    }
    if (pdw != nullptr) pdw[k * n + j] = s_w;
    if (pdb != nullptr) pdb[k * n + j] = s_b;
  }
}

// Stage 2: out[j] = sum over k in order of part[k, j] (one thread per column, coalesced).
template <typename T>
__global__ void __launch_bounds__(kBlock) column_sum_kernel(const float* __restrict__ part, int64_t chunks, int64_t n,
                                                            T* __restrict__ out) {
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int64_t k = 0; k < chunks; ++k) s += part[k * n + j];
    out[j] = static_cast<T>(s);
  }
}

// ============================================================================================
// Batch norm (NOTE [CUDA norm reductions]): channel c owns the n planes x[i, c, :] of `spatial`.
// ============================================================================================

// Walks the elements e = threadIdx.x, + blockDim.x, ... of a channel (e in [0, n * spatial))
// as (plane i, position p) without a division per element.
struct ChannelWalk {
  int64_t i, p, di, dp;
  __device__ ChannelWalk(int64_t spatial) {
    i = threadIdx.x / spatial;
    p = threadIdx.x % spatial;
    di = blockDim.x / spatial;
    dp = blockDim.x % spatial;
  }
  __device__ void next(int64_t spatial) {
    i += di;
    p += dp;
    if (p >= spatial) {
      p -= spatial;
      ++i;
    }
  }
};

// Training statistics, a block per channel: mean, biased variance (two passes), rstd.
template <typename T>
__global__ void __launch_bounds__(kBlock) batch_norm_stats_kernel(const T* __restrict__ x, float* __restrict__ mean,
                                                                  float* __restrict__ var, float* __restrict__ rstd,
                                                                  int64_t n, int64_t channels, int64_t spatial,
                                                                  double eps) {
  __shared__ float smem[kWarps];
  const float m = static_cast<float>(n * spatial);
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {  // uniform over the block
    float s = 0.0f;
    for (ChannelWalk w(spatial); w.i < n; w.next(spatial)) s += static_cast<float>(x[(w.i * channels + c) * spatial + w.p]);
    const float mu = row_sum(s, kBlock, smem) / m;
    float v = 0.0f;
    for (ChannelWalk w(spatial); w.i < n; w.next(spatial)) {
      const float d = static_cast<float>(x[(w.i * channels + c) * spatial + w.p]) - mu;
      v += d * d;
    }
    const float vc = row_sum(v, kBlock, smem) / m;
    if (threadIdx.x == 0) {
      mean[c] = mu;
      var[c] = vc;
      rstd[c] = static_cast<float>(math::norm_rstd(static_cast<double>(vc), eps));  // in f64, as the CPU
    }
  }
}

// Eval: mean = running_mean, rstd = 1 / sqrt(running_var + eps) (in f64, as the CPU).
__global__ void batch_norm_running_stats_kernel(const float* __restrict__ rm, const float* __restrict__ rv,
                                                float* __restrict__ mean, float* __restrict__ rstd, int64_t channels,
                                                double eps) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < channels;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    mean[c] = rm[c];
    rstd[c] = static_cast<float>(math::norm_rstd(static_cast<double>(rv[c]), eps));
  }
}

// The channel of flat element k of [n, channels, spatial]; 32-bit division when everything fits.
__device__ __forceinline__ int64_t channel_of(int64_t k, int64_t spatial, int64_t channels, bool narrow) {
  if (narrow)
    return static_cast<int64_t>((static_cast<uint32_t>(k) / static_cast<uint32_t>(spatial)) %
                                static_cast<uint32_t>(channels));
  return (k / spatial) % channels;
}

// y = (x - mean) (rstd w) + b over all elements.
template <typename T>
__global__ void __launch_bounds__(kBlock) batch_norm_apply_kernel(const T* __restrict__ x, const float* __restrict__ mean,
                                                                  const float* __restrict__ rstd, const T* __restrict__ w,
                                                                  const T* __restrict__ b, T* __restrict__ y,
                                                                  int64_t numel, int64_t channels, int64_t spatial,
                                                                  bool narrow) {
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < numel;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = channel_of(k, spatial, channels, narrow);
    const float scale = rstd[c] * (w != nullptr ? static_cast<float>(w[c]) : 1.0f);
    const float shift = b != nullptr ? static_cast<float>(b[c]) : 0.0f;
    y[k] = static_cast<T>(math::batch_norm_value(static_cast<float>(x[k]), mean[c], scale, shift));
  }
}

// Backward sums, a block per channel: sum g and sum g xhat; then dw, db (x's dtype) and the dx
// coefficients A, B, D of ops/math/norm.h (coef[0 | 1 | 2][c], computed in f64 as the CPU).
template <typename T>
__global__ void __launch_bounds__(kBlock) batch_norm_backward_sums_kernel(
    const T* __restrict__ g, const T* __restrict__ x, const float* __restrict__ mean, const float* __restrict__ rstd,
    const T* __restrict__ w, T* __restrict__ dw, T* __restrict__ db, float* __restrict__ coef, int64_t n,
    int64_t channels, int64_t spatial, bool training, bool need_sums) {
  __shared__ float smem[kWarps];
  const int64_t m = n * spatial;
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {  // uniform over the block
    const float mu = mean[c], rs = rstd[c];
    float s1 = 0.0f, s2 = 0.0f;
    if (need_sums)
      for (ChannelWalk cw(spatial); cw.i < n; cw.next(spatial)) {
        const int64_t off = (cw.i * channels + c) * spatial + cw.p;
        const float gv = static_cast<float>(g[off]);
        s1 += gv;
        s2 += gv * ((static_cast<float>(x[off]) - mu) * rs);
      }
    const float sg = row_sum(s1, kBlock, smem);
    const float sgx = row_sum(s2, kBlock, smem);
    if (threadIdx.x != 0) continue;
    if (dw != nullptr) dw[c] = static_cast<T>(sgx);
    if (db != nullptr) db[c] = static_cast<T>(sg);
    if (coef != nullptr) {
      const double wr = (w != nullptr ? static_cast<double>(static_cast<float>(w[c])) : 1.0) * static_cast<double>(rs);
      coef[c] = static_cast<float>(wr);
      coef[channels + c] =
          training ? static_cast<float>(-wr * static_cast<double>(rs) / static_cast<double>(m) * sgx) : 0.0f;
      coef[2 * channels + c] = training ? static_cast<float>(-wr / static_cast<double>(m) * sg) : 0.0f;
    }
  }
}

// dx = A g + B (x - mean) + D over all elements.
template <typename T>
__global__ void __launch_bounds__(kBlock) batch_norm_dx_kernel(const T* __restrict__ g, const T* __restrict__ x,
                                                               const float* __restrict__ mean,
                                                               const float* __restrict__ coef, T* __restrict__ dx,
                                                               int64_t numel, int64_t channels, int64_t spatial,
                                                               bool narrow) {
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < numel;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = channel_of(k, spatial, channels, narrow);
    dx[k] = static_cast<T>(math::batch_norm_grad(static_cast<float>(g[k]), static_cast<float>(x[k]), mean[c], coef[c],
                                                 coef[channels + c], coef[2 * channels + c]));
  }
}

// running = (1 - momentum) running + momentum batch (var times unbias), in f64 with explicit
// round-to-nearest operations (no fused multiply-add) so it is the CPU's arithmetic.
__global__ void batch_norm_update_running_kernel(const float* __restrict__ rm, const float* __restrict__ rv,
                                                 const float* __restrict__ mean, const float* __restrict__ var,
                                                 double* __restrict__ new_m, double* __restrict__ new_v,
                                                 int64_t channels, double momentum, double unbias) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < channels;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double keep = 1.0 - momentum;
    new_m[c] = __dadd_rn(__dmul_rn(keep, static_cast<double>(rm[c])), __dmul_rn(momentum, static_cast<double>(mean[c])));
    new_v[c] = __dadd_rn(__dmul_rn(keep, static_cast<double>(rv[c])),
                         __dmul_rn(__dmul_rn(momentum, static_cast<double>(var[c])), unbias));
  }
}

// The row chunks of layer_norm_dwdb_partial_kernel (grid.y): at least 32 rows each, at most 256
// chunks, and partials of at most 2^24 floats each; fixed by the shapes alone, so the sums are
// reproducible.
struct RowChunks {
  int64_t rows_per_chunk, chunks;
};
inline RowChunks dwdb_chunks(int64_t rows, int64_t cols) {
  const int64_t max_chunks = std::min<int64_t>(256, std::max<int64_t>(1, (int64_t{1} << 24) / cols));
  const int64_t chunks0 = std::min<int64_t>(max_chunks, (rows + 31) / 32);
  const int64_t rpc = (rows + chunks0 - 1) / chunks0;
  return {rpc, (rows + rpc - 1) / rpc};
}


}  // namespace

// The host side: not compiled by the CPU emulator (tests/simt/simt.h), whose tests launch the
// kernels above themselves.
#if !defined(TRIDENT_SIMT)

namespace {

// f32, contiguous, on x's device (a no-op for the f32 statistics saved by the forward).
Tensor f32_contiguous(const Tensor& t) { return t.to(DType::F32).contiguous(); }

// Refuses f64 (NOTE [CUDA dtypes]) with the op's name, before any allocation or early return.
void check_dtype(const char* op, DType dt) {
  TRIDENT_CHECK(dt == DType::F32 || dt == DType::F16 || dt == DType::BF16, op, " (CUDA): no kernel for dtype ", dt,
                " (supported: f32, f16, bf16)");
}

}  // namespace

// ---- layer norm ----

namespace {

// layer_norm and add_layer_norm: y (and sum, when residual is defined) for rows of cols.
LayerNormForward layer_norm_rows(const Tensor& x_in, const Tensor& residual_in, const Tensor& sum, int64_t rows,
                                 int64_t cols, const Tensor& weight, const Tensor& bias, double eps) {
  const Device dev = x_in.device();
  const DType dt = x_in.dtype();
  const Tensor x = x_in.detach().contiguous();
  const Tensor r = residual_in.defined() ? residual_in.detach().contiguous() : Tensor();
  const Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
  const Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  LayerNormForward out;
  out.y = empty_on(x.sizes(), dt, dev);
  out.mean = empty_on({rows}, DType::F32, dev);
  out.rstd = empty_on({rows}, DType::F32, dev);
  if (rows == 0) return out;
  DeviceGuard guard(dev.index);
  if (cols == 0) {  // no elements to normalize over: NaN statistics, as the CPU
    fill_(out.mean, std::nan(""));
    fill_(out.rstd, std::nan(""));
    return out;
  }
  const int tpr = threads_per_row(cols);
  const int blocks = grid_size((rows + kBlock / tpr - 1) / (kBlock / tpr), 1);
  TRIDENT_DISPATCH_CUDA_FLOATING(dt, "layer_norm", [&] {
    layer_norm_kernel<scalar_t><<<blocks, kBlock, 0, current_stream(dev.index).handle()>>>(
        ptr<scalar_t>(x), ptr<scalar_t>(r), mut_ptr<scalar_t>(sum), ptr<scalar_t>(w), ptr<scalar_t>(b),
        mut_ptr<scalar_t>(out.y), mut_ptr<float>(out.mean), mut_ptr<float>(out.rstd), rows, cols, tpr,
        static_cast<float>(eps));
  });
  TRIDENT_CUDA_KERNEL_CHECK();
  return out;
}

}  // namespace

LayerNormForward layer_norm(const Tensor& x, int64_t rows, int64_t cols, const Tensor& weight, const Tensor& bias,
                            double eps) {
  check_dtype("layer_norm", x.dtype());
  return layer_norm_rows(x, Tensor(), Tensor(), rows, cols, weight, bias, eps);
}

AddLayerNormForward add_layer_norm(const Tensor& x, const Tensor& residual, int64_t rows, int64_t cols,
                                   const Tensor& weight, const Tensor& bias, double eps) {
  check_dtype("add_layer_norm", x.dtype());
  Tensor sum = empty_on(x.sizes(), x.dtype(), x.device());
  if (cols == 0) {  // nothing to add; layer norm's NaN statistics
    LayerNormForward f = layer_norm_rows(x, Tensor(), Tensor(), rows, cols, weight, bias, eps);
    return {sum, f.y, f.mean, f.rstd};
  }
  LayerNormForward f = layer_norm_rows(x, residual, sum, rows, cols, weight, bias, eps);
  return {sum, f.y, f.mean, f.rstd};
}

NormGrads layer_norm_backward(const Tensor& g_in, const Tensor& x_in, const Tensor& mean_in, const Tensor& rstd_in,
                              const Tensor& weight, int64_t rows, int64_t cols, bool need_dx, bool need_dw,
                              bool need_db) {
  const Device dev = x_in.device();
  const DType dt = x_in.dtype();
  check_dtype("layer_norm_backward", dt);
  const Tensor x = x_in.detach().contiguous(), g = g_in.detach().to(dt).contiguous();
  const Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
  const Tensor mean = f32_contiguous(mean_in.detach()), rstd = f32_contiguous(rstd_in.detach());
  NormGrads r;
  if (need_dx) r.dx = empty_on(x.sizes(), dt, dev);
  if (need_dw) r.dw = empty_on({cols}, dt, dev);
  if (need_db) r.db = empty_on({cols}, dt, dev);
  DeviceGuard guard(dev.index);
  if (rows == 0 || cols == 0) {  // sums over no rows are 0; dx of no elements is empty
    if (need_dw) fill_(r.dw, 0.0);
    if (need_db) fill_(r.db, 0.0);
    return r;
  }
  const cudaStream_t stream = current_stream(dev.index).handle();
  if (need_dx) {
    const int tpr = threads_per_row(cols);
    const int blocks = grid_size((rows + kBlock / tpr - 1) / (kBlock / tpr), 1);
    TRIDENT_DISPATCH_CUDA_FLOATING(dt, "layer_norm_backward", [&] {
      layer_norm_dx_kernel<scalar_t><<<blocks, kBlock, 0, stream>>>(ptr<scalar_t>(g), ptr<scalar_t>(x), ptr<float>(mean),
                                                                    ptr<float>(rstd), ptr<scalar_t>(w),
                                                                    mut_ptr<scalar_t>(r.dx), rows, cols, tpr);
    });
    TRIDENT_CUDA_KERNEL_CHECK();
  }
  if (need_dw || need_db) {
    const RowChunks rc = dwdb_chunks(rows, cols);
    const int64_t rpc = rc.rows_per_chunk, chunks = rc.chunks;
    const Tensor pdw = need_dw ? empty_on({chunks, cols}, DType::F32, dev) : Tensor();
    const Tensor pdb = need_db ? empty_on({chunks, cols}, DType::F32, dev) : Tensor();
    const int64_t tiles = (cols + kColTile - 1) / kColTile;
    TRIDENT_CHECK(tiles <= 0x7fffffff, "layer_norm_backward (CUDA): ", cols, " columns exceed the grid");
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(chunks));
    const int finish_blocks = grid_size(cols);
    TRIDENT_DISPATCH_CUDA_FLOATING(dt, "layer_norm_backward", [&] {
      layer_norm_dwdb_partial_kernel<scalar_t><<<grid, kBlock, 0, stream>>>(
          ptr<scalar_t>(g), ptr<scalar_t>(x), ptr<float>(mean), ptr<float>(rstd), mut_ptr<float>(pdw),
          mut_ptr<float>(pdb), rows, cols, rpc);
      TRIDENT_CUDA_KERNEL_CHECK();
      if (need_dw) {
        column_sum_kernel<scalar_t><<<finish_blocks, kBlock, 0, stream>>>(ptr<float>(pdw), chunks, cols,
                                                                          mut_ptr<scalar_t>(r.dw));
        TRIDENT_CUDA_KERNEL_CHECK();
      }
      if (need_db) {
        column_sum_kernel<scalar_t><<<finish_blocks, kBlock, 0, stream>>>(ptr<float>(pdb), chunks, cols,
                                                                          mut_ptr<scalar_t>(r.db));
        TRIDENT_CUDA_KERNEL_CHECK();
      }
    });
  }
  return r;
}

// ---- batch norm ----

BatchNormForward batch_norm(const Tensor& x_in, int64_t n, int64_t channels, int64_t spatial, const Tensor& running_mean,
                            const Tensor& running_var, const Tensor& weight, const Tensor& bias, bool training,
                            double eps) {
  const Device dev = x_in.device();
  const DType dt = x_in.dtype();
  check_dtype("batch_norm", dt);
  const Tensor x = x_in.detach().contiguous();
  const Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
  const Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  BatchNormForward out;
  out.y = empty_on(x.sizes(), dt, dev);
  out.mean = empty_on({channels}, DType::F32, dev);
  out.rstd = empty_on({channels}, DType::F32, dev);
  if (training) out.var = empty_on({channels}, DType::F32, dev);
  if (channels == 0) return out;
  DeviceGuard guard(dev.index);
  const cudaStream_t stream = current_stream(dev.index).handle();
  const int stat_blocks = static_cast<int>(std::min<int64_t>(channels, 65535));
  if (training && n * spatial == 0) {  // no values per channel: NaN statistics (0 / 0), as the CPU
    fill_(out.mean, std::nan(""));
    fill_(out.var, std::nan(""));
    fill_(out.rstd, std::nan(""));
  } else if (training) {
    TRIDENT_DISPATCH_CUDA_FLOATING(dt, "batch_norm", [&] {
      batch_norm_stats_kernel<scalar_t><<<stat_blocks, kBlock, 0, stream>>>(
          ptr<scalar_t>(x), mut_ptr<float>(out.mean), mut_ptr<float>(out.var), mut_ptr<float>(out.rstd), n, channels,
          spatial, eps);
    });
    TRIDENT_CUDA_KERNEL_CHECK();
  } else {
    const Tensor rm = f32_contiguous(running_mean.detach()), rv = f32_contiguous(running_var.detach());
    batch_norm_running_stats_kernel<<<grid_size(channels), kBlock, 0, stream>>>(
        ptr<float>(rm), ptr<float>(rv), mut_ptr<float>(out.mean), mut_ptr<float>(out.rstd), channels, eps);
    TRIDENT_CUDA_KERNEL_CHECK();
  }
  const int64_t numel = x.numel();
  if (numel == 0) return out;
  const bool narrow = numel <= 0xffffffffLL;
  TRIDENT_DISPATCH_CUDA_FLOATING(dt, "batch_norm", [&] {
    batch_norm_apply_kernel<scalar_t><<<grid_size(numel), kBlock, 0, stream>>>(
        ptr<scalar_t>(x), ptr<float>(out.mean), ptr<float>(out.rstd), ptr<scalar_t>(w), ptr<scalar_t>(b),
        mut_ptr<scalar_t>(out.y), numel, channels, spatial, narrow);
  });
  TRIDENT_CUDA_KERNEL_CHECK();
  return out;
}

NormGrads batch_norm_backward(const Tensor& g_in, const Tensor& x_in, const Tensor& mean_in, const Tensor& rstd_in,
                              const Tensor& weight, int64_t n, int64_t channels, int64_t spatial, bool training,
                              bool need_dx, bool need_dw, bool need_db) {
  const Device dev = x_in.device();
  const DType dt = x_in.dtype();
  check_dtype("batch_norm_backward", dt);
  const Tensor x = x_in.detach().contiguous(), g = g_in.detach().to(dt).contiguous();
  const Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
  const Tensor mean = f32_contiguous(mean_in.detach()), rstd = f32_contiguous(rstd_in.detach());
  NormGrads r;
  if (need_dx) r.dx = empty_on(x.sizes(), dt, dev);
  if (need_dw) r.dw = empty_on({channels}, dt, dev);
  if (need_db) r.db = empty_on({channels}, dt, dev);
  if (channels == 0) return r;
  const Tensor coef = need_dx ? empty_on({3, channels}, DType::F32, dev) : Tensor();
  DeviceGuard guard(dev.index);
  const cudaStream_t stream = current_stream(dev.index).handle();
  const int stat_blocks = static_cast<int>(std::min<int64_t>(channels, 65535));
  // (ChannelWalk divides by spatial: no sums over empty channels, which are 0.)
  const bool need_sums = (need_dw || need_db || (need_dx && training)) && n * spatial > 0;
  const int64_t numel = x.numel();
  const bool narrow = numel <= 0xffffffffLL;
  TRIDENT_DISPATCH_CUDA_FLOATING(dt, "batch_norm_backward", [&] {
    batch_norm_backward_sums_kernel<scalar_t><<<stat_blocks, kBlock, 0, stream>>>(
        ptr<scalar_t>(g), ptr<scalar_t>(x), ptr<float>(mean), ptr<float>(rstd), ptr<scalar_t>(w),
        mut_ptr<scalar_t>(r.dw), mut_ptr<scalar_t>(r.db), mut_ptr<float>(coef), n, channels, spatial, training,
        need_sums);
    TRIDENT_CUDA_KERNEL_CHECK();
    if (need_dx && numel > 0) {
      batch_norm_dx_kernel<scalar_t><<<grid_size(numel), kBlock, 0, stream>>>(
          ptr<scalar_t>(g), ptr<scalar_t>(x), ptr<float>(mean), ptr<float>(coef), mut_ptr<scalar_t>(r.dx), numel,
          channels, spatial, narrow);
      TRIDENT_CUDA_KERNEL_CHECK();
    }
  });
  return r;
}

void batch_norm_update_running(const Tensor& running_mean, const Tensor& running_var, const Tensor& mean,
                               const Tensor& var, int64_t m, double momentum) {
  const Device dev = running_mean.device();
  const int64_t channels = running_mean.numel();
  if (channels == 0) return;
  const Tensor rm = f32_contiguous(running_mean.detach()), rv = f32_contiguous(running_var.detach());
  const Tensor bm = f32_contiguous(mean.detach()), bv = f32_contiguous(var.detach());
  const Tensor new_m = empty_on({channels}, DType::F64, dev), new_v = empty_on({channels}, DType::F64, dev);
  DeviceGuard guard(dev.index);
  const double unbias = static_cast<double>(m) / static_cast<double>(m - 1);
  batch_norm_update_running_kernel<<<grid_size(channels), kBlock, 0, current_stream(dev.index).handle()>>>(
      ptr<float>(rm), ptr<float>(rv), ptr<float>(bm), ptr<float>(bv), mut_ptr<double>(new_m), mut_ptr<double>(new_v),
      channels, momentum, unbias);
  TRIDENT_CUDA_KERNEL_CHECK();
  // copy_ rounds once to the running statistics' dtype, follows their layout, bumps their version.
  copy_(running_mean, new_m);
  copy_(running_var, new_v);
}

#endif  // !TRIDENT_SIMT

}  // namespace trident::cuda
