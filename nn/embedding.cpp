#include "nn/embedding.h"

#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "core/factory.h"
#include "nn/init.h"
#include "ops/index.h"

namespace trident::nn {

Embedding::Embedding(int64_t n, int64_t d, std::optional<int64_t> pad, DType dtype, Generator* gen)
    : UnaryModule("Embedding"), num_embeddings(n), embedding_dim(d), padding_idx(pad) {
  TRIDENT_CHECK(n >= 0 && d >= 0, "Embedding: sizes must be >= 0, got ", n, " x ", d);
  if (pad) {
    if (*pad < 0) *padding_idx += n;  // PyTorch accepts a negative padding index
    TRIDENT_CHECK(*padding_idx >= 0 && *padding_idx < n, "Embedding: padding_idx ", *pad, " out of range for ", n,
                  " embeddings");
  }
  weight = register_parameter("weight", empty({n, d}, dtype));
  init::normal_(weight, 0.0, 1.0, gen);
  if (padding_idx) {
    NoGradGuard no_grad;
    fill_(select(weight.detach(), 0, *padding_idx), 0.0);
  }
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(weight, indices, padding_idx); }

std::string Embedding::extra_repr() const {
  return detail::str(num_embeddings, ", ", embedding_dim, padding_idx ? detail::str(", padding_idx=", *padding_idx) : "");
}

}  // namespace trident::nn
