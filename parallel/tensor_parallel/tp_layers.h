// TensorParallelLayers: the LayerFactory (models/layer_factory.h, NOTE [Parallel layers by
// configuration]) that splits GPT-2 and BERT across a tensor-parallel group as Megatron-LM does.
// Put one in the model's config (GPT2Config::layers, BertConfig::layers) and the same model code
// runs split:
//   linear: Column -> ColumnParallelLinear, Row -> RowParallelLinear, Replicated -> the serial
//     DenseLayer (whole on every rank, computing the same values everywhere);
//   vocab_embedding -> VocabParallelEmbedding (padded to a multiple of vocab_pad_multiple x tp;
//     the padding is internal: checkpoints hold the model's own rows, NOTE [Parameter shards]);
//   tied_logits: this rank's vocabulary columns [..., V_padded / tp], columns past vocab_size
//     (padding) set to -inf so they get probability 0; a bias (BERT's decoder bias, whole on
//     every rank) enters through copy_to_region, so its gradient is all-reduced and it stays
//     identical across ranks;
//   vocab_cross_entropy -> vocab_parallel_cross_entropy (never gathers the logits);
//   full_logits gathers the columns and drops the padding (generation);
//   dropout_generator: Split sites draw from a per-rank stream seeded seed + 2718 + tp rank
//     (Megatron's offset), Replicated sites from the caller's generator, which every rank seeds
//     alike, so dropout outside split regions is the same on every rank and at every tp;
//   with sequence_parallel (NOTE [Sequence parallelism], sequence_parallel.h), the residual
//     stream holds this rank's T / tp positions: Column layers gather them, Row layers
//     reduce-scatter, residual_layer_norm -> SequenceParallelLayerNorm, scatter_sequence /
//     gather_sequence / residual_tied_logits cut and gather it, and DropoutSite::Residual draws
//     from the per-rank stream (without it: the caller's generator, as Replicated).
// At tp = 1 it gives the serial model's numbers (every mapping is the identity).
#pragma once

#include <memory>

#include "models/layer_factory.h"
#include "parallel/mesh.h"
#include "parallel/tensor_parallel/mappings.h"

namespace trident::parallel::tp {

struct TensorParallelOptions {
  int64_t vocab_pad_multiple = 128;
  uint64_t seed = 1234;  // of the per-rank dropout streams (plus 2718 + tp rank)
  bool sequence_parallel = false;  // NOTE [Sequence parallelism]
};

class TensorParallelLayers : public models::LayerFactory {
 public:
  explicit TensorParallelLayers(CommPtr group, TensorParallelOptions options = {});
  // The tp group of a mesh.
  explicit TensorParallelLayers(const Mesh& mesh, TensorParallelOptions options = {});

  int64_t partitions() const override { return group_->size(); }
  const CommPtr& group() const { return group_; }
  const TensorParallelOptions& options() const { return options_; }

  std::shared_ptr<nn::UnaryModule> linear(const models::LinearSpec& spec) const override;
  std::shared_ptr<nn::UnaryModule> vocab_embedding(const models::EmbeddingSpec& spec) const override;
  Tensor tied_logits(const Tensor& hidden, const Tensor& weight, const Tensor& bias, int64_t vocab_size) const override;
  Tensor vocab_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                             Reduction reduction) const override;
  Tensor full_logits(const Tensor& logits) const override;
  // The vocabulary-parallel loss reads this rank's logits slice: no logits-free form here.
  bool tied_cross_entropy_fused() const override { return false; }
  Generator* dropout_generator(models::DropoutSite site, Generator* serial) const override;
  Tensor enter_split_region(const Tensor& x) const override;
  Tensor scatter_sequence(const Tensor& x) const override;
  Tensor gather_sequence(const Tensor& x) const override;
  Tensor residual_tied_logits(const Tensor& hidden, const Tensor& weight, int64_t vocab_size) const override;
  std::shared_ptr<nn::LayerNorm> residual_layer_norm(int64_t features, double eps, DType dtype) const override;
  bool sequence_parallel() const override { return options_.sequence_parallel; }
  // This rank's dropout stream of the split regions (seeded seed + 2718 + tp rank), for
  // checkpoints to save and restore its position.
  Generator* split_generator() const { return split_generator_.get(); }

 private:
  CommPtr group_;
  TensorParallelOptions options_;
  std::unique_ptr<Generator> split_generator_;
  // tied_logits on hidden states that already entered the split region.
  Tensor logits_in_region(const Tensor& hidden, const Tensor& weight, const Tensor& bias, int64_t vocab_size) const;
  mutable int64_t vocab_size_ = 0;  // the last tied_logits' vocab_size, for full_logits
};

// For the training applications' `--tp N`: a mesh of the whole world as tp = N (dp = pp = 1;
// an error naming both sizes when N is not the world size), and its factory; null when N == 1
// on a world of one (the serial layers).
std::shared_ptr<TensorParallelLayers> tensor_parallel_layers_for(int tp, TensorParallelOptions options = {});

}  // namespace trident::parallel::tp
