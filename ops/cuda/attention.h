// CUDA kernels of fused attention: the contract of ops/cpu/attention.h (shapes, mask, causal,
// dropout stream, zero output for a query that sees no key) on tensors on a CUDA device in f32,
// f16 and bf16, computing in f32 (NOTE [CUDA dtypes]). Differences from the CPU kernels:
//   - f16 and bf16 run natively (the CPU computes them through f32 copies); lse is always f32,
//     whatever q's dtype, since backward rebuilds the probabilities from it;
//   - D and Dv (the head dims of q/k and of v) must be at most kMaxHeadDim (128), else Error.
// NOTE [Flash attention on CUDA] in ops/cuda/attention_common.cuh says how the kernels work;
// f16/bf16 with head dims 64 and 128 run on the tensor cores (NOTE [Tensor-core attention] in
// ops/cuda/attention_mma_forward.cu).
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

// Whether f16/bf16 attention with head dim 64 or 128 may run on the tensor cores (NOTE
// [Tensor-core attention] in attention_mma_forward.cu); on by default, off when the environment
// sets TRIDENT_ATTENTION_TENSOR_CORES=0. Off, every case takes the f32 FMA kernels: for tests and
// benchmarks that compare the two, and as a fallback.
void set_attention_tensor_cores(bool on);
bool attention_tensor_cores();
// Whether the tensor-core kernels take these operands ([BH, T, D] each): f16 or bf16, D = Dv =
// 64 or 128, rows 16-byte aligned with unit inner stride, a device of compute capability 8.0+,
// and attention_tensor_cores(). The backward pass copies a dout that is not aligned so.
bool attention_mma_supported(const Tensor& q, const Tensor& k, const Tensor& v);

}  // namespace trident::cuda
