// Per-element and per-row math of the losses (ops/loss.h), shared by the CPU kernels and the
// CUDA kernels. Forward and backward side by side.
#pragma once

#include <cmath>

#include "core/macros.h"
#include "ops/math/softmax.h"

namespace trident::math {

// ---- cross-entropy of one position (a row of C logits x, its target t) ----
// With m = max_c x_c, logs = log sum_c e^(x_c - m), the log-probability of class c is
// (x_c - m) - logs, so
//   nll    = -log p_t                    = (m - x_t) + logs
//   smooth = -sum_c w_c log p_c          = sum_c w_c (m - x_c) + W logs     (W = sum_c w_c)
//   loss   = (1 - eps) w_t nll + (eps / C) smooth                          (PyTorch 1.13)
// Every term is >= 0 (m - x_c >= 0), so nothing cancels, even for huge logits.
template <typename T>
TRIDENT_INLINE T cross_entropy_loss(T m_minus_xt, T logs, T w_t, T smooth_sum, T w_total, T eps, T num_classes) {
  const T nll = w_t * (m_minus_xt + logs);
  if (eps == T(0)) return nll;
  return (T(1) - eps) * nll + eps / num_classes * (smooth_sum + w_total * logs);
}

// d loss / d x_c = (1 - eps) w_t (p_c - [c == t]) + (eps / C) (W p_c - w_c), times the upstream
// gradient s. The kernels write it as a * p_c - b_c, then subtract the target's extra term:
//   a   = s ((1 - eps) w_t + eps W / C)
//   b_c = s (eps / C) w_c
//   at c == t, additionally - s (1 - eps) w_t.
template <typename T>
TRIDENT_INLINE T cross_entropy_grad(T p, T a, T b_c) { return a * p - b_c; }

// ---- binary cross-entropy with logits ----
// softplus(-x) = log(1 + e^-x) = max(-x, 0) + log1p(e^-|x|): no overflow for any x.
template <typename T>
TRIDENT_INLINE T softplus_neg(T x) {
  const T neg = -x > T(0) ? -x : T(0);
  return neg + std::log1p(std::exp(-std::fabs(x)));
}
// sigmoid(-x) = 1 / (1 + e^x), through e^-|x| so neither branch overflows.
template <typename T>
TRIDENT_INLINE T sigmoid_neg(T x) {
  const T e = std::exp(-std::fabs(x));
  return x >= T(0) ? e / (T(1) + e) : T(1) / (T(1) + e);
}
// loss = (1 - y) x + (1 + (pw - 1) y) softplus(-x)   (pw = 1 without pos_weight), PyTorch's
// formula: -[pw y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))].
template <typename T>
TRIDENT_INLINE T bce_with_logits(T x, T y, T pw) {
  return (T(1) - y) * x + (T(1) + (pw - T(1)) * y) * softplus_neg(x);
}
// d loss / d x = (1 - y) - (1 + (pw - 1) y) sigmoid(-x)   (= sigmoid(x) - y when pw = 1).
template <typename T>
TRIDENT_INLINE T bce_with_logits_grad_input(T g, T x, T y, T pw) {
  return g * ((T(1) - y) - (T(1) + (pw - T(1)) * y) * sigmoid_neg(x));
}
// d loss / d y = -x + (pw - 1) softplus(-x).
template <typename T>
TRIDENT_INLINE T bce_with_logits_grad_target(T g, T x, T y, T pw) {
  return g * (-x + (pw - T(1)) * softplus_neg(x));
}

// ---- mean squared error ----
template <typename T>
TRIDENT_INLINE T squared_error(T a, T b) {
  const T d = a - b;
  return d * d;
}

}  // namespace trident::math
