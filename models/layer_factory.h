// Where tensor parallelism plugs into the models: every layer that Megatron-LM splits is made
// by a LayerFactory named in the model's config.
//
// NOTE [Parallel layers by configuration]: GPT-2 and BERT are written once. They never construct
// a split-able layer themselves; they ask the config's factory for it, describing what the layer
// is (LinearSpec: sizes, bias, weight layout, how Megatron splits it, how it is initialized):
//   - linear(spec): ColumnParallel layers (GPT-2's c_attn and c_fc, BERT's query/key/value and
//     intermediate.dense) take the full input and return this rank's slice of the output,
//     [..., out_features / partitions()]; RowParallel ones (the projections back into the
//     residual stream: c_proj, attention.output.dense, output.dense) take such a slice and
//     return the full [..., out_features], all-reduced, bias added once. Replicated ones (BERT's
//     pooler and MLM transform, the NSP classifier) are whole on every rank.
//   - vocab_embedding(spec): the word embeddings, [num_embeddings, dim] (split by rows under
//     tensor parallelism), input ids -> [..., dim].
//   - tied_logits(hidden, weight, bias, vocab_size): the output layer tied to the word
//     embeddings; vocab_cross_entropy(logits, targets): the loss on what tied_logits returned,
//     without gathering the vocabulary; full_logits(logits): the whole vocabulary (generation).
//   - dropout_generator(site, serial): the stream dropout draws from (inside a split region,
//     per-rank streams; outside, one shared across the tp group).
//   - the residual stream (NOTE [Sequence parallelism], parallel/tensor_parallel/
//     sequence_parallel.h): the hidden states between the split regions, [B, T, C]. Whole on
//     every rank serially and under Megatron's split; under sequence parallelism each rank
//     holds T / tp positions of it. scatter_sequence enters it (after the embeddings),
//     gather_sequence leaves it for layers that need every position on every rank (BERT's
//     pooler and MLM head), residual_tied_logits is the output layer reading it directly (GPT-2),
//     residual_layer_norm the LayerNorms that run on it, and DropoutSite::Residual its dropout.
// The model divides its heads and MLP width by partitions() (an error names the sizes that do
// not divide) and otherwise runs the same code: this factory, the serial one, gives exactly the
// single-process model. Parameter names stay the layer's own ("weight", "bias"), so a split model
// keeps Hugging Face's names; a tensor-parallel factory saves and loads full tensors under them
// (issue 9). Every parameter is initialized through the spec's init function applied to the full
// weight, so a split layer that initializes the full tensor from the same generator and keeps
// its shard holds exactly the serial values.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/rng.h"
#include "nn/module.h"
#include "nn/normalization.h"
#include "ops/loss.h"

namespace trident::models {

enum class LinearKind {
  Replicated,  // whole on every rank
  Column,      // output features split across ranks; full input
  Row,         // input features split across ranks; full (reduced) output
};

enum class WeightLayout {
  OutIn,  // [out_features, in_features]: torch.nn.Linear (BERT)
  InOut,  // [in_features, out_features]: Hugging Face's Conv1D (GPT-2)
};

struct LinearSpec {
  std::string name;  // what the layer is, for errors and printing ("attn.c_attn", "intermediate.dense")
  int64_t in_features = 0, out_features = 0;
  bool bias = true;
  LinearKind kind = LinearKind::Replicated;
  WeightLayout layout = WeightLayout::OutIn;
  // The output is `fused_parts` equal blocks, each split across ranks on its own (GPT-2's c_attn
  // is [q | k | v]: rank r's output is [q_r | k_r | v_r]).
  int64_t fused_parts = 1;
  // Column layers only: the caller already passed the input through enter_split_region (BERT's
  // query, key and value read one such input, so its gradient is all-reduced once, not three
  // times: Megatron's two all-reduces per layer backward).
  bool input_in_region = false;
  // Fills the full weight (in `layout`) in place; the bias starts at zero.
  std::function<void(const Tensor& weight)> init_weight;
  DType dtype = DType::F32;
};

struct EmbeddingSpec {
  std::string name;
  int64_t num_embeddings = 0, embedding_dim = 0;
  std::function<void(const Tensor& weight)> init_weight;  // fills the full [num, dim] table
  std::optional<int64_t> padding_idx;  // its row starts at zero and never gets a gradient
  DType dtype = DType::F32;
};

enum class DropoutSite {
  Replicated,  // on activations every rank always holds whole
  Split,       // inside a split region (attention probabilities of this rank's heads)
  Residual,    // on the residual stream (embeddings, residual branches): whole on every rank,
               // except under sequence parallelism, where each rank holds its positions
};

class LayerFactory {
 public:
  virtual ~LayerFactory() = default;

  // Ranks a split layer is divided among (1: serial).
  virtual int64_t partitions() const { return 1; }

  // The serial layers: a plain linear layer in the spec's layout, an nn::Embedding.
  virtual std::shared_ptr<nn::UnaryModule> linear(const LinearSpec& spec) const;
  virtual std::shared_ptr<nn::UnaryModule> vocab_embedding(const EmbeddingSpec& spec) const;

  // hidden [..., C] against the word-embedding table `weight` [V_padded, C] (+ bias [V_padded],
  // optional): logits over the first vocab_size rows only, [..., vocab_size]. Padded rows are
  // never predicted: the serial factory slices them off the logits (a view; nothing is computed
  // twice).
  virtual Tensor tied_logits(const Tensor& hidden, const Tensor& weight, const Tensor& bias, int64_t vocab_size) const;
  // Cross-entropy of tied_logits' output [N, V] against targets [N] (ignore_index skipped),
  // reduced as asked.
  virtual Tensor vocab_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                     Reduction reduction) const;
  // NOTE [Loss without logits]: vocab_cross_entropy(tied_logits(hidden, weight, bias, vocab_size),
  // targets, ...) in one op, hidden [N, C], targets [N]; the serial factory's is
  // linear_cross_entropy (its logits exist one tile at a time on the CPU, where that is faster).
  // A model hands the loss its hidden states instead of logits only where
  // tied_cross_entropy_fused() says this does better than the composition (not under tensor
  // parallelism, whose vocabulary-parallel loss already never gathers the logits).
  virtual bool tied_cross_entropy_fused() const { return true; }
  virtual Tensor tied_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& bias, int64_t vocab_size,
                                    const Tensor& targets, int64_t ignore_index, Reduction reduction) const;
  // The logits over the whole vocabulary (the serial ones already are).
  virtual Tensor full_logits(const Tensor& logits) const { return logits; }

  // The input of several column layers that read the same tensor (LinearSpec::input_in_region):
  // under tensor parallelism its gradient is all-reduced in backward; serially the identity.
  virtual Tensor enter_split_region(const Tensor& x) const { return x; }

  virtual Generator* dropout_generator(DropoutSite site, Generator* serial) const { return serial; }

  // The residual stream (NOTE [Sequence parallelism]); serially each is the plain layer or the
  // identity. scatter_sequence: the full hidden states [B, T, C], the same on every rank -> the
  // part of them the residual stream holds. gather_sequence: that part -> the full [B, T, C], for
  // layers that compute the same values on every rank (its gradient is then whole on every rank
  // too). Errors: T not dividing by the ranks the sequence is split among, naming both.
  virtual Tensor scatter_sequence(const Tensor& x) const { return x; }
  virtual Tensor gather_sequence(const Tensor& x) const { return x; }
  // tied_logits (without bias) of hidden states as the residual stream holds them: the logits of
  // every position, [B, T, vocab_size or this rank's vocabulary slice].
  virtual Tensor residual_tied_logits(const Tensor& hidden, const Tensor& weight, int64_t vocab_size) const {
    return tied_logits(hidden, weight, Tensor(), vocab_size);
  }
  // A LayerNorm over the last dim (`features`) of the residual stream; its parameters keep the
  // names "weight" and "bias".
  virtual std::shared_ptr<nn::LayerNorm> residual_layer_norm(int64_t features, double eps, DType dtype) const;
  // Whether the residual stream is split along the sequence.
  virtual bool sequence_parallel() const { return false; }
};

// The serial factory, shared.
std::shared_ptr<const LayerFactory> serial_layers();

// The serial linear layer: y = x W^T + b (OutIn) or x W + b (InOut, Hugging Face's Conv1D),
// parameters "weight" (in the spec's layout) and "bias".
class DenseLayer : public nn::UnaryModule {
 public:
  explicit DenseLayer(const LinearSpec& spec);
  Tensor forward(const Tensor& x) override;
  int64_t in_features, out_features;
  WeightLayout layout;
  Tensor weight, bias;

 protected:
  std::string extra_repr() const override;
};

// Checks that `what` (e.g. "n_head 12") divides by the factory's partitions, naming both.
void check_divisible(const LayerFactory& f, int64_t value, const char* what);

}  // namespace trident::models
