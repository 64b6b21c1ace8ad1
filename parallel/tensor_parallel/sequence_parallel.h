// Sequence parallelism (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models", section 4.2.2): the parts of a transformer layer that Megatron's split
// leaves whole on every rank (LayerNorm, dropout and the residual adds between them) run on
// shards of the sequence instead.
//
// NOTE [Sequence parallelism]: with TensorParallelOptions::sequence_parallel, the residual
// stream (models/layer_factory.h) holds this rank's T / tp positions, [B, T / tp, C], rank r
// the positions [r T / tp, (r + 1) T / tp) (dim kSequenceDim of the models' [B, T, C]). A
// split region (NOTE [Tensor-parallel regions]) is entered by gathering every position
// (gather_from_sequence_region: all-gather forward, reduce-scatter of the ranks' partial input
// gradients backward) where Megatron copies (copy_to_region), and left by reducing and
// scattering (reduce_scatter_to_sequence_region: reduce-scatter forward, all-gather backward)
// where Megatron all-reduces (reduce_from_region). A ring all-reduce is a reduce-scatter then an
// all-gather, so each layer moves the same bytes as Megatron's four all-reduces, while the
// LayerNorm and dropout activations (and their memory) are divided by tp.
//   - Entering the residual stream: the embeddings (whole after VocabParallelEmbedding's
//     all-reduce) are cut to this rank's positions (scatter_sequence: a slice forward, an
//     all-gather backward). Megatron-LM's later versions reduce-scatter the embedding instead.
//   - Leaving it: GPT-2's output layer gathers the positions as a column layer does
//     (residual_tied_logits); BERT's heads need every position on every rank and compute the same
//     values on all of them, so gather_sequence all-gathers forward and keeps this rank's slice of
//     the (whole, identical) gradient backward, Megatron's tensor_parallel_output_grad = false.
//   - Replicated parameters used on shards (the LayerNorms' weight and bias, the row-parallel
//     layers' bias, added after the reduce-scatter) get each rank's partial gradient: they enter
//     through copy_to_region, whose backward all-reduces it over the tp group, so they stay
//     identical on every rank. (Megatron all-reduces them in one flat buffer after backward;
//     these are one small all-reduce per parameter.)
//   - Dropout on the residual stream (DropoutSite::Residual) draws from the per-tp-rank stream
//     of the split regions: each rank drops its own positions, so the masks, and with dropout the
//     results, depend on tp (the rule: per-rank streams inside split regions). With
//     dropout 0 the model computes exactly the serial values.
//   - T must divide by tp (GPT-2's cached decoding pads its steps instead, NOTE
//     [Sequence-parallel decoding] in models/gpt2.cpp): scatter_sequence throws, naming T and tp, on every rank alike (the
//     same batch), before any communication of its own.
// At tp = 1 every function here is the identity.
#pragma once

#include "nn/normalization.h"
#include "parallel/tensor_parallel/mappings.h"

namespace trident::parallel::tp {

// The sequence dim of the models' hidden states [B, T, C].
inline constexpr int64_t kSequenceDim = 1;

// x [B, T, C], the same on every rank -> this rank's positions [B, T / tp, C] (a slice forward,
// an all-gather backward). Errors: x not 3-d; T not dividing by the group's size.
Tensor scatter_to_sequence(const Tensor& x, const CommPtr& group);
// x [B, T / tp, C] -> [B, T, C] (all-gather forward; backward keeps this rank's slice of a
// gradient that every rank holds whole). Errors: x not 3-d.
Tensor gather_from_sequence(const Tensor& x, const CommPtr& group);

// A LayerNorm over the last dim run on sequence shards: its weight and bias enter through
// copy_to_region, so their gradients are summed over the group. Names "weight", "bias".
class SequenceParallelLayerNorm : public nn::LayerNorm {
 public:
  SequenceParallelLayerNorm(int64_t features, double eps, DType dtype, CommPtr group);
  Tensor forward(const Tensor& x) override;
  AddLayerNorm forward_add(const Tensor& x, const Tensor& residual) override;

 protected:
  std::string extra_repr() const override;

 private:
  CommPtr group_;
};

}  // namespace trident::parallel::tp
