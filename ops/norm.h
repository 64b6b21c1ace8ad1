// Normalization layers' functions, differentiable (PyTorch's F.layer_norm and F.batch_norm).
//
// layer_norm(x, normalized_shape, weight, bias, eps)
//   Normalizes x over its last normalized_shape.size() dims, which must equal normalized_shape:
//   y = (x - mean) / sqrt(var + eps) * weight + bias, mean and biased var per row of
//   prod(normalized_shape) elements. weight and bias (each optional: undefined = 1 / 0) have
//   shape normalized_shape and x's dtype. Fused forward (mean and rstd per row, kept for
//   backward) and fused backward for x, weight and bias. f16/bf16 compute in f32.
//
// add_layer_norm(x, residual, normalized_shape, weight, bias, eps) -> {sum, out}
//   NOTE [Fused residual layer norm]: sum = x + residual and out = layer_norm(sum, ...), as the
//   pre-LayerNorm transformer's residual stream needs them (GPT-2's block: h = x + attn(...);
//   mlp(ln_2(h)) adds to h), in one op: on CUDA one kernel reads x and residual once and writes
//   sum and out, where add then layer_norm read the stream three times and write it twice. x
//   and residual have the same shape, dtype and device (no broadcasting); sum is rounded to
//   their dtype before it is normalized, so both results equal add then layer_norm exactly.
//   One autograd node: x and residual both get d sum + layer_norm's input gradient of d out.
//
// batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)
//   x is [N, C, *] (at least 2 dims); every other tensor is [C] and optional.
//   training = true: per-channel mean and biased variance over all dims but 1 normalize x;
//     if running_mean/running_var are given they are updated in place, outside autograd:
//     running = (1 - momentum) * running + momentum * batch statistic, with the unbiased
//     variance (M / (M - 1), M = elements per channel) for running_var, as PyTorch.
//     M must be > 1 (one value per channel has no variance; M = 0 gives an empty result).
//   training = false: running_mean and running_var (required) normalize x; they are constants.
//   y = (x - mean) / sqrt(var + eps) * weight + bias; backward gives x, weight and bias their
//   gradients in both modes (in eval mode dx = g * weight / sqrt(running_var + eps)).
//   Running statistics may be f32 or x's dtype; weight and bias have x's dtype.
//
// Errors name the op and the offending shapes: normalized_shape not matching x's trailing
// dims, a residual of another shape, dtype or device, parameters of the wrong shape or dtype, x with fewer than 2 dims for batch_norm,
// missing running statistics in eval mode, one value per channel in training.
#pragma once

#include "core/tensor.h"

namespace trident {

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);

struct AddLayerNorm {
  Tensor sum;  // x + residual
  Tensor out;  // layer_norm(sum)
};
AddLayerNorm add_layer_norm(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                            const Tensor& weight = {}, const Tensor& bias = {}, double eps = 1e-5);

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);

}  // namespace trident
