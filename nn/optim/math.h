// Per-element optimizer updates, written once for the CPU loops (nn/optim/cpu_kernels.cpp) and
// the CUDA multi-tensor kernels (nn/optim/cuda_kernels.cu): no exceptions, no containers, and no branches: choices
// go through select() (ops/math/select.h), which computes both arms, so the CPU loops vectorize.
//
// Each functor is built on the host in double from the group's hyperparameters and the
// parameter's step count (the per-step scalars such as bias corrections are folded in there),
// then converted with cast<T>() to the parameter's type: f32 parameters are updated in f32
// arithmetic, as PyTorch does, so the state and the parameters evolve like PyTorch's.
// The order of operations follows PyTorch 1.13's single-tensor (for-loop) implementations
// (torch/optim/{sgd,adam,adamw,rmsprop}.py), quoted next to each functor.
#pragma once

#include <cmath>

#include "core/macros.h"
#include "ops/math/select.h"

namespace trident::nn::optim::math {

using ::trident::math::select;

// ---- SGD ----
// d = g + wd * p (when wd != 0); with momentum: buf = d on the buffer's first step, else
// buf = momentum * buf + (1 - dampening) * d; d = nesterov ? d + momentum * buf : buf;
// p = p - lr * d.
template <typename T>
struct SGDUpdate {
  T lr = 0, weight_decay = 0, momentum = 0, dampening = 0;
  bool nesterov = false;
  bool first = false;  // the momentum buffer was just created: PyTorch clones d into it

  template <typename U>
  SGDUpdate<U> cast() const {
    return {U(lr), U(weight_decay), U(momentum), U(dampening), nesterov, first};
  }
  // Only when wd != 0, as PyTorch: g + 0 * p is not g for an infinite p.
  TRIDENT_INLINE T direction(T p, T g) const { return select(weight_decay != T(0), g + weight_decay * p, g); }
  // Without momentum.
  TRIDENT_INLINE void operator()(T& p, T g) const { p = p - lr * direction(p, g); }
  // With momentum (momentum != 0).
  TRIDENT_INLINE void operator()(T& p, T g, T& buf) const {
    const T d = direction(p, g);
    buf = select(first, d, buf * momentum + (T(1) - dampening) * d);
    p = p - lr * select(nesterov, d + momentum * buf, buf);
  }
};

// ---- Adam and AdamW ----
// Adam:  g = g + wd * p (coupled decay, when wd != 0).  AdamW: p = p * (1 - lr * wd) first.
// m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2;  amsgrad: vmax = max(vmax, v)
// and vmax replaces v below;  p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
template <typename T>
struct AdamUpdate {
  T beta1 = 0, beta2 = 0, eps = 0;
  T weight_decay = 0;           // coupled (Adam); 0 for AdamW
  T decay = 1;                  // decoupled (AdamW): 1 - lr * weight_decay; 1 for Adam
  T step_size = 0;              // lr / (1 - beta1^t)
  T bias_correction2_sqrt = 1;  // sqrt(1 - beta2^t)

  template <typename U>
  AdamUpdate<U> cast() const {
    return {U(beta1), U(beta2), U(eps), U(weight_decay), U(decay), U(step_size), U(bias_correction2_sqrt)};
  }
  TRIDENT_INLINE T moments(T& p, T g, T& m, T& v) const {
    g = select(weight_decay != T(0), g + weight_decay * p, g);
    p = p * decay;
    m = m * beta1 + (T(1) - beta1) * g;
    v = v * beta2 + (T(1) - beta2) * g * g;
    return v;
  }
  TRIDENT_INLINE void apply(T& p, T m, T v) const {
    const T denom = std::sqrt(v) / bias_correction2_sqrt + eps;
    p = p - step_size * (m / denom);
  }
  // moments() first, in its own statement: in apply(p, m, moments(...)) the order in which the
  // arguments are evaluated is unspecified, and Clang read m before moments() updated it.
  TRIDENT_INLINE void operator()(T& p, T g, T& m, T& v) const {
    const T vn = moments(p, g, m, v);
    apply(p, m, vn);
  }
  // amsgrad. torch.maximum propagates NaN; so does this (the comparison is false for NaN v,
  // and a NaN vmax stays NaN).
  TRIDENT_INLINE void operator()(T& p, T g, T& m, T& v, T& vmax) const {
    const T vn = moments(p, g, m, v);
    vmax = select((vn > vmax) | (vn != vn), vn, vmax);
    apply(p, m, vmax);
  }
};

// ---- RMSProp (PyTorch's form: eps outside the square root) ----
// g = g + wd * p (when wd != 0); sq = alpha sq + (1 - alpha) g^2;
// centered: ga = alpha ga + (1 - alpha) g, avg = sqrt(sq - ga^2) + eps; else avg = sqrt(sq) + eps;
// momentum > 0: buf = momentum buf + g / avg, p = p - lr buf; else p = p - lr g / avg.
template <typename T>
struct RMSPropUpdate {
  T lr = 0, alpha = 0, eps = 0, weight_decay = 0, momentum = 0;

  template <typename U>
  RMSPropUpdate<U> cast() const {
    return {U(lr), U(alpha), U(eps), U(weight_decay), U(momentum)};
  }
  // grad_avg and buf are only touched when kCentered and kMomentum say so.
  template <bool kCentered, bool kMomentum>
  TRIDENT_INLINE void apply(T& p, T g, T& square_avg, T& grad_avg, T& buf) const {
    g = select(weight_decay != T(0), g + weight_decay * p, g);
    square_avg = square_avg * alpha + (T(1) - alpha) * g * g;
    T avg;
    if constexpr (kCentered) {
      grad_avg = grad_avg * alpha + (T(1) - alpha) * g;
      avg = std::sqrt(square_avg - grad_avg * grad_avg) + eps;
    } else {
      avg = std::sqrt(square_avg) + eps;
    }
    if constexpr (kMomentum) {
      buf = buf * momentum + g / avg;
      p = p - lr * buf;
    } else {
      p = p - lr * (g / avg);
    }
  }
};

// ---- LAMB (You et al. 2019, Algorithm 2; NOTE [LAMB] in nn/optim/lamb.h) ----
// m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2;
// r = (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) + wd * p;
// p = p - lr * trust_ratio(||p||, ||r||) * r.
// Two passes over a parameter: moments() updates m and v and yields r for the norms, then
// direction() recomputes r from the stored m, v and the unchanged p, so both passes see the
// same r without a temporary tensor.
template <typename T>
struct LambUpdate {
  T beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  T bias_correction1 = 1, bias_correction2 = 1;  // 1 - beta^t

  template <typename U>
  LambUpdate<U> cast() const {
    return {U(beta1), U(beta2), U(eps), U(weight_decay), U(bias_correction1), U(bias_correction2)};
  }
  TRIDENT_INLINE T direction(T p, T m, T v) const {
    return (m / bias_correction1) / (std::sqrt(v / bias_correction2) + eps) + weight_decay * p;
  }
  TRIDENT_INLINE T moments(T p, T g, T& m, T& v) const {
    m = m * beta1 + (T(1) - beta1) * g;
    v = v * beta2 + (T(1) - beta2) * g * g;
    return direction(p, m, v);
  }
};

// ||p|| / ||r||, and 1 when either norm is 0 (a zero-initialised parameter, or no update):
// the convention of NVIDIA's and Google's LAMB implementations. A NaN norm gives 1 as well, so
// the NaN update itself reaches the parameter instead of being hidden.
TRIDENT_INLINE double lamb_trust_ratio(double param_norm, double update_norm) {
  return (param_norm > 0.0 && update_norm > 0.0) ? param_norm / update_norm : 1.0;
}

}  // namespace trident::nn::optim::math
