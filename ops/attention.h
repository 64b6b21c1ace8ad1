// Scaled dot-product attention, fused: softmax(q k^T * scale + mask) v, with optional causal
// mask, boolean or additive mask, and dropout on the attention probabilities.
//
// Shapes: q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] with the same leading dims; the result
// is [..., Tq, Dv]. `attn_mask` broadcasts to [..., Tq, Tk]: a bool mask keeps positions where
// it is true (PyTorch 2's convention), a floating mask is added to the scores. `is_causal`
// lets query i see keys j <= i (top-left aligned, as PyTorch). A query that can see no key at
// all gets a zero output and zero gradients (PyTorch would return NaN there).
//
// The CPU kernel never holds more than a block of 64 query rows' scores per thread: forward keeps
// only the per-row log-sum-exp, and backward recomputes the probabilities from it (the
// FlashAttention recipe, with OpenBLAS GEMMs for the block products). Dropout masks come from the
// Philox stream (NOTE [Philox streams]): element (row r, key j) of batch-head b draws index
// (b * Tq + r) * Tk + j, so backward regenerates the mask instead of storing it, and restoring the
// generator state replays it.
//
// On CUDA tensors (ops/cuda/attention.h, NOTE [Flash attention on CUDA]) the same contract holds,
// with the same dropout entries for the same generator state; f16 and bf16 run natively with f32
// accumulation, and head dims (of q and of v) are limited to 128.
#pragma once

#include <optional>

#include "core/rng.h"
#include "core/tensor.h"

namespace trident {

struct AttentionOptions {
  Tensor attn_mask;               // undefined: no mask
  double dropout_p = 0.0;         // applied whenever > 0 (pass 0 in evaluation)
  bool is_causal = false;
  std::optional<double> scale;    // default 1 / sqrt(D)
  Generator* generator = nullptr; // default_generator() when null
};

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opts = {});

}  // namespace trident
