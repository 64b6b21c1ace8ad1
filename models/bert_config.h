// BERT's hyperparameters (Devlin et al. 2019): presets, JSON round trip with Hugging Face's
// config.json keys, the parameter count and a memory estimate from the sizes alone.
//
// Presets (layers, heads, hidden; intermediate 4 x hidden, 512 positions, 2 segment types,
// vocabulary 30522 as bert-base-uncased):
//   base (12, 12, 768)   large (24, 16, 1024)   tiny (2, 2, 128): for the CPU
// Dropout 0.1 on hidden states and attention probabilities, LayerNorm eps 1e-12, exact GELU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"
#include "models/layer_factory.h"
#include "models/memory_estimate.h"

namespace trident::models {

struct BertConfig {
  int64_t vocab_size = 30522;
  // Rows of the word-embedding table and of the MLM output bias: 0 = vocab_size; otherwise
  // >= vocab_size. Padded rows are never predicted (sliced off the logits).
  int64_t padded_vocab_size = 0;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  int64_t pad_token_id = 0;  // its word-embedding row starts at zero and gets no gradient from lookups
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  double layer_norm_eps = 1e-12;
  double initializer_range = 0.02;
  DType dtype = DType::F32;

  // ---- not in the JSON (as GPT2Config) ----
  std::shared_ptr<const LayerFactory> layers;
  Generator* dropout_generator = nullptr;
  // NOTE [Loss without logits] (gpt2_config.h) for the masked-LM head: given mlm_labels, the head
  // hands the loss the transformed hidden states of the masked positions and the loss runs the
  // tied decoder (word embeddings, output bias) inside the cross-entropy; forward() with
  // mlm_labels then returns no mlm_logits. Only where the factory can (the serial one).
  bool loss_without_logits = true;

  int64_t vocab_rows() const { return padded_vocab_size > 0 ? padded_vocab_size : vocab_size; }
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  const LayerFactory& factory() const { return layers ? *layers : *serial_layers(); }

  void validate() const;
  // {"model_type": "bert", "vocab_size": 30522, ...} with every field above.
  std::string to_json() const;
  // As GPT2Config::apply_json: "preset" first, unknown keys are errors, nothing changes on error.
  void apply_json(std::string_view json);
  static BertConfig from_json(std::string_view json);
  // A Hugging Face config.json (other keys ignored; hidden_act must be "gelu", the exact form).
  static BertConfig from_hf_config(std::string_view json);
  static BertConfig preset(std::string_view name, std::string_view overrides = {});
  static std::vector<std::string> preset_names();

  // Parameters of BertModel (embeddings, encoder, pooler), from the sizes alone. bert-base-uncased:
  // 109,482,240.
  int64_t num_parameters_base() const;
  // Of BertForPreTraining: BertModel + MLM transform (dense, LayerNorm) + output bias (the decoder
  // weight is the word embeddings) + NSP classifier. bert-base-uncased: 110,106,428.
  int64_t num_parameters() const;

  // Memory for pre-training on [batch, seq_len] with `predictions` masked positions per sequence
  // (the MLM head runs on those only). Activation elements per token, H = hidden, I =
  // intermediate, A = heads: per layer 10 H + 2 I + A + 4 (the layer input, q, k, v, the
  // attention output and its [B, T, H] copy, the attention sum before and after its LayerNorm,
  // the intermediate output and its GELU, the output sum; log-sum-exp; LayerNorm statistics),
  // plus 3 H for the embeddings; per masked position 3 H + 2 V (transform, GELU, LayerNorm; the
  // logits and their gradient, which do not exist when options.logits_tiled and
  // loss_without_logits). See GPT2Config::estimate_memory for the conventions.
  MemoryEstimate estimate_memory(int64_t batch, int64_t seq_len, int64_t predictions, const MemoryOptions& options = {}) const;
};

}  // namespace trident::models
