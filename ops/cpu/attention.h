// CPU kernels of fused attention (see ops/attention.h for the contract).
#pragma once

#include "core/rng.h"
#include "core/tensor.h"

namespace trident::cpu {

struct AttentionParams {
  double scale = 1.0;
  double dropout_p = 0.0;
  bool causal = false;
  PhiloxState rng;  // used when dropout_p > 0
};

// q, k, v: [BH, T, D] views with unit inner stride (any row and batch strides). mask: undefined,
// or broadcast to [lead..., Tq, Tk] with prod(lead) = BH (any strides, stride 0 allowed), bool or
// q's dtype.
// Returns out [BH, Tq, Dv] and fills lse [BH, Tq] (the log-sum-exp of each row's scores). f32,
// f64, or bf16 (below).
Tensor attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                         const AttentionParams& p, Tensor& lse);

struct AttentionGrads {
  Tensor dq, dk, dv, dmask;  // dmask ([BH, Tq, Tk]) only when want_dmask
};
AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& mask, const Tensor& out, const Tensor& lse, const AttentionParams& p,
                                  bool want_dmask);

// bf16 q, k, v (and an additive mask) on the bf16 GEMM kernels (NOTE [bf16 attention on the
// CPU]; an error when bf16_gemm_kernel() is None): out and the gradients bf16, lse f32. The two
// above pass bf16 here; f16 is not accepted (ops/attention.cpp widens it).
Tensor attention_forward_bf16(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                              const AttentionParams& p, Tensor& lse);
AttentionGrads attention_backward_bf16(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& mask, const Tensor& out, const Tensor& lse, const AttentionParams& p,
                                       bool want_dmask);

}  // namespace trident::cpu
