// BERT (Devlin et al. 2019) as Hugging Face's BertForPreTraining: post-LayerNorm encoder layers,
// exact (erf) GELU, token + position + segment embeddings, the pooler, the masked-LM head
// (transform: dense, GELU, LayerNorm; decoder tied to the word embeddings, plus a bias) and the
// next-sentence head.
//
// Names are Hugging Face's (bert_hf.h loads their files):
//   bert.embeddings.{word_embeddings,position_embeddings,token_type_embeddings}.weight,
//   bert.embeddings.LayerNorm.{weight,bias},
//   bert.encoder.layer.{i}.attention.self.{query,key,value}.{weight [H, H],bias},
//   bert.encoder.layer.{i}.attention.output.{dense,LayerNorm}.*, ...intermediate.dense.*,
//   bert.encoder.layer.{i}.output.{dense,LayerNorm}.*, bert.pooler.dense.*,
//   cls.predictions.bias [V'], cls.predictions.transform.{dense,LayerNorm}.*,
//   cls.seq_relationship.{weight [2, H],bias}
// (linear weights [out, in], as torch.nn.Linear). The decoder weight is the word-embedding table
// (not a tensor of its own).
//
// Init (Hugging Face's _init_weights): linear weights and embeddings N(0, initializer_range),
// the padding token's embedding row 0, biases 0, LayerNorm 1 and 0.
//
// Batch (NOTE [Layer list]), the fields of data::BertExampleDataset: "input_ids" [B, T] i64,
// "token_type_ids" [B, T] (optional: all segment 0), "attention_mask" [B, T] (optional; nonzero
// on tokens, 0 on padding: keys at padding are masked out of every query's attention, through
// the fused attention's boolean mask [B, 1, 1, T]), "mlm_labels" [B, T] (the original id at
// masked positions, -100 elsewhere), "next_sentence_label" [B] (0: B follows A, 1: random).
//
// Layer list: "embeddings" (bert.embeddings itself), "layer.0" ... "layer.{L-1}", "heads" (the
// pooler and both heads, a view). With "mlm_labels" in the batch the MLM head runs only on the
// masked positions (gathered in row-major order: its logits are [M, vocab_size], M = the
// number of labels that are not -100), which is what pre-training needs and saves a vocabulary-
// sized GEMM on the other 85% of the tokens; without them it runs on every position ([B, T,
// vocab_size]). The heads' outputs are {mlm_logits, nsp_logits [B, 2]}.
// Under a sequence-parallel factory (NOTE [Sequence parallelism]) the hidden states between the
// layers are this rank's T / tp positions (the heads and BertModel::forward gather them all);
// T must divide by tp.
#pragma once

#include <memory>
#include <vector>

#include "models/bert_config.h"
#include "models/layer_list.h"
#include "nn/basic.h"
#include "nn/containers.h"
#include "nn/embedding.h"
#include "nn/normalization.h"

namespace trident::models {

class BertEmbeddings : public Layer {
 public:
  BertEmbeddings(const BertConfig& config, Generator* init_gen);
  // LayerNorm(word(ids) + position(0..T-1) + token_type(types)), dropout. token_type_ids may be
  // undefined (segment 0).
  Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids);
  Activations forward(const Activations& x, const Batch& batch) override;
  std::shared_ptr<nn::UnaryModule> word_embeddings;  // from the config's factory
  std::shared_ptr<nn::Embedding> position_embeddings, token_type_embeddings;
  std::shared_ptr<nn::LayerNorm> LayerNorm;  // NOLINT: Hugging Face's name
  std::shared_ptr<nn::Dropout> dropout;
  int64_t max_positions;
  Tensor word_embeddings_weight() const;

 private:
  std::shared_ptr<const LayerFactory> factory_;  // the config's layer factory
};

class BertSelfAttention : public nn::Module {
 public:
  BertSelfAttention(const BertConfig& config, Generator* init_gen);
  // x [B, T, H], mask bool broadcastable to [B, heads, T, T] (or undefined) -> the context of this
  // rank's heads [B, T, local heads x head_dim].
  Tensor forward(const Tensor& x, const Tensor& mask);
  int64_t local_heads, head_dim;
  double dropout_p;
  Generator* generator;
  std::shared_ptr<nn::UnaryModule> query, key, value;
  // query, key and value of x as one product (NOTE [Fused projections] in bert.cpp); empty when
  // the layers are not the serial ones.
  std::vector<Tensor> fused_projections(const Tensor& x) const;

 private:
  std::shared_ptr<const LayerFactory> factory_;  // the config's layer factory
};

// LayerNorm(dropout(dense(h)) + residual): BertSelfOutput and BertOutput share it.
class BertResidualOutput : public nn::Module {
 public:
  BertResidualOutput(const BertConfig& config, int64_t in_features, const char* name, Generator* init_gen);
  Tensor forward(const Tensor& h, const Tensor& residual);
  std::shared_ptr<nn::UnaryModule> dense;
  std::shared_ptr<nn::LayerNorm> LayerNorm;  // NOLINT
  std::shared_ptr<nn::Dropout> dropout;
};

class BertAttention : public nn::Module {
 public:
  BertAttention(const BertConfig& config, Generator* init_gen);
  Tensor forward(const Tensor& x, const Tensor& mask);
  std::shared_ptr<BertSelfAttention> self;
  std::shared_ptr<BertResidualOutput> output;
};

class BertIntermediate : public nn::Module {
 public:
  BertIntermediate(const BertConfig& config, Generator* init_gen);
  Tensor forward(const Tensor& x);  // gelu(dense(x)), exact GELU
  std::shared_ptr<nn::UnaryModule> dense;
};

class BertLayer : public Layer {
 public:
  BertLayer(const BertConfig& config, Generator* init_gen);
  Tensor forward(const Tensor& x, const Tensor& mask);
  Activations forward(const Activations& x, const Batch& batch) override;
  std::shared_ptr<BertAttention> attention;
  std::shared_ptr<BertIntermediate> intermediate;
  std::shared_ptr<BertResidualOutput> output;
};

class BertEncoder : public nn::Module {
 public:
  // Layer i is layer i + 1 of BertForPreTraining's list (NOTE [Stage-only build]).
  BertEncoder(const BertConfig& config, Generator* init_gen, const LayerSelection& keep = kAllLayers);
  std::shared_ptr<nn::ModuleList<BertLayer>> layer;
};

class BertPooler : public nn::Module {
 public:
  BertPooler(const BertConfig& config, Generator* init_gen);
  Tensor forward(const Tensor& hidden);  // tanh(dense(hidden[:, 0])): [B, H]
  std::shared_ptr<nn::UnaryModule> dense;
};

// Hugging Face's BertModel.
class BertModel : public nn::Module {
 public:
  // keep: the range of BertForPreTraining's layer list to keep (NOTE [Stage-only build]).
  BertModel(const BertConfig& config, Generator* init_gen, const LayerSelection& keep = kAllLayers);
  struct Output {
    Tensor sequence;  // [B, T, H]
    Tensor pooled;    // [B, H]
  };
  // The same layers the layer list runs, for fine-tuning code that wants hidden states.
  Output forward(const Tensor& input_ids, const Tensor& token_type_ids = {}, const Tensor& attention_mask = {});
  std::shared_ptr<BertEmbeddings> embeddings;
  std::shared_ptr<BertEncoder> encoder;
  std::shared_ptr<BertPooler> pooler;

 private:
  std::shared_ptr<const LayerFactory> factory_;  // the config's layer factory
};

class BertPredictionHeadTransform : public nn::Module {
 public:
  BertPredictionHeadTransform(const BertConfig& config, Generator* init_gen);
  Tensor forward(const Tensor& x);  // LayerNorm(gelu(dense(x)))
  std::shared_ptr<nn::UnaryModule> dense;
  std::shared_ptr<nn::LayerNorm> LayerNorm;  // NOLINT
};

class BertLMPredictionHead : public nn::Module {
 public:
  BertLMPredictionHead(const BertConfig& config, Generator* init_gen);
  std::shared_ptr<BertPredictionHeadTransform> transform;
  Tensor bias;  // [V']
};

// "cls": both pre-training heads.
class BertPreTrainingHeads : public nn::Module {
 public:
  BertPreTrainingHeads(const BertConfig& config, Generator* init_gen);
  std::shared_ptr<BertLMPredictionHead> predictions;
  std::shared_ptr<nn::UnaryModule> seq_relationship;
};

struct BertPreTrainingOutput {
  // [B, T, V] without mlm_labels; with them undefined (NOTE [Loss without logits],
  // BertConfig::loss_without_logits), or [M, V] at the masked positions when that is off.
  Tensor mlm_logits;
  Tensor nsp_logits;  // [B, 2]
  Tensor loss;        // mlm_loss + nsp_loss (the terms present); undefined without labels
  Tensor mlm_loss, nsp_loss;
};

class BertForPreTraining : public LayeredModel {
 public:
  explicit BertForPreTraining(const BertConfig& config, Generator* init_gen = nullptr);
  // NOTE [Stage-only build]: the same model with only the layers in `keep` of its list
  // (num_hidden_layers + 2 layers) held; the others' tensors are placeholders. Errors: keep not a
  // non-empty range of the list (kAllLayers builds whole).
  BertForPreTraining(const BertConfig& config, Generator* init_gen, const LayerSelection& keep);

  BertPreTrainingOutput forward(const Batch& batch);

  const LayerList& layers() const override { return layers_; }
  // {masked positions (mlm_labels != -100), sentence pairs (next_sentence_label != -100)}; a
  // term whose labels the batch lacks counts 0 and is left out of the loss.
  std::vector<double> loss_counts(const Batch& batch) const override;
  Tensor loss(const Activations& outputs, const Batch& batch, const std::vector<double>& counts = {}) const override;
  // The two terms (undefined when the batch lacks that term's labels).
  std::pair<Tensor, Tensor> loss_terms(const Activations& outputs, const Batch& batch, const std::vector<double>& counts = {}) const;

  const BertConfig& config() const { return config_; }
  std::shared_ptr<BertModel> bert;
  std::shared_ptr<BertPreTrainingHeads> cls;

 private:
  BertConfig config_;
  LayerList layers_;
};

// The parameter count of each layer of BertForPreTraining(config)'s list, as its
// layers().num_parameters(i, i + 1) counts them (the tied word embeddings in the embeddings and
// the heads; under a tensor-parallel factory, this rank's shards), without building the whole
// model: one encoder layer stands for all of them (layer_parameters_from_one_block).
std::vector<int64_t> bert_layer_parameters(const BertConfig& config);

// The positions (flat indices into [B T]) where labels [B, T] are not -100, in order: i64 [M].
Tensor masked_positions(const Tensor& labels);

// attention_mask [B, T] (nonzero on tokens) -> bool [B, 1, 1, T], what the fused attention takes;
// undefined for undefined.
Tensor attention_mask_for_keys(const Tensor& attention_mask);

}  // namespace trident::models
