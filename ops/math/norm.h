// Per-element math of layer norm and batch norm (ops/norm.h), shared by the CPU kernels and
// the CUDA kernels. Forward and backward side by side.
#pragma once

#include <cmath>

#include "core/macros.h"

namespace trident::math {

// 1 / sqrt(var + eps), the statistic both norms save for backward.
template <typename T>
TRIDENT_INLINE T norm_rstd(T var, T eps) { return T(1) / std::sqrt(var + eps); }

// ---- layer norm: one row of N elements with mean mu and rstd r; weight w_j, bias b_j ----
// y_j = (x_j - mu) r w_j + b_j
template <typename T>
TRIDENT_INLINE T layer_norm_value(T x, T mu, T r, T w, T b) { return (x - mu) * r * w + b; }
// With xhat_j = (x_j - mu) r, dy_j = g_j w_j, a = mean_j(dy_j), c = mean_j(dy_j xhat_j):
// dx_j = r (dy_j - a - xhat_j c). (dw_j = sum over rows of g_j xhat_j, db_j = sum of g_j.)
template <typename T>
TRIDENT_INLINE T layer_norm_grad(T dy, T xhat, T r, T a, T c) { return r * (dy - a - xhat * c); }

// ---- batch norm: channel statistics folded into per-channel coefficients ----
// Forward: y = (x - mean) rstd w + b = (x - mean) scale + b with scale = rstd w. (PyTorch's CPU
// kernel folds the mean into the shift, x scale + (b - mean scale); subtracting first keeps the
// precision when |mean| is large against the spread.)
template <typename T>
TRIDENT_INLINE T batch_norm_value(T x, T mean, T scale, T b) { return (x - mean) * scale + b; }
// Backward over the M = N * spatial elements of a channel, with xhat = (x - mean) rstd:
//   training: dx = w rstd / M (M g - sum g - xhat sum(g xhat))
//   eval:     dx = w rstd g    (the running statistics are constants)
// Both are dx = A g + B (x - mean) + D per channel:
//   A = w rstd, B = -(w rstd^2 / M) sum(g xhat), D = -(w rstd / M) sum g   (B = D = 0 in eval).
template <typename T>
TRIDENT_INLINE T batch_norm_grad(T g, T x, T mean, T A, T B, T D) { return A * g + B * (x - mean) + D; }

}  // namespace trident::math
