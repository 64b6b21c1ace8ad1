#include "models/bert.h"

#include <typeinfo>

#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "core/factory.h"
#include "nn/init.h"
#include "ops/arith.h"
#include "ops/attention.h"
#include "ops/compare.h"
#include "ops/index.h"
#include "ops/linalg.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/unary.h"

namespace trident::models {

namespace {

LinearSpec dense_spec(const BertConfig& c, const char* name, int64_t in, int64_t out, LinearKind kind, Generator* gen) {
  LinearSpec s;
  s.name = name;
  s.in_features = in;
  s.out_features = out;
  s.kind = kind;
  s.layout = WeightLayout::OutIn;
  s.init_weight = [std = c.initializer_range, gen](const Tensor& w) { nn::init::normal_(w, 0.0, std, gen); };
  s.dtype = c.dtype;
  return s;
}

std::shared_ptr<nn::Embedding> embedding(const BertConfig& c, int64_t n, Generator* gen) {
  auto e = std::make_shared<nn::Embedding>(n, c.hidden_size, std::nullopt, c.dtype);
  nn::init::normal_(e->weight, 0.0, c.initializer_range, gen);
  return e;
}

// The LayerNorms of the residual stream (NOTE [Sequence parallelism]: on this rank's positions
// under sequence parallelism).
std::shared_ptr<nn::LayerNorm> residual_layer_norm(const BertConfig& c) {
  return c.factory().residual_layer_norm(c.hidden_size, c.layer_norm_eps, c.dtype);
}

std::shared_ptr<nn::Dropout> hidden_dropout(const BertConfig& c) {
  return std::make_shared<nn::Dropout>(c.hidden_dropout_prob,
                                       c.factory().dropout_generator(DropoutSite::Residual, c.dropout_generator));
}

// The pooler and both heads, over modules registered in the model (NOTE [Layer list]).
// NOTE [Loss without logits] for the masked-LM head: whether the heads hand the loss the
// transformed hidden states of the masked positions rather than their logits.
bool mlm_loss_takes_hidden(const BertConfig& c, const Batch& batch) {
  return c.loss_without_logits && batch.has("mlm_labels") && c.factory().tied_cross_entropy_fused();
}

class BertHeadsLayer : public Layer {
 public:
  BertHeadsLayer(std::shared_ptr<BertModel> bert, std::shared_ptr<BertPreTrainingHeads> cls, const BertConfig& c)
      : Layer("BertHeads"), bert_(std::move(bert)), cls_(std::move(cls)), config_(c) {
    register_module("pooler", bert_->pooler);
    register_module("cls", cls_);
    register_module("word_embeddings", bert_->embeddings->word_embeddings);  // tied decoder
  }
  Activations forward(const Activations& x, const Batch& batch) override {
    TRIDENT_CHECK(x.size() == 1, "BERT heads: expected one activation (hidden states), got ", x.size());
    TRIDENT_CHECK(x[0].dim() == 3, "BERT heads: expected hidden states [B, T, H], got shape ", x[0].sizes());
    // The pooler reads position 0 and the MLM head the masked positions: every position, on
    // every rank (NOTE [Sequence parallelism]).
    const Tensor h = config_.factory().gather_sequence(x[0]);
    Tensor selected = h;
    const Tensor labels = batch.get("mlm_labels");
    if (labels.defined()) {
      TRIDENT_CHECK(labels.sizes() == Shape({h.size(0), h.size(1)}), "BERT: mlm_labels of shape ", labels.sizes(),
                    " do not match hidden states ", h.sizes());
      selected = index_select(reshape(h, {-1, h.size(2)}), 0, masked_positions(labels));
    }
    const Tensor t = cls_->predictions->transform->forward(selected);
    const Tensor mlm = mlm_loss_takes_hidden(config_, batch)
                           ? t
                           : config_.factory().tied_logits(t, bert_->embeddings->word_embeddings_weight(),
                                                           cls_->predictions->bias, config_.vocab_size);
    const Tensor nsp = cls_->seq_relationship->forward(bert_->pooler->forward(h));
    return {mlm, nsp};
  }

 private:
  std::shared_ptr<BertModel> bert_;
  std::shared_ptr<BertPreTrainingHeads> cls_;
  BertConfig config_;
};

int64_t count_labels(const Tensor& labels) {
  TRIDENT_CHECK(labels.dtype() == DType::I64, "BERT: labels must be i64, got ", labels.dtype());
  // Counted on the host (a CUDA batch is copied back: the count is a host value anyway).
  const Tensor h = labels.device().is_cpu() ? labels : labels.to(kCPU);
  return sum(ne(h, -100.0).to(DType::I64)).item<int64_t>();
}

}  // namespace

Tensor masked_positions(const Tensor& labels) {
  TRIDENT_CHECK(labels.dtype() == DType::I64, "BERT: mlm_labels must be i64, got ", labels.dtype());
  const std::vector<int64_t> l = labels.to_vector<int64_t>();
  std::vector<int64_t> pos;
  for (size_t i = 0; i < l.size(); ++i)
    if (l[i] != -100) pos.push_back(static_cast<int64_t>(i));
  // Back on the labels' device, where the hidden states they index are.
  return from_vector<int64_t>(pos, {static_cast<int64_t>(pos.size())}, TensorOptions(DType::I64).device(labels.device()));
}

Tensor attention_mask_for_keys(const Tensor& attention_mask) {
  if (!attention_mask.defined()) return {};
  TRIDENT_CHECK(attention_mask.dim() == 2, "BERT: attention_mask must be [B, T], got shape ", attention_mask.sizes());
  // The CUDA comparisons take floating tensors: an integer mask on a GPU (0/1, exact in f32) is
  // compared as f32.
  const Tensor m = attention_mask.device().is_cpu() || is_floating(attention_mask.dtype()) ? attention_mask
                                                                                           : attention_mask.to(DType::F32);
  const Tensor keep = attention_mask.dtype() == DType::Bool ? attention_mask : ne(m, 0.0);
  return view(keep.contiguous(), {attention_mask.size(0), 1, 1, attention_mask.size(1)});
}

// ---- embeddings ----

BertEmbeddings::BertEmbeddings(const BertConfig& c, Generator* gen)
    : Layer("BertEmbeddings"), max_positions(c.max_position_embeddings) {
  EmbeddingSpec e;
  e.name = "word_embeddings";
  e.num_embeddings = c.vocab_rows();
  e.embedding_dim = c.hidden_size;
  e.padding_idx = c.pad_token_id;
  e.dtype = c.dtype;
  e.init_weight = [std = c.initializer_range, V = c.vocab_size, gen](const Tensor& w) {
    nn::init::normal_(w, 0.0, std, gen);
    if (w.size(0) > V) fill_(narrow(w, 0, V, w.size(0) - V), 0.0);  // padded rows: never used
  };
  word_embeddings = register_module("word_embeddings", c.factory().vocab_embedding(e));
  position_embeddings = register_module("position_embeddings", embedding(c, c.max_position_embeddings, gen));
  token_type_embeddings = register_module("token_type_embeddings", embedding(c, c.type_vocab_size, gen));
  LayerNorm = register_module("LayerNorm", residual_layer_norm(c));
  dropout = register_module("dropout", hidden_dropout(c));
  factory_ = c.layers ? c.layers : serial_layers();
}

Tensor BertEmbeddings::word_embeddings_weight() const {
  for (const auto& [name, t] : word_embeddings->named_parameters(false))
    if (name == "weight") return t;
  TRIDENT_FAIL("BERT: the word embedding module ", word_embeddings->type_name(), " has no parameter 'weight'");
}

Tensor BertEmbeddings::forward(const Tensor& ids, const Tensor& types) {
  TRIDENT_CHECK(ids.dim() == 2 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32),
                "BERT: input_ids must be [B, T] of i64 or i32, got shape ", ids.sizes(), " of ", ids.dtype());
  const int64_t T = ids.size(1);
  TRIDENT_CHECK(T <= max_positions, "BERT: ", T, " positions exceed max_position_embeddings = ", max_positions);
  if (types.defined())
    TRIDENT_CHECK(types.sizes() == ids.sizes(), "BERT: token_type_ids of shape ", types.sizes(),
                  " do not match input_ids of shape ", ids.sizes());
  Tensor x = add(word_embeddings->forward(ids), position_embeddings->forward(arange(0.0, static_cast<double>(T), 1.0, TensorOptions(DType::I64).device(ids.device()))));
  // Without segment ids every token is segment 0: row 0 broadcast.
  x = add(x, types.defined() ? token_type_embeddings->forward(types) : select(token_type_embeddings->weight, 0, 0));
  // Into the residual stream before the LayerNorm, so that it runs on this rank's positions.
  return dropout->forward(LayerNorm->forward(factory_->scatter_sequence(x)));
}

Activations BertEmbeddings::forward(const Activations& x, const Batch& batch) {
  TRIDENT_CHECK(x.empty(), "BERT embeddings: expected no activations (they read batch \"input_ids\"), got ", x.size());
  return {forward(batch.at("input_ids"), batch.get("token_type_ids"))};
}

// ---- attention ----

BertSelfAttention::BertSelfAttention(const BertConfig& c, Generator* gen)
    : nn::Module("BertSelfAttention"), head_dim(c.head_dim()), dropout_p(c.attention_probs_dropout_prob) {
  const LayerFactory& f = c.factory();
  check_divisible(f, c.num_attention_heads, "BERT: num_attention_heads");
  local_heads = c.num_attention_heads / f.partitions();
  generator = f.dropout_generator(DropoutSite::Split, c.dropout_generator);
  factory_ = c.layers ? c.layers : serial_layers();
  const int64_t H = c.hidden_size;
  auto in_region = [](LinearSpec s) {
    s.input_in_region = true;
    return s;
  };
  query = register_module("query", f.linear(in_region(dense_spec(c, "attention.self.query", H, H, LinearKind::Column, gen))));
  key = register_module("key", f.linear(in_region(dense_spec(c, "attention.self.key", H, H, LinearKind::Column, gen))));
  value = register_module("value", f.linear(in_region(dense_spec(c, "attention.self.value", H, H, LinearKind::Column, gen))));
}

// NOTE [Fused projections]: with the serial layers, query, key and value run as one product over
// their weights stacked [3 width, H] (and biases), its output split into three views: one GEMM
// three times as wide instead of three (and under autocast one cast of the input instead of
// three), and in backward one product for the input's gradient instead of three and a sum.
// The parameters stay the three Hugging Face ones; the stacking's gradient hands each its rows.
// Each output element is the same dot product. Other factories (tensor parallelism) run the
// three modules.
std::vector<Tensor> BertSelfAttention::fused_projections(const Tensor& x) const {
  // The modules by reference first: typeid of *shared_ptr is an expression with side effects (Clang's
  // -Wpotentially-evaluated-expression).
  const nn::UnaryModule &qm = *query, &km = *key, &vm = *value;
  if (typeid(qm) != typeid(DenseLayer) || typeid(km) != typeid(DenseLayer) || typeid(vm) != typeid(DenseLayer)) return {};
  const auto* q = static_cast<const DenseLayer*>(query.get());
  const auto* k = static_cast<const DenseLayer*>(key.get());
  const auto* v = static_cast<const DenseLayer*>(value.get());
  if (q->layout != WeightLayout::OutIn || k->layout != WeightLayout::OutIn || v->layout != WeightLayout::OutIn) return {};
  const bool biased = q->bias.defined();
  if (k->bias.defined() != biased || v->bias.defined() != biased) return {};
  const Tensor w = cat({q->weight, k->weight, v->weight}, 0);
  const Tensor b = biased ? cat({q->bias, k->bias, v->bias}, 0) : Tensor();
  return split(linear(x, w, b), q->out_features, x.dim() - 1);
}

Tensor BertSelfAttention::forward(const Tensor& x, const Tensor& mask) {
  TRIDENT_CHECK(x.dim() == 3, "BERT attention: expected input [B, T, H], got shape ", x.sizes());
  // One entry into the split region for the three projections (LinearSpec::input_in_region);
  // under sequence parallelism it gathers all T positions.
  const Tensor xr = factory_->enter_split_region(x);
  const int64_t B = xr.size(0), T = xr.size(1), width = local_heads * head_dim;
  auto heads = [&](const Tensor& t) { return transpose(view(t, {B, T, local_heads, head_dim}), 1, 2); };
  AttentionOptions ao;
  ao.attn_mask = mask;
  ao.dropout_p = is_training() ? dropout_p : 0.0;
  ao.generator = generator;
  Tensor q, k, v;
  if (const auto qkv = fused_projections(xr); !qkv.empty()) {
    q = qkv[0];
    k = qkv[1];
    v = qkv[2];
  } else {
    q = query->forward(xr);
    k = key->forward(xr);
    v = value->forward(xr);
  }
  const Tensor y = scaled_dot_product_attention(heads(q), heads(k), heads(v), ao);
  return reshape(transpose(y, 1, 2), {B, T, width});
}

BertResidualOutput::BertResidualOutput(const BertConfig& c, int64_t in, const char* name, Generator* gen)
    : nn::Module("BertOutput") {
  dense = register_module("dense", c.factory().linear(dense_spec(c, name, in, c.hidden_size, LinearKind::Row, gen)));
  LayerNorm = register_module("LayerNorm", residual_layer_norm(c));
  dropout = register_module("dropout", hidden_dropout(c));
}

Tensor BertResidualOutput::forward(const Tensor& h, const Tensor& residual) {
  return LayerNorm->forward_add(dropout->forward(dense->forward(h)), residual).out;
}

BertAttention::BertAttention(const BertConfig& c, Generator* gen) : nn::Module("BertAttention") {
  self = register_module("self", std::make_shared<BertSelfAttention>(c, gen));
  output = register_module("output", std::make_shared<BertResidualOutput>(c, c.hidden_size, "attention.output.dense", gen));
}

Tensor BertAttention::forward(const Tensor& x, const Tensor& mask) { return output->forward(self->forward(x, mask), x); }

BertIntermediate::BertIntermediate(const BertConfig& c, Generator* gen) : nn::Module("BertIntermediate") {
  check_divisible(c.factory(), c.intermediate_size, "BERT: intermediate_size");
  dense = register_module("dense", c.factory().linear(dense_spec(c, "intermediate.dense", c.hidden_size, c.intermediate_size,
                                                                 LinearKind::Column, gen)));
}

Tensor BertIntermediate::forward(const Tensor& x) { return gelu(dense->forward(x)); }

BertLayer::BertLayer(const BertConfig& c, Generator* gen) : Layer("BertLayer") {
  attention = register_module("attention", std::make_shared<BertAttention>(c, gen));
  intermediate = register_module("intermediate", std::make_shared<BertIntermediate>(c, gen));
  output = register_module("output", std::make_shared<BertResidualOutput>(c, c.intermediate_size, "output.dense", gen));
}

Tensor BertLayer::forward(const Tensor& x, const Tensor& mask) {
  const Tensor a = attention->forward(x, mask);
  return output->forward(intermediate->forward(a), a);
}

Activations BertLayer::forward(const Activations& x, const Batch& batch) {
  TRIDENT_CHECK(x.size() == 1, "BERT layer: expected one activation (hidden states), got ", x.size());
  return {forward(x[0], attention_mask_for_keys(batch.get("attention_mask")))};
}

BertEncoder::BertEncoder(const BertConfig& c, Generator* gen, const LayerSelection& keep) : nn::Module("BertEncoder") {
  layer = register_module("layer", std::make_shared<nn::ModuleList<BertLayer>>());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const bool kept = keeps(keep, static_cast<size_t>(i) + 1);
    {
      const nn::init::SkipDrawsGuard skip(!kept);  // NOTE [Skipped draws]
      layer->push_back(std::make_shared<BertLayer>(c, gen));
    }
    if (!kept) release_module(*(*layer)[layer->size() - 1]);
  }
}

BertPooler::BertPooler(const BertConfig& c, Generator* gen) : nn::Module("BertPooler") {
  dense = register_module("dense", c.factory().linear(dense_spec(c, "pooler.dense", c.hidden_size, c.hidden_size,
                                                                 LinearKind::Replicated, gen)));
}

Tensor BertPooler::forward(const Tensor& hidden) { return tanh(dense->forward(select(hidden, 1, 0))); }

BertModel::BertModel(const BertConfig& c, Generator* gen, const LayerSelection& keep)
    : nn::Module("BertModel"), factory_(c.layers ? c.layers : serial_layers()) {
  // NOTE [Stage-only build]: the list is "embeddings" (layer 0), "layer.0" ... (layer i + 1),
  // "heads" (the pooler, the cls heads and the tied word embeddings: layer num_hidden_layers + 1).
  const auto heads = static_cast<size_t>(c.num_hidden_layers) + 1;
  // A module no kept layer holds is built with its draws skipped (NOTE [Skipped draws]) and
  // released at once; the embeddings whole when neither they nor the heads (the tied word
  // embeddings) are kept.
  {
    const nn::init::SkipDrawsGuard skip(!keeps(keep, 0) && !keeps(keep, heads));
    embeddings = register_module("embeddings", std::make_shared<BertEmbeddings>(c, gen));
  }
  if (!keeps(keep, 0)) {
    for (const auto& [name, m] : embeddings->named_children())
      if (m != embeddings->word_embeddings || !keeps(keep, heads)) release_module(*m);
  }
  encoder = register_module("encoder", std::make_shared<BertEncoder>(c, gen, keep));
  {
    const nn::init::SkipDrawsGuard skip(!keeps(keep, heads));
    pooler = register_module("pooler", std::make_shared<BertPooler>(c, gen));
  }
  if (!keeps(keep, heads)) release_module(*pooler);
}

BertModel::Output BertModel::forward(const Tensor& ids, const Tensor& types, const Tensor& attention_mask) {
  const Tensor mask = attention_mask_for_keys(attention_mask);
  Tensor h = embeddings->forward(ids, types);
  for (const auto& l : *encoder->layer) h = l->forward(h, mask);
  h = factory_->gather_sequence(h);  // every position (NOTE [Sequence parallelism])
  return {h, pooler->forward(h)};
}

// ---- heads ----

BertPredictionHeadTransform::BertPredictionHeadTransform(const BertConfig& c, Generator* gen)
    : nn::Module("BertPredictionHeadTransform") {
  dense = register_module("dense", c.factory().linear(dense_spec(c, "cls.predictions.transform.dense", c.hidden_size,
                                                                 c.hidden_size, LinearKind::Replicated, gen)));
  // Not on the residual stream: the MLM head's input is whole on every rank.
  LayerNorm = register_module("LayerNorm", std::make_shared<nn::LayerNorm>(Shape{c.hidden_size}, c.layer_norm_eps, true, c.dtype));
}

Tensor BertPredictionHeadTransform::forward(const Tensor& x) { return LayerNorm->forward(gelu(dense->forward(x))); }

BertLMPredictionHead::BertLMPredictionHead(const BertConfig& c, Generator* gen) : nn::Module("BertLMPredictionHead") {
  transform = register_module("transform", std::make_shared<BertPredictionHeadTransform>(c, gen));
  bias = register_parameter("bias", zeros({c.vocab_rows()}, c.dtype));
}

BertPreTrainingHeads::BertPreTrainingHeads(const BertConfig& c, Generator* gen) : nn::Module("BertPreTrainingHeads") {
  predictions = register_module("predictions", std::make_shared<BertLMPredictionHead>(c, gen));
  seq_relationship = register_module("seq_relationship", c.factory().linear(dense_spec(c, "cls.seq_relationship",
                                                                                       c.hidden_size, 2, LinearKind::Replicated, gen)));
}

// ---- the pre-training model ----

BertForPreTraining::BertForPreTraining(const BertConfig& config, Generator* gen)
    : BertForPreTraining(config, gen, kAllLayers) {}

BertForPreTraining::BertForPreTraining(const BertConfig& config, Generator* gen, const LayerSelection& keep)
    : LayeredModel("BertForPreTraining") {
  config.validate();
  check_keep(keep, static_cast<size_t>(config.num_hidden_layers) + 2, "BERT");
  config_ = config;
  bert = register_module("bert", std::make_shared<BertModel>(config_, gen, keep));
  const bool heads_kept = keeps(keep, static_cast<size_t>(config_.num_hidden_layers) + 1);
  {
    const nn::init::SkipDrawsGuard skip(!heads_kept);
    cls = register_module("cls", std::make_shared<BertPreTrainingHeads>(config_, gen));
  }
  if (!heads_kept) release_module(*cls);
  std::vector<std::pair<std::string, std::shared_ptr<Layer>>> list;
  list.emplace_back("embeddings", bert->embeddings);
  for (size_t i = 0; i < bert->encoder->layer->size(); ++i)
    list.emplace_back("layer." + std::to_string(i), (*bert->encoder->layer)[i]);
  list.emplace_back("heads", std::make_shared<BertHeadsLayer>(bert, cls, config_));
  layers_ = LayerList(std::move(list), *this);
}

std::vector<int64_t> bert_layer_parameters(const BertConfig& config) {
  BertConfig one = config;
  one.num_hidden_layers = 1;
  Generator scratch(0);
  return layer_parameters_from_one_block([&] { return std::make_unique<BertForPreTraining>(one, &scratch); },
      config.num_hidden_layers);
}

BertPreTrainingOutput BertForPreTraining::forward(const Batch& batch) {
  const Activations out = layers_.run(batch);
  BertPreTrainingOutput r;
  if (!mlm_loss_takes_hidden(config_, batch)) r.mlm_logits = out[0];
  r.nsp_logits = out[1];
  if (batch.has("mlm_labels") || batch.has("next_sentence_label")) {
    std::tie(r.mlm_loss, r.nsp_loss) = loss_terms(out, batch);
    r.loss = r.mlm_loss.defined() && r.nsp_loss.defined() ? add(r.mlm_loss, r.nsp_loss)
                                                          : (r.mlm_loss.defined() ? r.mlm_loss : r.nsp_loss);
  }
  return r;
}

std::vector<double> BertForPreTraining::loss_counts(const Batch& batch) const {
  const Tensor mlm = batch.get("mlm_labels"), nsp = batch.get("next_sentence_label");
  return {mlm.defined() ? static_cast<double>(count_labels(mlm)) : 0.0, nsp.defined() ? static_cast<double>(count_labels(nsp)) : 0.0};
}

std::pair<Tensor, Tensor> BertForPreTraining::loss_terms(const Activations& outputs, const Batch& batch,
                                                         const std::vector<double>& counts) const {
  TRIDENT_CHECK(outputs.size() == 2, "BERT loss: expected the heads' {mlm_logits, nsp_logits}, got ", outputs.size(),
                " activations");
  const std::vector<double> n = counts.empty() ? loss_counts(batch) : counts;
  TRIDENT_CHECK(n.size() == 2, "BERT loss: expected 2 target counts (masked tokens, sentence pairs), got ", n.size());
  const LayerFactory& f = config_.factory();
  Tensor mlm, nsp;
  const Tensor labels = batch.get("mlm_labels");
  if (labels.defined()) {
    const Tensor& out = outputs[0];  // logits, or the transformed hidden states (NOTE [Loss without logits])
    const bool hidden = mlm_loss_takes_hidden(config_, batch);
    TRIDENT_CHECK(out.dim() == 2, "BERT loss: MLM ", hidden ? "hidden states" : "logits", " of shape ", out.sizes(),
                  " are not [masked positions, ", hidden ? "hidden_size" : "V",
                  "]: were they computed from a batch with mlm_labels?");
    const Tensor targets = index_select(reshape(labels, {-1}), 0, masked_positions(labels));
    TRIDENT_CHECK(targets.size(0) == out.size(0), "BERT loss: ", targets.size(0), " masked positions in mlm_labels but ",
                  out.size(0), " rows of MLM ", hidden ? "hidden states" : "logits");
    const Tensor total = hidden ? f.tied_cross_entropy(out, bert->embeddings->word_embeddings_weight(), cls->predictions->bias,
                                                       config_.vocab_size, targets, -100, Reduction::Sum)
                                : f.vocab_cross_entropy(out, targets, -100, Reduction::Sum);
    mlm = div(total, n[0]);
  }
  const Tensor next = batch.get("next_sentence_label");
  if (next.defined()) {
    TRIDENT_CHECK(next.dim() == 1 && next.size(0) == outputs[1].size(0), "BERT loss: next_sentence_label of shape ",
                  next.sizes(), " does not match NSP logits of shape ", outputs[1].sizes());
    CrossEntropyOptions o;
    o.reduction = Reduction::Sum;
    nsp = div(cross_entropy(outputs[1], next, o), n[1]);
  }
  return {mlm, nsp};
}

Tensor BertForPreTraining::loss(const Activations& outputs, const Batch& batch, const std::vector<double>& counts) const {
  auto [mlm, nsp] = loss_terms(outputs, batch, counts);
  TRIDENT_CHECK(mlm.defined() || nsp.defined(), "BERT loss: the batch has neither mlm_labels nor next_sentence_label");
  if (mlm.defined() && nsp.defined()) return add(mlm, nsp);
  return mlm.defined() ? mlm : nsp;
}

}  // namespace trident::models
