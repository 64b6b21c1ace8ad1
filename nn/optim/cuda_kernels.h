// CUDA loops of the optimizer updates and of the gradient utilities (GradScaler's unscale,
// clip_grad_norm_), over lists of tensors: a few multi-tensor launches per call, not one per
// tensor (NOTE [Multi-tensor launches] in nn/optim/multi_tensor.h).
//
// NOTE [Optimizer kernels]: Optimizer::step() hands each group's parameters that have gradients
// to the optimizer's update_group() (nn/optim/optimizer.h), which splits them into batches of
// equal device, dtype and per-element functor (Optimizer::batches: the step count enters the
// functor through the bias corrections, SGD's first-step flag too). A CPU batch runs the CPU
// loops one parameter at a time (nn/optim/cpu_kernels.h); a CUDA batch runs one of the functions
// below, whose launches cover all of its parameters. The per-element functors are the CPU's
// (nn/optim/math.h), built in double on the host and cast to the parameter's type, so the GPU's
// updates follow PyTorch's order of operations exactly as the CPU's do; only sums differ in
// order (LAMB's norms, the gradient norm), in f64. Nothing here synchronizes with the host:
// LAMB's norms and trust ratios stay on the device, and the per-step scalars are kernel
// arguments.
//
// Every function takes lists of equal length; tensor i of every list is contiguous with
// p[i]'s element count and dtype, all on one CUDA device, f32 or f64 (one dtype per call);
// buffers an option does not use are passed as empty lists. They run on that device's current
// stream.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "nn/optim/math.h"

namespace trident::nn::optim::cuda {

using TensorVec = std::vector<Tensor>;

// buf is empty when f.momentum == 0.
void sgd(const TensorVec& p, const TensorVec& g, const TensorVec& buf, const math::SGDUpdate<double>& f);
// vmax is empty without amsgrad.
void adam(const TensorVec& p, const TensorVec& g, const TensorVec& m, const TensorVec& v, const TensorVec& vmax,
          const math::AdamUpdate<double>& f);
// grad_avg is non-empty when centered, buf when momentum > 0.
void rmsprop(const TensorVec& p, const TensorVec& g, const TensorVec& square_avg, const TensorVec& grad_avg,
             const TensorVec& buf, const math::RMSPropUpdate<double>& f);
// LAMB with layer adaptation (NOTE [LAMB]): one pass updates m and v and writes per-chunk f64
// sums of p^2 and r^2; a second pass sums each parameter's chunks (every block of a parameter
// sums them in the same order, so all get the same bits), takes the trust ratio and applies
// p = p - lr * ratio * r. `ratios` (f64, on the device, p.size() elements) receives each
// parameter's trust ratio. Without layer adaptation (ratio 1) one fused pass does it all and
// `ratios` is not touched (it may be undefined).
void lamb(const TensorVec& p, const TensorVec& g, const TensorVec& m, const TensorVec& v,
          const math::LambUpdate<double>& f, double lr, bool layer_adaptation, const Tensor& ratios);

// GradScaler: g = g * T(inv_scale) for every gradient, and found_inf (an f32 scalar on the same
// device, set to 0 by the caller) becomes 1 when any result is inf or NaN.
void unscale(const TensorVec& grads, double inv_scale, const Tensor& found_inf);

// clip_grad_norm_ of order 2 (f32 and f64 gradients may be mixed here): each gradient's norm
// accumulates in f64 and is rounded to its dtype, the squares of those are summed in f64, as on
// the CPU. Returns an f64 tensor of two elements on the gradients' device: the total norm and
// the clip coefficient max_norm / (total + 1e-6). Launches only.
Tensor grad_norm_and_clip_coef(const TensorVec& grads, double max_norm);
// Multiplies every gradient by the coefficient (element 1 of norm_and_coef) when it is below 1
// or NaN, as clip_grad_norm_ does; read on the device, no synchronization.
void scale_by_clip_coef(const TensorVec& grads, const Tensor& norm_and_coef);

}  // namespace trident::nn::optim::cuda
