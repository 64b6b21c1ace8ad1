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
// linear_cross_entropy(hidden, weight, bias, target, options)
//   = cross_entropy(linear(hidden, weight[:V], bias[:V]), target, {reduction, ignore_index}),
//   the loss of a classifier (a language model's output layer) computed without its logits:
//   hidden [..., C], weight [V', C] (a padded table: only its first V = options.vocab_size rows
//   are classes; -1: all V'), bias [V'] or undefined, target i64 [...] (hidden's shape without
//   C), each in [0, V) or ignore_index. Gradients reach hidden, weight and bias (zero in the rows
//   past V). Same reductions, NaN for a Mean over no targets, and out-of-range targets named, as
//   cross_entropy. Under autocast it is a product (hidden, weight and bias lowered to the half
//   type) whose loss is f32; on the CPU's bf16 kernels an f32 weight and bias are not copied to
//   bf16 but rounded tile by tile as they are read, and their gradients are the f32 sums (what
//   the lowered op's bf16 gradients round).
//   Tiled (options.impl; the CPU: NOTE [Linear cross-entropy] in ops/cpu/linear_cross_entropy.cpp),
//   the logits exist one tile at a time: forward runs the product once and keeps each row's
//   log-sum-exp, backward runs it again and forms the gradient tile by tile; nothing of size
//   [N, V] is stored, and rows whose target is ignore_index are left out of the products. bf16
//   inputs take the bf16 GEMM kernels (with none in use, and for f16, it computes in f32 on
//   widened copies); the logits are f32 sums there, never rounded to bf16, so the loss differs
//   from the composed bf16 one by that rounding.
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

// How linear_cross_entropy computes: Tiled, the CPU kernels (NOTE [Linear cross-entropy]);
// Composed, linear then cross_entropy; Auto, Tiled on the CPU where it costs no time (bf16 on a
// bf16 GEMM kernel: GPT-2's head forward 1.3x faster, forward + backward 1.03x, without the
// logits and their gradient in memory) or no gradient will be asked (evaluation: the logits
// never stored, forward 1.03-1.1x in f32), Composed otherwise (f32 and f64 training, where the
// fourth product costs more than the memory traffic saved: 332-345 against 285 ms for GPT-2's f32
// head; and every device but the CPU). Tiled on another device is an error.
enum class LinearCrossEntropyImpl { Auto, Tiled, Composed };
struct LinearCrossEntropyOptions {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
  int64_t vocab_size = -1;  // classes: the first vocab_size rows of weight; -1: all of them
  LinearCrossEntropyImpl impl = LinearCrossEntropyImpl::Auto;
};
Tensor linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& bias, const Tensor& target,
                            const LinearCrossEntropyOptions& options = {});

const char* reduction_name(Reduction r);

}  // namespace trident
