#include "ops/cuda/loss.h"

#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "core/shape.h"
#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/common.cuh"
#include "ops/math/loss.h"

namespace trident::cuda {

namespace {

// ============================================================================================
// Device totals (NOTE [Deterministic device totals]).
// ============================================================================================

// Stage two: one block sums, in a fixed order, component k of nb partials of `width` doubles.
__global__ void __launch_bounds__(kReduceThreads) sum_partials_kernel(const double* __restrict__ partial, int nb, int width,
                                                                       double* __restrict__ out) {
  __shared__ double smem[kReduceThreads / 32];
  for (int k = 0; k < width; ++k) {
    double v = 0;
    for (int i = static_cast<int>(threadIdx.x); i < nb; i += kReduceThreads) v += partial[i * width + k];
    v = block_reduce(v, SumOp{}, 0.0, smem);
    if (threadIdx.x == 0) out[k] = v;
  }
}

// Stage one of the class losses' totals: sum of the per-position losses, and of w[t] (1 without
// weights) over the positions whose target is not ignore_index.
__global__ void __launch_bounds__(kReduceThreads) class_totals_kernel(const float* __restrict__ loss,
                                                                       const int64_t* __restrict__ tgt,
                                                                       const float* __restrict__ w, int64_t npos,
                                                                       int64_t ignore, double* __restrict__ partial) {
  __shared__ double smem[kReduceThreads / 32];
  double ls = 0, ws = 0;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < npos; i += step) {
    ls += static_cast<double>(loss[i]);
    const int64_t t = tgt[i];
    if (t != ignore) ws += w ? static_cast<double>(w[t]) : 1.0;
  }
  ls = block_reduce(ls, SumOp{}, 0.0, smem);
  ws = block_reduce(ws, SumOp{}, 0.0, smem);
  if (threadIdx.x == 0) {
    partial[2 * blockIdx.x] = ls;
    partial[2 * blockIdx.x + 1] = ws;
  }
}

// Sum of the class weights (f64), for label smoothing: one block.
__global__ void __launch_bounds__(kReduceThreads) weight_total_kernel(const float* __restrict__ w, int64_t classes,
                                                                       double* __restrict__ out) {
  __shared__ double smem[kReduceThreads / 32];
  double v = 0;
  for (int64_t c = threadIdx.x; c < classes; c += kReduceThreads) v += static_cast<double>(w[c]);
  v = block_reduce(v, SumOp{}, 0.0, smem);
  if (threadIdx.x == 0) *out = v;
}

// First position whose target is neither ignore_index nor in [0, classes) (npos when none).
__global__ void __launch_bounds__(kReduceThreads) invalid_target_kernel(const int64_t* __restrict__ tgt, int64_t npos,
                                                                         int64_t classes, int64_t ignore,
                                                                         int64_t* __restrict__ partial) {
  __shared__ int64_t smem[kReduceThreads / 32];
  int64_t v = npos;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  // A thread's positions ascend: its first hit is its smallest.
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < npos; i += step) {
    const int64_t t = tgt[i];
    if (t != ignore && (t < 0 || t >= classes)) {
      v = i;
      break;
    }
  }
  v = block_reduce(v, MinOp{}, npos, smem);
  if (threadIdx.x == 0) partial[blockIdx.x] = v;
}

__global__ void __launch_bounds__(kReduceThreads) min_partials_kernel(const int64_t* __restrict__ partial, int nb,
                                                                       int64_t identity, int64_t* __restrict__ out) {
  __shared__ int64_t smem[kReduceThreads / 32];
  int64_t v = identity;
  for (int i = static_cast<int>(threadIdx.x); i < nb; i += kReduceThreads) v = partial[i] < v ? partial[i] : v;
  v = block_reduce(v, MinOp{}, identity, smem);
  if (threadIdx.x == 0) *out = v;
}

// ============================================================================================
// Cross-entropy: positions of [n, classes, inner] logits, class c of a position at c * inner.
// ============================================================================================

struct CeArgs {
  int64_t n = 0, classes = 0, inner = 1, ignore = -100;
  float eps = 0;                        // label smoothing
  double w_total = 0;                   // sum of the class weights when no device total
  const double* w_total_dev = nullptr;  // the device total of the weights (label smoothing with weights)
  int tpr = 32;                         // threads per position: 1, 32 or kReduceThreads
};

// Combines v over the tpr threads of a position (tpr is uniform over the launch).
template <typename T, typename Op>
__device__ __forceinline__ T position_reduce(T v, Op op, T identity, int tpr, T* smem) {
  if (tpr == 1) return v;
  if (tpr == 32) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
  }
  return block_reduce(v, op, identity, smem);
}

template <typename T>
__global__ void __launch_bounds__(kReduceThreads) ce_forward_kernel(const T* __restrict__ x, const int64_t* __restrict__ tgt,
                                                                    const float* __restrict__ w, CeArgs a,
                                                                    float* __restrict__ loss, float* __restrict__ mout,
                                                                    float* __restrict__ lout) {
  __shared__ float fsm[kReduceThreads / 32];
  __shared__ double dsm[kReduceThreads / 32];
  const int per_block = kReduceThreads / a.tpr;
  const int lane = static_cast<int>(threadIdx.x) % a.tpr;
  const int64_t npos = a.n * a.inner;
  const double wd = a.w_total_dev ? *a.w_total_dev : a.w_total;
  const bool smoothing = a.eps != 0.0f;
  // Every thread runs every iteration (the reductions synchronize the block when tpr is 256).
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * per_block; base < npos;
       base += static_cast<int64_t>(gridDim.x) * per_block) {
    const int64_t pos = base + static_cast<int>(threadIdx.x) / a.tpr;
    const bool active = pos < npos;
    const int64_t t = active ? tgt[pos] : a.ignore;
    const bool counted = active && t != a.ignore && t >= 0 && t < a.classes;
    const int64_t ni = active ? pos / a.inner : 0, j = active ? pos - ni * a.inner : 0;
    const T* xr = x + ni * a.classes * a.inner + j;
    // Online max and sum of e^(x - max) over this thread's classes.
    float mt = -INFINITY, st = 0.0f;
    double swx = 0;  // sum of w_c x_c, for label smoothing
    if (counted) {
      for (int64_t c = lane; c < a.classes; c += a.tpr) {
        const float v = static_cast<float>(xr[c * a.inner]);
        if (v > mt) {
          st = st * expf(mt - v) + 1.0f;
          mt = v;
        } else if (v != -INFINITY) {
          // A -inf logit (a masked class) adds e^-inf = 0; while mt is still -inf, e^(v - mt)
          // would be e^NaN and poison the row. NaN logits still reach here and propagate.
          st += expf(v - mt);
        }
        if (smoothing) swx += static_cast<double>(w ? w[c] : 1.0f) * static_cast<double>(v);
      }
    }
    const float m = position_reduce(mt, MaxOp{}, -INFINITY, a.tpr, fsm);
    const float s = position_reduce(st == 0.0f ? 0.0f : st * expf(mt - m), SumOp{}, 0.0f, a.tpr, fsm);
    if (smoothing) swx = position_reduce(swx, SumOp{}, 0.0, a.tpr, dsm);
    if (!active || lane != 0) continue;
    if (!counted) {
      loss[pos] = mout[pos] = lout[pos] = 0.0f;
      continue;
    }
    const float logs = logf(s);
    const float w_t = w ? w[t] : 1.0f;
    // sum_c w_c (m - x_c) = W m - sum_c w_c x_c, in f64 (the terms are all >= 0 on the CPU).
    const float smooth = smoothing ? static_cast<float>(wd * static_cast<double>(m) - swx) : 0.0f;
    loss[pos] = math::cross_entropy_loss<float>(m - static_cast<float>(xr[t * a.inner]), logs, w_t, smooth,
                                                static_cast<float>(wd), a.eps, static_cast<float>(a.classes));
    mout[pos] = m;
    lout[pos] = logs;
  }
}

template <typename T>
__global__ void __launch_bounds__(kReduceThreads) ce_backward_kernel(const T* __restrict__ x, const int64_t* __restrict__ tgt,
                                                                     const float* __restrict__ w, CeArgs a,
                                                                     const float* __restrict__ saved_m,
                                                                     const float* __restrict__ saved_logs,
                                                                     const float* __restrict__ g, bool g_per_position,
                                                                     float scale, T* __restrict__ gx) {
  const int per_block = kReduceThreads / a.tpr;
  const int lane = static_cast<int>(threadIdx.x) % a.tpr;
  const int64_t npos = a.n * a.inner;
  const float wf = static_cast<float>(a.w_total_dev ? *a.w_total_dev : a.w_total);
  const float cn = static_cast<float>(a.classes);
  // No block-wide synchronization here: threads past the end just stop.
  for (int64_t pos = static_cast<int64_t>(blockIdx.x) * per_block + static_cast<int>(threadIdx.x) / a.tpr; pos < npos;
       pos += static_cast<int64_t>(gridDim.x) * per_block) {
    const int64_t ni = pos / a.inner, j = pos - ni * a.inner;
    const int64_t off = ni * a.classes * a.inner + j;
    const T* xr = x + off;
    T* gr = gx + off;
    const int64_t t = tgt[pos];
    if (t == a.ignore || t < 0 || t >= a.classes) {  // exactly 0, even where e^x would overflow
      for (int64_t c = lane; c < a.classes; c += a.tpr) gr[c * a.inner] = static_cast<T>(0.0f);
      continue;
    }
    const float s = (g_per_position ? g[pos] : g[0]) * scale;
    const float w_t = w ? w[t] : 1.0f;
    const float ca = s * ((1.0f - a.eps) * w_t + a.eps * wf / cn);
    const float cb = s * a.eps / cn;
    const float target_term = s * (1.0f - a.eps) * w_t;
    const float m = saved_m[pos], logs = saved_logs[pos];
    for (int64_t c = lane; c < a.classes; c += a.tpr) {
      const float p = expf((static_cast<float>(xr[c * a.inner]) - m) - logs);
      float v = math::cross_entropy_grad(p, ca, w ? cb * w[c] : cb);
      if (c == t) v -= target_term;
      gr[c * a.inner] = static_cast<T>(v);
    }
  }
}

// Launch geometry of the cross-entropy kernels.
int threads_per_position(const ClassLossArgs& args) {
  if (args.inner > 1 && args.classes < 1024) return 1;
  return args.classes >= 1024 ? kReduceThreads : 32;
}

// The kernels' arguments without class weights; with them and label smoothing the host also
// points w_total_dev at the weights' device total (ce_args).
CeArgs ce_launch_args(const ClassLossArgs& args) {
  CeArgs a;
  a.n = args.n;
  a.classes = args.classes;
  a.inner = args.inner;
  a.ignore = args.ignore_index;
  a.eps = static_cast<float>(args.label_smoothing);
  a.w_total = static_cast<double>(args.classes);
  a.tpr = threads_per_position(args);
  return a;
}

int position_blocks(int64_t npos, int tpr) {
  const int64_t per_block = kReduceThreads / tpr;
  const int64_t b = (npos + per_block - 1) / per_block;
  return static_cast<int>(b < 1 ? 1 : (b > (int64_t{1} << 30) ? (int64_t{1} << 30) : b));
}

// ============================================================================================
// NLL loss: one thread per position.
// ============================================================================================

template <typename T>
__global__ void __launch_bounds__(kThreads) nll_forward_kernel(const T* __restrict__ lp, const int64_t* __restrict__ tgt,
                                                               const float* __restrict__ w, int64_t npos, int64_t classes,
                                                               int64_t inner, int64_t ignore, float* __restrict__ loss) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t pos = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; pos < npos; pos += step) {
    const int64_t t = tgt[pos];
    if (t == ignore || t < 0 || t >= classes) {
      loss[pos] = 0.0f;
      continue;
    }
    const int64_t ni = pos / inner, j = pos - ni * inner;
    loss[pos] = -(w ? w[t] : 1.0f) * static_cast<float>(lp[(ni * classes + t) * inner + j]);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) nll_backward_kernel(const int64_t* __restrict__ tgt, const float* __restrict__ w,
                                                                const float* __restrict__ g, bool g_per_position,
                                                                float scale, int64_t npos, int64_t classes,
                                                                int64_t inner, int64_t ignore, T* __restrict__ gx) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t pos = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; pos < npos; pos += step) {
    const int64_t t = tgt[pos];
    if (t == ignore || t < 0 || t >= classes) continue;
    const int64_t ni = pos / inner, j = pos - ni * inner;
    gx[(ni * classes + t) * inner + j] =
        static_cast<T>(-(w ? w[t] : 1.0f) * (g_per_position ? g[pos] : g[0]) * scale);
  }
}

// ============================================================================================
// Element-wise losses.
// ============================================================================================

template <typename T>
struct BceF {
  __device__ float operator()(T x, T y, T pw) const {
    return math::bce_with_logits<float>(static_cast<float>(x), static_cast<float>(y), static_cast<float>(pw));
  }
};

template <typename T>
struct BceGradF {
  float scale;
  bool input;  // d/dx, else d/dy
  __device__ T operator()(T x, T y, T pw, T g) const {
    const float gs = static_cast<float>(g) * scale;
    const float xf = static_cast<float>(x), yf = static_cast<float>(y), pf = static_cast<float>(pw);
    return static_cast<T>(input ? math::bce_with_logits_grad_input<float>(gs, xf, yf, pf)
                                : math::bce_with_logits_grad_target<float>(gs, xf, yf, pf));
  }
};

template <typename T>
struct SquaredErrorF {
  __device__ T operator()(T a, T b) const {
    return static_cast<T>(math::squared_error<float>(static_cast<float>(a), static_cast<float>(b)));
  }
};

template <typename T>
__global__ void __launch_bounds__(kReduceThreads) squared_error_partials_kernel(const T* __restrict__ a,
                                                                                 const T* __restrict__ b, int64_t n,
                                                                                 double* __restrict__ partial) {
  __shared__ double smem[kReduceThreads / 32];
  double v = 0;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    v += static_cast<double>(math::squared_error<float>(static_cast<float>(a[i]), static_cast<float>(b[i])));
  v = block_reduce(v, SumOp{}, 0.0, smem);
  if (threadIdx.x == 0) partial[blockIdx.x] = v;
}

}  // namespace

// The host side: not compiled by the CPU emulator (tests/simt/simt.h), whose tests launch the
// kernels above themselves.
#if !defined(TRIDENT_SIMT)
namespace {

cudaStream_t stream_of(const Tensor& t) { return current_stream(t.device().index).handle(); }

// f32 and contiguous (weights, upstream gradients: small tensors), or undefined.
Tensor f32_contiguous(const Tensor& t) { return t.defined() ? t.to(kF32).contiguous() : t; }

// Runs stage two on `partial` ([nb, width] doubles on the device) and copies the `width` totals
// back: the copy synchronizes the stream (the contracts return host numbers).
std::vector<double> finish_totals(const Tensor& partial, int nb, int width) {
  const Tensor out = empty_on({width}, kF64, partial.device());
  sum_partials_kernel<<<1, kReduceThreads, 0, stream_of(partial)>>>(partial.data<double>(), nb, width, out.data<double>());
  TRIDENT_CUDA_KERNEL_CHECK();
  return out.to(Device::cpu()).to_vector<double>();
}

// (loss_sum, total_weight) of the per-position losses.
std::pair<double, double> class_totals(const Tensor& loss, const Tensor& tgt, const Tensor& w, int64_t ignore) {
  const int64_t npos = loss.numel();
  if (npos == 0) return {0.0, 0.0};
  const int nb = partial_blocks(npos);
  const Tensor partial = empty_on({nb, 2}, kF64, loss.device());
  class_totals_kernel<<<nb, kReduceThreads, 0, stream_of(loss)>>>(loss.data<float>(), tgt.data<int64_t>(),
                                                                   w.defined() ? w.data<float>() : nullptr, npos, ignore,
                                                                   partial.data<double>());
  TRIDENT_CUDA_KERNEL_CHECK();
  const std::vector<double> r = finish_totals(partial, nb, 2);
  return {r[0], r[1]};
}

CeArgs ce_args(const ClassLossArgs& args, const Tensor& w32, Tensor& w_total_holder) {
  CeArgs a = ce_launch_args(args);
  if (w32.defined() && args.label_smoothing != 0.0 && args.classes > 0) {
    // W stays on the device (a host copy would synchronize).
    w_total_holder = empty_on({1}, kF64, w32.device());
    weight_total_kernel<<<1, kReduceThreads, 0, stream_of(w32)>>>(w32.data<float>(), args.classes,
                                                                   w_total_holder.data<double>());
    TRIDENT_CUDA_KERNEL_CHECK();
    a.w_total_dev = w_total_holder.data<double>();
  }
  return a;
}

}  // namespace

// ---- class losses ----

int64_t first_invalid_target(const Tensor& target_in, int64_t classes, int64_t ignore_index) {
  const Tensor t = target_in.contiguous();
  const int64_t npos = t.numel();
  if (npos == 0) return -1;
  DeviceGuard guard(t.device().index);
  const cudaStream_t s = stream_of(t);
  const int nb = partial_blocks(npos);
  const Tensor partial = empty_on({nb}, kI64, t.device());
  const Tensor out = empty_on({1}, kI64, t.device());
  invalid_target_kernel<<<nb, kReduceThreads, 0, s>>>(t.data<int64_t>(), npos, classes, ignore_index,
                                                      partial.data<int64_t>());
  TRIDENT_CUDA_KERNEL_CHECK();
  min_partials_kernel<<<1, kReduceThreads, 0, s>>>(partial.data<int64_t>(), nb, npos, out.data<int64_t>());
  TRIDENT_CUDA_KERNEL_CHECK();
  const int64_t first = out.item<int64_t>();  // synchronizes: the wrapper throws on the host
  return first == npos ? -1 : first;
}

CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& target, const Tensor& weight,
                                          const ClassLossArgs& args) {
  const Tensor x = logits.contiguous(), t = target.contiguous(), w = f32_contiguous(weight);
  const int64_t npos = args.n * args.inner;
  CrossEntropyForward out;
  out.loss = empty_on({npos}, kF32, x.device());
  out.row_max = empty_on({npos}, kF32, x.device());
  out.row_logsum = empty_on({npos}, kF32, x.device());
  if (npos == 0) return out;
  DeviceGuard guard(x.device().index);
  Tensor w_total;
  const CeArgs a = ce_args(args, w, w_total);
  TRIDENT_DISPATCH_CUDA_FLOATING(x.dtype(), "cross_entropy", [&] {
    using T = scalar_t;
    ce_forward_kernel<T><<<position_blocks(npos, a.tpr), kReduceThreads, 0, stream_of(x)>>>(
        x.data<T>(), t.data<int64_t>(), w.defined() ? w.data<float>() : nullptr, a, out.loss.data<float>(),
        out.row_max.data<float>(), out.row_logsum.data<float>());
  });
  TRIDENT_CUDA_KERNEL_CHECK();
  std::tie(out.loss_sum, out.total_weight) = class_totals(out.loss, t, w, args.ignore_index);  // synchronizes
  return out;
}

Tensor cross_entropy_backward(const Tensor& g_in, double scale, const Tensor& logits, const Tensor& target,
                              const Tensor& weight, const Tensor& row_max, const Tensor& row_logsum,
                              const ClassLossArgs& args) {
  const Tensor x = logits.contiguous(), t = target.contiguous(), w = f32_contiguous(weight);
  const Tensor g = f32_contiguous(g_in), rm = f32_contiguous(row_max), rl = f32_contiguous(row_logsum);
  Tensor gx = empty_on({args.n, args.classes, args.inner}, x.dtype(), x.device());
  const int64_t npos = args.n * args.inner;
  if (gx.numel() == 0) return gx;
  DeviceGuard guard(x.device().index);
  Tensor w_total;
  const CeArgs a = ce_args(args, w, w_total);
  const bool per_position = g.numel() != 1 || npos == 1;
  TRIDENT_DISPATCH_CUDA_FLOATING(x.dtype(), "cross_entropy_backward", [&] {
    using T = scalar_t;
    ce_backward_kernel<T><<<position_blocks(npos, a.tpr), kReduceThreads, 0, stream_of(x)>>>(
        x.data<T>(), t.data<int64_t>(), w.defined() ? w.data<float>() : nullptr, a, rm.data<float>(), rl.data<float>(),
        g.data<float>(), per_position, static_cast<float>(scale), gx.data<T>());
  });
  TRIDENT_CUDA_KERNEL_CHECK();
  return gx;
}

NllLossForward nll_loss_forward(const Tensor& log_probs, const Tensor& target, const Tensor& weight,
                                const ClassLossArgs& args) {
  const Tensor lp = log_probs.contiguous(), t = target.contiguous(), w = f32_contiguous(weight);
  const int64_t npos = args.n * args.inner;
  NllLossForward out;
  out.loss = empty_on({npos}, kF32, lp.device());
  if (npos == 0) return out;
  DeviceGuard guard(lp.device().index);
  TRIDENT_DISPATCH_CUDA_FLOATING(lp.dtype(), "nll_loss", [&] {
    using T = scalar_t;
    nll_forward_kernel<T><<<grid_size(npos), kThreads, 0, stream_of(lp)>>>(
        lp.data<T>(), t.data<int64_t>(), w.defined() ? w.data<float>() : nullptr, npos, args.classes, args.inner,
        args.ignore_index, out.loss.data<float>());
  });
  TRIDENT_CUDA_KERNEL_CHECK();
  std::tie(out.loss_sum, out.total_weight) = class_totals(out.loss, t, w, args.ignore_index);  // synchronizes
  return out;
}

Tensor nll_loss_backward(const Tensor& g_in, double scale, const Tensor& target, const Tensor& weight,
                         const ClassLossArgs& args, DType dtype) {
  const Tensor t = target.contiguous(), w = f32_contiguous(weight), g = f32_contiguous(g_in);
  Tensor gx = zeros({args.n, args.classes, args.inner}, TensorOptions(dtype).device(t.device()));
  const int64_t npos = args.n * args.inner;
  if (gx.numel() == 0) return gx;
  DeviceGuard guard(t.device().index);
  const bool per_position = g.numel() != 1 || npos == 1;
  TRIDENT_DISPATCH_CUDA_FLOATING(dtype, "nll_loss_backward", [&] {
    using T = scalar_t;
    nll_backward_kernel<T><<<grid_size(npos), kThreads, 0, stream_of(t)>>>(
        t.data<int64_t>(), w.defined() ? w.data<float>() : nullptr, g.data<float>(), per_position,
        static_cast<float>(scale), npos, args.classes, args.inner, args.ignore_index, gx.data<T>());
  });
  TRIDENT_CUDA_KERNEL_CHECK();
  return gx;
}

// ---- binary cross-entropy with logits ----

namespace {
Tensor pos_weight_or_one(const Tensor& pw, const Tensor& x) {
  return pw.defined() ? pw : ones({}, TensorOptions(x.dtype()).device(x.device()));
}
}  // namespace

Tensor bce_with_logits(const Tensor& x, const Tensor& y, const Tensor& pw_in) {
  const Tensor pw = pos_weight_or_one(pw_in, x);
  Tensor out = empty_on(x.sizes(), kF32, x.device());
  TRIDENT_DISPATCH_CUDA_FLOATING(x.dtype(), "binary_cross_entropy_with_logits", [&] {
    using T = scalar_t;
    elementwise<float, T, T, T>(out, {x, y, pw}, BceF<T>{});
  });
  return out;
}

std::pair<Tensor, Tensor> bce_with_logits_backward(const Tensor& g_in, double scale, const Tensor& x, const Tensor& y,
                                                   const Tensor& pw_in, bool need_x, bool need_y) {
  const Tensor pw = pos_weight_or_one(pw_in, x);
  const Tensor g = g_in.to(x.dtype());
  std::pair<Tensor, Tensor> r;
  TRIDENT_DISPATCH_CUDA_FLOATING(x.dtype(), "binary_cross_entropy_with_logits_backward", [&] {
    using T = scalar_t;
    auto run = [&](bool input) {
      Tensor out = empty_on(x.sizes(), x.dtype(), x.device());
      elementwise<T, T, T, T, T>(out, {x, y, pw, g}, BceGradF<T>{static_cast<float>(scale), input});
      return out;
    };
    if (need_x) r.first = run(true);
    if (need_y) r.second = run(false);
  });
  return r;
}

// ---- squared error ----

Tensor squared_error(const Tensor& a, const Tensor& b) {
  Tensor out = empty_on(broadcast_shapes(a.sizes(), b.sizes(), "mse_loss"), a.dtype(), a.device());
  TRIDENT_DISPATCH_CUDA_FLOATING(a.dtype(), "mse_loss", [&] {
    using T = scalar_t;
    elementwise<T, T, T>(out, {a, b}, SquaredErrorF<T>{});
  });
  return out;
}

double squared_error_sum(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = a_in.contiguous(), b = b_in.contiguous();
  const int64_t n = a.numel();
  if (n == 0) return 0.0;
  DeviceGuard guard(a.device().index);
  const int nb = partial_blocks(n);
  const Tensor partial = empty_on({nb}, kF64, a.device());
  TRIDENT_DISPATCH_CUDA_FLOATING(a.dtype(), "mse_loss", [&] {
    using T = scalar_t;
    squared_error_partials_kernel<T><<<nb, kReduceThreads, 0, stream_of(a)>>>(a.data<T>(), b.data<T>(), n,
                                                                             partial.data<double>());
  });
  TRIDENT_CUDA_KERNEL_CHECK();
  return finish_totals(partial, nb, 1)[0];  // synchronizes: a host number by contract
}

#endif  // !TRIDENT_SIMT

}  // namespace trident::cuda
