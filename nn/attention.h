// Multi-head self-attention on the fused attention op: one projection to queries, keys and
// values ([3E, E]), heads of E / H dims, scaled dot-product attention (causal or not, with an
// optional mask), dropout on the attention probabilities in training, and an output
// projection. Input and output [B, T, E].
#pragma once

#include <memory>

#include "core/rng.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace trident::nn {

struct MultiheadSelfAttentionOptions {
  bool causal = false;
  double attn_dropout = 0.0;
  bool bias = true;
};

class MultiheadSelfAttention : public UnaryModule {
 public:
  MultiheadSelfAttention(int64_t embed_dim, int64_t num_heads, MultiheadSelfAttentionOptions options = {},
                         DType dtype = DType::F32, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
  // attn_mask broadcasts to [B, H, T, T]: bool (true = attend) or additive.
  Tensor forward(const Tensor& x, const Tensor& attn_mask);
  int64_t embed_dim, num_heads;
  MultiheadSelfAttentionOptions options;
  Generator* generator;  // for attention dropout
  std::shared_ptr<Linear> qkv, proj;

 protected:
  std::string extra_repr() const override;
};

}  // namespace trident::nn
