// Embedding: a lookup table [num_embeddings, embedding_dim], initialized N(0, 1) with the
// padding row (if any) zeroed; its gradient never reaches the padding row (PyTorch's rule).
#pragma once

#include <optional>

#include "core/rng.h"
#include "nn/module.h"

namespace trident::nn {

class Embedding : public UnaryModule {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt,
            DType dtype = DType::F32, Generator* gen = nullptr);
  // indices: i64 or i32 of any shape; result: indices.shape + [embedding_dim].
  Tensor forward(const Tensor& indices) override;
  int64_t num_embeddings, embedding_dim;
  std::optional<int64_t> padding_idx;
  Tensor weight;

 protected:
  std::string extra_repr() const override;
};

}  // namespace trident::nn
