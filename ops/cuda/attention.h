// CUDA kernels of fused attention: the contract of ops/cpu/attention.h (shapes, mask, causal,
// dropout stream, zero output for a query that sees no key) on tensors on a CUDA device in f32,
// f16 and bf16, computing in f32 (NOTE [CUDA dtypes]). Differences from the CPU kernels:
//   - f16 and bf16 run natively (the CPU computes them through f32 copies); lse is always f32,
//     whatever q's dtype, since backward rebuilds the probabilities from it;
//   - D and Dv (the head dims of q/k and of v) must be at most kMaxHeadDim (128), else Error.
// NOTE [Flash attention on CUDA] in ops/cuda/attention_common.cuh says how the kernels work.
#pragma once

#include "core/tensor.h"
#include "ops/cpu/attention.h"

namespace trident::cuda {

using cpu::AttentionGrads;
using cpu::AttentionParams;

constexpr int64_t kMaxHeadDim = 128;

Tensor attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                         const AttentionParams& p, Tensor& lse);

AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& mask, const Tensor& out, const Tensor& lse, const AttentionParams& p,
                                  bool want_dmask);

}  // namespace trident::cuda
