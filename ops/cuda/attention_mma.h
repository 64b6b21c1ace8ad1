// The tensor-core attention kernels (NOTE [Tensor-core attention] in attention_mma_forward.cu),
// called by attention_forward.cu and attention_backward.cu when they apply. Included by .cu
// files only.
#pragma once

#include "core/tensor.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/attention_common.cuh"

namespace trident::cuda {

// out [BH, Tq, D] (q's dtype) and lse [BH, Tq] (f32), both allocated by the caller.
void attention_mma_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                           const cpu::AttentionParams& ap, Tensor& out, Tensor& lse);

// dq, dk, dv (and dmask when defined) of g, allocated by the caller, from lse and delta =
// rowsum(dO * O) (f32, [BH, Tq] contiguous). False, with nothing launched, when q, k, v do not
// suit the kernels (attention_mma_supported) or dout's dtype is not q's (then the FMA kernels
// run); a dout whose layout does not suit them (stride 0, unaligned rows) is copied first.
bool attention_mma_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                            const attn::MaskDesc& mask, const attn::Params& p, const float* lse, const float* delta,
                            cpu::AttentionGrads& g);

}  // namespace trident::cuda
