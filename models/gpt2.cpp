#include "models/gpt2.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "core/factory.h"
#include "nn/embedding.h"
#include "nn/init.h"
#include "ops/arith.h"
#include "ops/attention.h"
#include "ops/compare.h"
#include "ops/linalg.h"
#include "ops/index.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/unary.h"

namespace trident::models {

namespace {

using InitFn = std::function<void(const Tensor&)>;

InitFn normal_init(double std, Generator* gen) {
  return [std, gen](const Tensor& w) { nn::init::normal_(w, 0.0, std, gen); };
}

// The projections writing into the residual stream: N(0, range / sqrt(2 n_layer)).
InitFn residual_init(const GPT2Config& c, Generator* gen) {
  return [range = c.initializer_range, L = c.n_layer, gen](const Tensor& w) {
    nn::init::gpt2_residual_normal_(w, L, gen);  // std 0.02 / sqrt(2 L)
    if (range != 0.02) mul_(w, range / 0.02);
  };
}

LinearSpec conv1d(const char* name, int64_t in, int64_t out, LinearKind kind, InitFn init, DType dtype, int64_t parts = 1) {
  LinearSpec s;
  s.name = name;
  s.in_features = in;
  s.out_features = out;
  s.kind = kind;
  s.layout = WeightLayout::InOut;
  s.fused_parts = parts;
  s.init_weight = std::move(init);
  s.dtype = dtype;
  return s;
}

// Views of the model's modules as the first and last layers (NOTE [Layer list]).
class GPT2EmbeddingLayer : public Layer {
 public:
  explicit GPT2EmbeddingLayer(std::shared_ptr<GPT2Model> t, const GPT2Config& c)
      : Layer("GPT2Embedding"), t_(std::move(t)), n_positions_(c.n_positions) {
    register_module("wte", t_->wte);
    register_module("wpe", t_->wpe);
  }
  Activations forward(const Activations& x, const Batch& batch) override {
    TRIDENT_CHECK(x.empty(), "GPT-2 embedding layer: expected no activations (it reads batch \"input_ids\"), got ", x.size());
    return {embed(*t_, batch.at("input_ids"), 0, n_positions_)};
  }
  // wte(ids) + wpe(past .. past + T), entering the residual stream (this rank's positions under
  // sequence parallelism), then dropout. The last `padding` positions are padding (NOTE
  // [Sequence-parallel decoding]): left out of the context check, their positions clamped to it.
  static Tensor embed(const GPT2Model& t, const Tensor& ids, int64_t past, int64_t n_positions, int64_t padding = 0) {
    TRIDENT_CHECK(ids.dim() == 2 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32),
                  "GPT-2: input_ids must be [B, T] of i64 or i32, got shape ", ids.sizes(), " of ", ids.dtype());
    const int64_t T = ids.size(1);
    TRIDENT_CHECK(past + T - padding <= n_positions, "GPT-2: ", past + T - padding, " positions exceed the context n_positions = ",
                  n_positions, past > 0 ? " (cached positions included)" : "");
    // On the ids' device: the position embedding's indices must be where its weight is.
    Tensor pos =
        arange(static_cast<double>(past), static_cast<double>(past + T), 1.0, TensorOptions(DType::I64).device(ids.device()));
    if (past + T > n_positions) pos = clamp(pos, 0.0, static_cast<double>(n_positions - 1));
    return t.drop->forward(t.factory->scatter_sequence(add(t.wte->forward(ids), t.wpe->forward(pos))));
  }

 private:
  std::shared_ptr<GPT2Model> t_;
  int64_t n_positions_;
};

// NOTE [Loss without logits]: whether the head hands the loss its hidden states (ln_f's output)
// rather than logits: a batch with targets, where the config and the factory allow it.
bool loss_takes_hidden(const GPT2Config& c, const Batch& batch) {
  return c.loss_without_logits && batch.has("targets") && c.factory().tied_cross_entropy_fused();
}

class GPT2HeadLayer : public Layer {
 public:
  GPT2HeadLayer(std::shared_ptr<GPT2Model> t, const GPT2Config& c) : Layer("GPT2Head"), t_(std::move(t)), config_(c) {
    register_module("ln_f", t_->ln_f);
    register_module("wte", t_->wte);  // tied: the output layer is the token embedding table
  }
  Activations forward(const Activations& x, const Batch& batch) override {
    TRIDENT_CHECK(x.size() == 1, "GPT-2 head: expected one activation (hidden states), got ", x.size());
    if (loss_takes_hidden(config_, batch)) return {t_->ln_f->forward(x[0])};
    return {logits(*t_, config_, x[0])};
  }
  static Tensor logits(const GPT2Model& t, const GPT2Config& c, const Tensor& h) {
    return c.factory().residual_tied_logits(t.ln_f->forward(h), t.wte_weight(), c.vocab_size);
  }

 private:
  std::shared_ptr<GPT2Model> t_;
  GPT2Config config_;
};

}  // namespace

// ---- attention ----

GPT2Attention::GPT2Attention(const GPT2Config& c, Generator* gen)
    : nn::Module("GPT2Attention"), n_head(c.n_head), head_dim(c.head_dim()), attn_pdrop(c.attn_pdrop) {
  const LayerFactory& f = c.factory();
  check_divisible(f, c.n_head, "GPT-2: n_head");
  local_heads = c.n_head / f.partitions();
  attn_generator = f.dropout_generator(DropoutSite::Split, c.dropout_generator);
  const int64_t C = c.n_embd;
  c_attn = register_module("c_attn", f.linear(conv1d("attn.c_attn", C, 3 * C, LinearKind::Column,
                                                     normal_init(c.initializer_range, gen), c.dtype, 3)));
  c_proj = register_module("c_proj", f.linear(conv1d("attn.c_proj", C, C, LinearKind::Row, residual_init(c, gen), c.dtype)));
  resid_dropout = register_module(
      "resid_dropout", std::make_shared<nn::Dropout>(c.resid_pdrop, f.dropout_generator(DropoutSite::Residual, c.dropout_generator)));
}

Tensor GPT2Attention::forward(const Tensor& x, GPT2KVCache* cache, int64_t layer) {
  TRIDENT_CHECK(x.dim() == 3, "GPT-2 attention: expected input [B, T, C], got shape ", x.sizes());
  // Under sequence parallelism x holds this rank's positions and c_attn gathers all T of them.
  const Tensor qkv = c_attn->forward(x);  // [B, T, 3 width]: [q | k | v] of this rank's heads
  const int64_t B = qkv.size(0), T = qkv.size(1), width = local_heads * head_dim;
  TRIDENT_ASSERT(qkv.size(2) == 3 * width, "c_attn returned shape ", qkv.sizes(), " for ", local_heads, " heads of ", head_dim);
  const std::vector<Tensor> parts = split(qkv, width, 2);
  // [B, T, width] -> [B, heads, T, head_dim]: views; the attention kernel reads strided rows.
  auto heads = [&](const Tensor& t) { return transpose(view(t, {B, T, local_heads, head_dim}), 1, 2); };
  Tensor q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);
  AttentionOptions ao;
  ao.dropout_p = is_training() ? attn_pdrop : 0.0;
  ao.generator = attn_generator;
  ao.is_causal = true;
  if (cache) {
    TRIDENT_CHECK(!autograd::GradMode::is_enabled(),
                  "GPT-2 attention: the key/value cache is for inference; run it under NoGradGuard");
    TRIDENT_CHECK(layer >= 0 && layer < static_cast<int64_t>(cache->keys.size()), "GPT-2 attention: layer ", layer,
                  " out of range for a cache of ", cache->keys.size(), " layers");
    const int64_t past = cache->length;
    TRIDENT_CHECK(B == cache->batch() && past + T <= cache->room(), "GPT-2 attention: ", T, " new positions of a batch of ",
                  B, " do not fit a cache of batch ", cache->batch(), " holding ", past, " of ", cache->room(), " positions");
    const Tensor& K = cache->keys[static_cast<size_t>(layer)];
    const Tensor& V = cache->values[static_cast<size_t>(layer)];
    copy_(narrow(K, 2, past, T), k);
    copy_(narrow(V, 2, past, T), v);
    k = narrow(K, 2, 0, past + T);
    v = narrow(V, 2, 0, past + T);
    if (past > 0) {
      // The fused op's causal mask is top-left aligned (query i sees keys <= i); with cached keys
      // query i is position past + i: it sees keys <= past + i. One new query sees everything.
      ao.is_causal = false;
      if (T > 1) {
        // f32 positions (exact below 2^24): the CUDA comparisons take floating tensors.
        const TensorOptions on(TensorOptions(DType::F32).device(q.device()));
        const Tensor keys = arange(0.0, static_cast<double>(past + T), 1.0, on);
        const Tensor queries = arange(static_cast<double>(past), static_cast<double>(past + T), 1.0, on);
        ao.attn_mask = le(unsqueeze(keys, 0), unsqueeze(queries, 1));  // [T, past + T]
      }
    }
  }
  const Tensor y = scaled_dot_product_attention(q, k, v, ao);  // [B, heads, T, head_dim]
  return resid_dropout->forward(c_proj->forward(reshape(transpose(y, 1, 2), {B, T, width})));
}

// ---- MLP ----

GPT2MLP::GPT2MLP(const GPT2Config& c, Generator* gen) : nn::Module("GPT2MLP") {
  const LayerFactory& f = c.factory();
  const int64_t C = c.n_embd;
  check_divisible(f, 4 * C, "GPT-2: MLP width 4 n_embd =");
  c_fc = register_module("c_fc", f.linear(conv1d("mlp.c_fc", C, 4 * C, LinearKind::Column, normal_init(c.initializer_range, gen), c.dtype)));
  c_proj = register_module("c_proj", f.linear(conv1d("mlp.c_proj", 4 * C, C, LinearKind::Row, residual_init(c, gen), c.dtype)));
  dropout = register_module(
      "dropout", std::make_shared<nn::Dropout>(c.resid_pdrop, f.dropout_generator(DropoutSite::Residual, c.dropout_generator)));
}

Tensor GPT2MLP::forward(const Tensor& x) {
  // The serial c_fc and GELU as one op: on a GPU, GELU runs in the GEMM's epilogue
  // (ops/linalg.h linear_gelu); a tensor-parallel c_fc (its own forward) keeps the two ops.
  Tensor h;
  if (const auto* dense = dynamic_cast<const DenseLayer*>(c_fc.get())) {
    const Tensor w = dense->layout == WeightLayout::InOut ? transpose(dense->weight, 0, 1) : dense->weight;
    h = linear_gelu(x, w, dense->bias, GeluApproximation::Tanh);
  } else {
    h = gelu(c_fc->forward(x), GeluApproximation::Tanh);
  }
  return dropout->forward(c_proj->forward(h));
}

// ---- block ----

GPT2Block::GPT2Block(const GPT2Config& c, Generator* gen) : Layer("GPT2Block") {
  ln_1 = register_module("ln_1", c.factory().residual_layer_norm(c.n_embd, c.layer_norm_epsilon, c.dtype));
  attn = register_module("attn", std::make_shared<GPT2Attention>(c, gen));
  ln_2 = register_module("ln_2", c.factory().residual_layer_norm(c.n_embd, c.layer_norm_epsilon, c.dtype));
  mlp = register_module("mlp", std::make_shared<GPT2MLP>(c, gen));
}

Tensor GPT2Block::forward(const Tensor& x, GPT2KVCache* cache, int64_t layer) {
  // h = x + attn(ln_1(x)) and ln_2(h) in one op (NOTE [Fused residual layer norm]).
  const AddLayerNorm h = ln_2->forward_add(x, attn->forward(ln_1->forward(x), cache, layer));
  return add(h.sum, mlp->forward(h.out));
}

Activations GPT2Block::forward(const Activations& x, const Batch&) {
  TRIDENT_CHECK(x.size() == 1, "GPT-2 block: expected one activation (hidden states), got ", x.size());
  return {forward(x[0])};
}

// ---- the model ----

GPT2Model::GPT2Model(const GPT2Config& c, Generator* gen, const LayerSelection& keep)
    : nn::Module("GPT2Model"), factory(c.layers ? c.layers : serial_layers()) {
  // NOTE [Stage-only build]: the list is "embedding" (wte, wpe), "h.0" ... (block i is layer
  // i + 1), "head" (ln_f and the tied wte: layer n_layer + 1).
  const auto head = static_cast<size_t>(c.n_layer) + 1;
  const LayerFactory& f = *factory;
  EmbeddingSpec e;
  e.name = "wte";
  e.num_embeddings = c.vocab_rows();
  e.embedding_dim = c.n_embd;
  e.dtype = c.dtype;
  // Padded rows start (and, never predicted nor looked up, stay) at zero.
  e.init_weight = [std = c.initializer_range, V = c.vocab_size, gen](const Tensor& w) {
    nn::init::normal_(w, 0.0, std, gen);
    if (w.size(0) > V) fill_(narrow(w, 0, V, w.size(0) - V), 0.0);
  };
  // A module no kept layer holds is built with its draws skipped (NOTE [Skipped draws]) and
  // released at once.
  const bool wte_kept = keeps(keep, 0) || keeps(keep, head);
  {
    const nn::init::SkipDrawsGuard skip(!wte_kept);
    wte = register_module("wte", f.vocab_embedding(e));
  }
  if (!wte_kept) release_module(*wte);
  {
    const nn::init::SkipDrawsGuard skip(!keeps(keep, 0));
    wpe = register_module("wpe", std::make_shared<nn::Embedding>(c.n_positions, c.n_embd, std::nullopt, c.dtype));
    nn::init::normal_(wpe->weight, 0.0, c.initializer_range, gen);
  }
  if (!keeps(keep, 0)) release_module(*wpe);
  drop = register_module("drop", std::make_shared<nn::Dropout>(c.embd_pdrop, f.dropout_generator(DropoutSite::Residual, c.dropout_generator)));
  h = register_module("h", std::make_shared<nn::ModuleList<GPT2Block>>());
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const bool kept = keeps(keep, static_cast<size_t>(i) + 1);
    {
      const nn::init::SkipDrawsGuard skip(!kept);
      h->push_back(std::make_shared<GPT2Block>(c, gen));
    }
    if (!kept) release_module(*(*h)[h->size() - 1]);
  }
  ln_f = register_module("ln_f", f.residual_layer_norm(c.n_embd, c.layer_norm_epsilon, c.dtype));
  if (!keeps(keep, head)) release_module(*ln_f);
}

Tensor GPT2Model::wte_weight() const {
  for (const auto& [name, t] : wte->named_parameters(false))
    if (name == "weight") return t;
  TRIDENT_FAIL("GPT-2: the token embedding module ", wte->type_name(), " has no parameter 'weight'");
}

GPT2LMHeadModel::GPT2LMHeadModel(const GPT2Config& config, Generator* init_gen)
    : GPT2LMHeadModel(config, init_gen, kAllLayers) {}

GPT2LMHeadModel::GPT2LMHeadModel(const GPT2Config& config, Generator* init_gen, const LayerSelection& keep)
    : LayeredModel("GPT2LMHeadModel") {
  config.validate();
  check_keep(keep, static_cast<size_t>(config.n_layer) + 2, "GPT-2");
  config_ = config;
  transformer = register_module("transformer", std::make_shared<GPT2Model>(config_, init_gen, keep));
  std::vector<std::pair<std::string, std::shared_ptr<Layer>>> list;
  list.emplace_back("embedding", std::make_shared<GPT2EmbeddingLayer>(transformer, config_));
  for (size_t i = 0; i < transformer->h->size(); ++i) list.emplace_back("h." + std::to_string(i), (*transformer->h)[i]);
  list.emplace_back("head", std::make_shared<GPT2HeadLayer>(transformer, config_));
  layers_ = LayerList(std::move(list), *this);
}

std::vector<int64_t> gpt2_layer_parameters(const GPT2Config& config) {
  GPT2Config one = config;
  one.n_layer = 1;
  Generator scratch(0);
  return layer_parameters_from_one_block([&] { return std::make_unique<GPT2LMHeadModel>(one, &scratch); },
      config.n_layer);
}

LMOutput GPT2LMHeadModel::forward(const Tensor& input_ids, const Tensor& targets) {
  Batch batch;
  batch.set("input_ids", input_ids).set("targets", targets);
  const Activations out = layers_.run(batch);
  LMOutput r;
  if (!loss_takes_hidden(config_, batch)) r.logits = out[0];
  if (targets.defined()) r.loss = loss(out, batch);
  return r;
}

std::vector<double> GPT2LMHeadModel::loss_counts(const Batch& batch) const {
  const Tensor& t = batch.at("targets");
  TRIDENT_CHECK(t.dtype() == DType::I64, "GPT-2: targets must be i64, got ", t.dtype());
  // Counted on the host (a CUDA batch is copied back: the count is a host value anyway).
  const Tensor h = t.device().is_cpu() ? t : t.to(kCPU);
  return {sum(ne(h, -100.0).to(DType::F64)).item<double>()};
}

Tensor GPT2LMHeadModel::loss(const Activations& outputs, const Batch& batch, const std::vector<double>& counts) const {
  TRIDENT_CHECK(outputs.size() == 1, "GPT-2 loss: expected the head's output, got ", outputs.size(), " activations");
  const Tensor& out = outputs[0];  // logits, or the final hidden states (NOTE [Loss without logits])
  const Tensor& targets = batch.at("targets");
  const bool hidden = loss_takes_hidden(config_, batch);
  TRIDENT_CHECK(out.dim() == 3 && targets.sizes() == Shape(out.sizes().begin(), out.sizes().end() - 1),
                "GPT-2 loss: targets of shape ", targets.sizes(), " do not match ", hidden ? "hidden states" : "logits",
                " of shape ", out.sizes());
  const std::vector<double> n = counts.empty() ? loss_counts(batch) : counts;
  TRIDENT_CHECK(n.size() == 1, "GPT-2 loss: expected 1 target count, got ", n.size());
  const LayerFactory& f = config_.factory();
  const Tensor flat = reshape(out, {out.size(0) * out.size(1), out.size(2)}), t = reshape(targets, {-1});
  const Tensor total = hidden ? f.tied_cross_entropy(flat, transformer->wte_weight(), Tensor(), config_.vocab_size, t, -100,
                                                     Reduction::Sum)
                              : f.vocab_cross_entropy(flat, t, -100, Reduction::Sum);
  return div(total, n[0]);
}

Tensor GPT2LMHeadModel::forward_cached(const Tensor& input_ids, GPT2KVCache& cache, bool last_position_only) {
  TRIDENT_CHECK(!autograd::GradMode::is_enabled(), "GPT-2 forward_cached is for inference; run it under NoGradGuard");
  TRIDENT_CHECK(static_cast<int64_t>(cache.keys.size()) == config_.n_layer, "GPT-2 forward_cached: a cache of ",
                cache.keys.size(), " layers for a model of ", config_.n_layer);
  // NOTE [Sequence-parallel decoding]: under sequence parallelism the residual stream holds T / tp
  // positions per rank, so a step of T new tokens not dividing by tp (one token at a time, the
  // usual generation step) is padded on the right to a multiple of tp with copies of its last
  // token. Causal attention keeps the real positions from seeing the padding, whose keys and
  // values land in the cache past the real ones and are overwritten by the next step (the cache
  // advances by the real T only; make_cache leaves room for the padding), and whose logits are
  // dropped. The real positions' values are those of an unpadded step.
  const LayerFactory& f = config_.factory();
  const int64_t T = input_ids.size(1);
  const int64_t padding = f.sequence_parallel() && input_ids.dim() == 2 ? (f.partitions() - T % f.partitions()) % f.partitions() : 0;
  TRIDENT_CHECK(cache.length + T <= cache.capacity(), "GPT-2 forward_cached: ", T, " new positions do not fit a cache holding ",
                cache.length, " of ", cache.capacity(), " positions");
  Tensor ids = input_ids;
  if (padding > 0) {
    TRIDENT_CHECK(T > 0, "GPT-2 forward_cached: no new tokens");
    ids = cat({input_ids, expand(narrow(input_ids, 1, T - 1, 1), {input_ids.size(0), padding})}, 1);
  }
  Tensor h = GPT2EmbeddingLayer::embed(*transformer, ids, cache.length, config_.n_positions, padding);
  for (size_t i = 0; i < transformer->h->size(); ++i) h = (*transformer->h)[i]->forward(h, &cache, static_cast<int64_t>(i));
  cache.length += T;
  // Only the last position through the output layer; under sequence parallelism the positions
  // are spread over the ranks (the last one, or the padding after it, on the last), so the
  // whole step's logits are gathered and narrowed instead.
  const bool narrow_first = last_position_only && !f.sequence_parallel();
  if (narrow_first) h = narrow(h, 1, T - 1, 1);
  const Tensor logits = f.full_logits(GPT2HeadLayer::logits(*transformer, config_, h));
  if (last_position_only && !narrow_first) return narrow(logits, 1, T - 1, 1);
  return padding > 0 ? narrow(logits, 1, 0, T) : logits;
}

GPT2KVCache GPT2LMHeadModel::make_cache(int64_t batch, int64_t capacity) const {
  TRIDENT_CHECK(batch > 0 && capacity > 0 && capacity <= config_.n_positions, "GPT-2 cache: batch ", batch,
                " and capacity ", capacity, " must be positive, capacity at most n_positions ", config_.n_positions);
  GPT2KVCache c;
  // Room for a sequence-parallel step's padding (NOTE [Sequence-parallel decoding]).
  const LayerFactory& f = config_.factory();
  const int64_t room = f.sequence_parallel() ? capacity + f.partitions() - 1 : capacity;
  if (room != capacity) c.limit = capacity;
  const GPT2Attention& a = *(*transformer->h)[0]->attn;
  // On the model's device (generation on a GPU keeps the cache there).
  const TensorOptions on = TensorOptions(config_.dtype).device(parameters().front().device());
  for (int64_t i = 0; i < config_.n_layer; ++i) {
    c.keys.push_back(zeros({batch, a.local_heads, room, a.head_dim}, on));
    c.values.push_back(zeros({batch, a.local_heads, room, a.head_dim}, on));
  }
  return c;
}

}  // namespace trident::models
