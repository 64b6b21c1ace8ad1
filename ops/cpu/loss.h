// CPU kernels of the losses (ops/loss.h has the contract). The wrapper has checked shapes,
// dtypes and target ranges. Floating inputs may be f32, f64, f16 or bf16; f16/bf16 are
// computed in f32 and their results come back in f32 (the wrapper casts).
#pragma once

#include <utility>

#include "core/tensor.h"

namespace trident::cpu {

// Logits viewed as [n, classes, inner]; targets (i64) as [n, inner]; weight [classes] or undefined.
struct ClassLossArgs {
  int64_t n = 0, classes = 0, inner = 1;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;  // cross_entropy only
};

// The first position (row-major over target, i64 of any layout) whose target is neither a class
// in [0, classes) nor ignore_index, or -1 when every target is valid.
int64_t first_invalid_target(const Tensor& target, int64_t classes, int64_t ignore_index);

struct CrossEntropyForward {
  Tensor loss;                  // [n * inner]: the loss of each position, 0 where ignored
  Tensor row_max, row_logsum;   // [n * inner]: m and log sum e^(x - m) per position, for backward
  double loss_sum = 0;          // sum of `loss`, accumulated in f64
  double total_weight = 0;      // sum of w[target] over positions not ignored (their count without weight)
};

// Fused log-softmax + NLL (+ label smoothing): two sweeps over each row of logits, nothing of
// size [n, classes] is written.
CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& target, const Tensor& weight,
                                          const ClassLossArgs& args);
// Gradient of the logits: softmax - one-hot (smoothed, weighted), times the upstream gradient
// of each position: g[i] * scale when g has n * inner elements, g[0] * scale when it has one.
Tensor cross_entropy_backward(const Tensor& g, double scale, const Tensor& logits, const Tensor& target,
                              const Tensor& weight, const Tensor& row_max, const Tensor& row_logsum,
                              const ClassLossArgs& args);

// NOTE [Linear cross-entropy] (ops/cpu/linear_cross_entropy.cpp): cross-entropy of
// hidden [n, C] W[:vocab]^T (+ bias[:vocab]) against target [n], the logits never stored whole.
// hidden, weight [V', C] and bias [V'] (or undefined) are contiguous, of one dtype: f32, f64, or
// bf16 with a bf16 GEMM kernel in use; or bf16 hidden with an f32 weight and bias (autocast's
// product of f32 parameters: the weight's tiles and the bias rounded to bf16 as they are read,
// their gradients the f32 sums, not rounded). Targets are checked (each in
// [0, vocab) or ignore_index).
struct LinearCrossEntropyArgs {
  int64_t vocab = 0;  // the classes: the first `vocab` rows of weight
  int64_t ignore_index = -100;
};
struct LinearCrossEntropyForward {
  Tensor loss;                 // [n], f32 (f64 for f64 inputs): each row's loss, 0 where ignored
  Tensor row_max, row_logsum;  // [n]: m and log sum e^(x - m) of each row's logits, for backward
  double loss_sum = 0;         // sum of `loss`, accumulated in f64
  int64_t count = 0;           // rows not ignored
};
LinearCrossEntropyForward linear_cross_entropy_forward(const Tensor& hidden, const Tensor& weight, const Tensor& bias,
                                                       const Tensor& target, const LinearCrossEntropyArgs& args);
// The gradients asked for, each in its input's dtype (weight and bias of shape [V', ...], zero
// past vocab), for the upstream gradient g[i] * scale of row i (g with n elements) or g[0] * scale
// (one).
struct LinearCrossEntropyGrads {
  Tensor hidden, weight, bias;
};
LinearCrossEntropyGrads linear_cross_entropy_backward(const Tensor& g, double scale, const Tensor& hidden,
                                                      const Tensor& weight, const Tensor& bias, const Tensor& target,
                                                      const Tensor& row_max, const Tensor& row_logsum,
                                                      const LinearCrossEntropyArgs& args, bool need_hidden, bool need_weight,
                                                      bool need_bias);

struct NllLossForward {
  Tensor loss;  // [n * inner]
  double loss_sum = 0, total_weight = 0;
};
NllLossForward nll_loss_forward(const Tensor& log_probs, const Tensor& target, const Tensor& weight,
                                const ClassLossArgs& args);
// Gradient of log_probs ([n, classes, inner] elements, in `dtype`): -w[t] * g * scale at the
// target class of each position, 0 elsewhere.
Tensor nll_loss_backward(const Tensor& g, double scale, const Tensor& target, const Tensor& weight,
                         const ClassLossArgs& args, DType dtype);

// Element-wise BCE with logits: x and y have the same shape, pos_weight (optional) broadcasts to it.
Tensor bce_with_logits(const Tensor& x, const Tensor& y, const Tensor& pos_weight);
// Gradients of x and of y (each only when asked), for upstream gradient g * scale (g broadcasts).
std::pair<Tensor, Tensor> bce_with_logits_backward(const Tensor& g, double scale, const Tensor& x, const Tensor& y,
                                                   const Tensor& pos_weight, bool need_x, bool need_y);

// Element-wise (a - b)^2 over the broadcast shape.
Tensor squared_error(const Tensor& a, const Tensor& b);
// sum (a - b)^2 in f64, a and b of one shape (any layout).
double squared_error_sum(const Tensor& a, const Tensor& b);

}  // namespace trident::cpu
