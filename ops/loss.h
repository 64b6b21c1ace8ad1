// Loss functions, differentiable, with PyTorch 1.13's semantics (torch.nn.functional).
//
// Reduction: None keeps one loss per element/position; Sum adds them; Mean divides the sum by
// the element count (mse, bce) or, for the class losses, by the total weight of the targets
// that are not ignore_index (their count without class weights). A Mean over no targets (an
// empty batch, or every target ignored) is NaN (0 / 0), as in PyTorch 1.13, and its gradient
// is zero. Mean and Sum return a 0-dim tensor of the input's dtype.
//
// cross_entropy(logits, target, options)
//   logits [N, C] or [N, C, d1, ..., dk] (class dim 1) or [C] (one sample); any floating dtype
//   (f16/bf16 computed in f32). target: i64 class indices of shape [N] / [N, d1, ..., dk] / []
//   (class probabilities as targets are not supported). Each target is in [0, C) or equals
//   ignore_index (its position then contributes 0 and is left out of the mean); anything else
//   throws an Error naming the target value, its position and C.
//   loss = (1 - eps) * w[t] * (-log p_t) + (eps / C) * sum_c w[c] * (-log p_c),
//   p = softmax(logits) over the class dim, eps = label_smoothing in [0, 1] (torch 1.13's
//   formula, including with weights), w = optional class weights [C] (all 1 when undefined).
//   Implemented as one fused kernel (log-softmax and NLL in two sweeps per row; nothing of
//   size [N, C] is written in forward); backward writes softmax - onehot (smoothed,
//   weighted), scaled by the upstream gradient.
//
// nll_loss(log_probs, target, options): the same shapes and target rules; loss = -w[t] *
//   log_probs[t].
//
// mse_loss(input, target, reduction): (input - target)^2; the two broadcast together (PyTorch
//   allows it with a warning); same dtype. Both get gradients.
//
// binary_cross_entropy_with_logits(logits, target, reduction, pos_weight):
//   loss = -[pw * y * log sigmoid(x) + (1 - y) * log(1 - sigmoid(x))], computed in the stable
//   form (1 - y) x + (1 + (pw - 1) y) (max(-x, 0) + log1p(exp(-|x|))). target has logits'
//   shape; pos_weight (optional) broadcasts to it (typically [C] for [N, C] logits). Gradients
//   flow to logits and target.
//
// Class weights and pos_weight are constants: passing one that requires grad is an error (as
// in PyTorch, which has no derivative for them). Dtypes must match the input's.
#pragma once

#include "core/tensor.h"

namespace trident {

enum class Reduction { None, Mean, Sum };

struct CrossEntropyOptions {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  Tensor weight;  // [C] class weights, or undefined
};

struct NllLossOptions {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
  Tensor weight;  // [C] class weights, or undefined
};

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {});
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NllLossOptions& options = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::Mean, const Tensor& pos_weight = {});

const char* reduction_name(Reduction r);

}  // namespace trident
