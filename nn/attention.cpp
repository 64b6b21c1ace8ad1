#include "nn/attention.h"

#include "ops/attention.h"
#include "ops/index.h"
#include "ops/shape.h"

namespace trident::nn {

MultiheadSelfAttention::MultiheadSelfAttention(int64_t e, int64_t h, MultiheadSelfAttentionOptions opt, DType dtype,
                                               Generator* gen)
    : UnaryModule("MultiheadSelfAttention"), embed_dim(e), num_heads(h), options(opt), generator(gen) {
  TRIDENT_CHECK(h > 0 && e % h == 0, "MultiheadSelfAttention: num_heads ", h, " must divide embed_dim ", e);
  qkv = register_module("qkv", std::make_shared<Linear>(e, 3 * e, opt.bias, dtype, gen));
  proj = register_module("proj", std::make_shared<Linear>(e, e, opt.bias, dtype, gen));
}

Tensor MultiheadSelfAttention::forward(const Tensor& x, const Tensor& attn_mask) {
  TRIDENT_CHECK(x.dim() == 3 && x.size(2) == embed_dim, "MultiheadSelfAttention: expected input [B, T, ", embed_dim,
                "], got shape ", x.sizes());
  const int64_t B = x.size(0), T = x.size(1), D = embed_dim / num_heads;
  // [B, T, 3E] -> three [B, T, H, D] views -> [B, H, T, D] (no copies: the kernel reads strided rows).
  const Tensor packed = qkv->forward(x);
  const std::vector<Tensor> parts = split(packed, embed_dim, 2);
  auto heads = [&](const Tensor& t) { return transpose(view(t, {B, T, num_heads, D}), 1, 2); };
  AttentionOptions ao;
  ao.attn_mask = attn_mask;
  ao.is_causal = options.causal;
  ao.dropout_p = is_training() ? options.attn_dropout : 0.0;
  ao.generator = generator;
  const Tensor y = scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), ao);
  return proj->forward(reshape(transpose(y, 1, 2), {B, T, embed_dim}));
}

std::string MultiheadSelfAttention::extra_repr() const {
  return detail::str("embed_dim=", embed_dim, ", num_heads=", num_heads, options.causal ? ", causal" : "");
}

}  // namespace trident::nn
