// GPT-2 (Radford et al. 2019) as Hugging Face's GPT2LMHeadModel: pre-LayerNorm blocks, GELU in
// its tanh form, learned positions, the output layer tied to the token embeddings, fused causal
// attention, dropout on the embeddings, the attention probabilities and both residual branches.
//
// Names and layouts are Hugging Face's (a model.safetensors of theirs loads: gpt2_hf.h):
//   transformer.wte.weight [V', C]   transformer.wpe.weight [P, C]
//   transformer.h.{i}.ln_1.{weight,bias} [C]
//   transformer.h.{i}.attn.c_attn.{weight [C, 3C], bias [3C]}   (Conv1D: stored [in, out])
//   transformer.h.{i}.attn.c_proj.{weight [C, C], bias [C]}
//   transformer.h.{i}.ln_2.{weight,bias} [C]
//   transformer.h.{i}.mlp.c_fc.{weight [C, 4C], bias [4C]}
//   transformer.h.{i}.mlp.c_proj.{weight [4C, C], bias [C]}
//   transformer.ln_f.{weight,bias} [C]
// The output layer is wte itself (no lm_head.weight of its own, as Hugging Face's tie).
//
// Init (Hugging Face's _init_weights and the paper's section 2.3): weights and embeddings
// N(0, initializer_range), the two projections into the residual stream per block (attn.c_proj,
// mlp.c_proj) N(0, initializer_range / sqrt(2 n_layer)), biases 0, LayerNorm 1 and 0; draws in
// construction order from the generator given (the default one when null).
//
// Inputs: input_ids [B, T] i64 (T <= n_positions); targets [B, T] i64 aligned with them (the
// next token of each position, as the data pipeline's LM windows give them; ignore_index -100
// skips a position). Logits [B, T, vocab_size] (padded rows sliced off).
//
// Layer list (NOTE [Layer list]): "embedding" (wte + wpe + dropout), "h.0" ... "h.{L-1}",
// "head" (ln_f + the tied output layer; with targets, ln_f only, the output layer then being part of
// the loss: NOTE [Loss without logits] in gpt2_config.h). Batch tensors: "input_ids", "targets"
// (loss only).
// Under a sequence-parallel factory (NOTE [Sequence parallelism]) the hidden states between the
// layers are this rank's T / tp positions; T must divide by tp in forward(). forward_cached takes
// any number of new tokens (NOTE [Sequence-parallel decoding] in gpt2.cpp), so generation runs
// token by token.
#pragma once

#include <memory>
#include <vector>

#include "models/gpt2_config.h"
#include "models/layer_list.h"
#include "nn/basic.h"
#include "nn/containers.h"
#include "nn/embedding.h"
#include "nn/normalization.h"

namespace trident::models {

struct GPT2KVCache;

// The attention of one block: c_attn (q, k, v packed [q | k | v]), fused scaled dot-product
// attention with the causal mask, dropout on the probabilities, c_proj, residual dropout.
class GPT2Attention : public nn::Module {
 public:
  GPT2Attention(const GPT2Config& config, Generator* init_gen);
  // x [B, T, C] -> [B, T, C]. With a cache (inference only, under NoGradGuard), keys and values
  // of the T new positions are appended to the cache's layer `layer`, and the new queries attend
  // to every cached position and causally among themselves.
  Tensor forward(const Tensor& x, GPT2KVCache* cache = nullptr, int64_t layer = 0);
  int64_t n_head, local_heads, head_dim;
  double attn_pdrop;
  Generator* attn_generator;
  std::shared_ptr<nn::UnaryModule> c_attn, c_proj;
  std::shared_ptr<nn::Dropout> resid_dropout;
};

class GPT2MLP : public nn::Module {
 public:
  GPT2MLP(const GPT2Config& config, Generator* init_gen);
  Tensor forward(const Tensor& x);
  std::shared_ptr<nn::UnaryModule> c_fc, c_proj;
  std::shared_ptr<nn::Dropout> dropout;
};

// x + attn(ln_1(x)), then x + mlp(ln_2(x)).
class GPT2Block : public Layer {
 public:
  GPT2Block(const GPT2Config& config, Generator* init_gen);
  Tensor forward(const Tensor& x, GPT2KVCache* cache = nullptr, int64_t layer = 0);
  Activations forward(const Activations& x, const Batch& batch) override;
  std::shared_ptr<nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<GPT2Attention> attn;
  std::shared_ptr<GPT2MLP> mlp;
};

// Hugging Face's GPT2Model: the embeddings, the blocks and the final LayerNorm.
class GPT2Model : public nn::Module {
 public:
  // keep: the range of GPT2LMHeadModel's layer list to keep (NOTE [Stage-only build]).
  GPT2Model(const GPT2Config& config, Generator* init_gen, const LayerSelection& keep = kAllLayers);
  std::shared_ptr<nn::UnaryModule> wte;  // from the config's factory (vocab-parallel under tp)
  std::shared_ptr<nn::Embedding> wpe;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::ModuleList<GPT2Block>> h;
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<const LayerFactory> factory;  // the config's
  // wte's table [V', C].
  Tensor wte_weight() const;
};

struct LMOutput {
  // [B, T, vocab_size]; undefined when the loss was computed without them (targets given and
  // config.loss_without_logits, NOTE [Loss without logits]): forward(input_ids) gives them.
  Tensor logits;
  Tensor loss;    // 0-dim mean cross-entropy over the counted targets; undefined without targets
};

class GPT2LMHeadModel : public LayeredModel {
 public:
  explicit GPT2LMHeadModel(const GPT2Config& config, Generator* init_gen = nullptr);
  // NOTE [Stage-only build]: the same model with only the layers in `keep` of its list (n_layer +
  // 2 layers) held; the others' tensors are placeholders. Errors: keep not a non-empty range of
  // the list (kAllLayers builds whole).
  GPT2LMHeadModel(const GPT2Config& config, Generator* init_gen, const LayerSelection& keep);

  // Logits, and the loss when targets are given (then without the logits where the config and
  // the factory allow: NOTE [Loss without logits]); runs the whole layer list.
  LMOutput forward(const Tensor& input_ids, const Tensor& targets = {});
  // Logits of the new positions [B, T, vocab_size] given a cache holding the previous ones
  // (inference: under NoGradGuard). Advances cache.length by T. last_position_only: the logits
  // of the last new position only, [B, 1, vocab_size] (what generation samples from: a prompt's
  // other positions skip the output layer, about 30% of GPT-2 124M's work per position).
  Tensor forward_cached(const Tensor& input_ids, GPT2KVCache& cache, bool last_position_only = false);
  // A cache for `batch` sequences of up to `capacity` positions (<= n_positions).
  GPT2KVCache make_cache(int64_t batch, int64_t capacity) const;

  const LayerList& layers() const override { return layers_; }
  std::vector<double> loss_counts(const Batch& batch) const override;
  Tensor loss(const Activations& outputs, const Batch& batch, const std::vector<double>& counts = {}) const override;

  const GPT2Config& config() const { return config_; }
  std::shared_ptr<GPT2Model> transformer;

 private:
  GPT2Config config_;
  LayerList layers_;
};

// The parameter count of each layer of GPT2LMHeadModel(config)'s list, as its
// layers().num_parameters(i, i + 1) counts them (the tied table in the embedding and the head;
// under a tensor-parallel factory, this rank's shards), without building the whole model: one
// block stands for all of them (layer_parameters_from_one_block). For a pipeline's cut by
// parameters before a stage-only build.
std::vector<int64_t> gpt2_layer_parameters(const GPT2Config& config);

// Keys and values of the positions seen so far, per block: [B, local heads, room, head_dim]
// each, filled up to `length`; `limit` (when set) is the capacity asked for, the room beyond it
// scratch for a sequence-parallel step's padding.
struct GPT2KVCache {
  std::vector<Tensor> keys, values;
  int64_t length = 0;
  int64_t limit = 0;
  int64_t room() const { return keys.empty() ? 0 : keys[0].size(2); }
  int64_t capacity() const { return limit > 0 ? limit : room(); }
  int64_t batch() const { return keys.empty() ? 0 : keys[0].size(0); }
  void reset() { length = 0; }
};

}  // namespace trident::models
