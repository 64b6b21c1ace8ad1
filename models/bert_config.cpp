#include "models/bert_config.h"

#include <nlohmann/json.hpp>

#include "models/config_json.h"

namespace trident::models {

namespace {

struct Preset {
  const char* name;
  int64_t layers, heads, hidden;
};

// Devlin et al. 2019, section 3.
constexpr Preset kPresets[] = {{"base", 12, 12, 768}, {"large", 24, 16, 1024}, {"tiny", 2, 2, 128}};

template <typename Config, typename V>
void visit_fields(Config& c, V&& v) {
  v("vocab_size", c.vocab_size);
  v("padded_vocab_size", c.padded_vocab_size);
  v("hidden_size", c.hidden_size);
  v("num_hidden_layers", c.num_hidden_layers);
  v("num_attention_heads", c.num_attention_heads);
  v("intermediate_size", c.intermediate_size);
  v("max_position_embeddings", c.max_position_embeddings);
  v("type_vocab_size", c.type_vocab_size);
  v("pad_token_id", c.pad_token_id);
  v("hidden_dropout_prob", c.hidden_dropout_prob);
  v("attention_probs_dropout_prob", c.attention_probs_dropout_prob);
  v("layer_norm_eps", c.layer_norm_eps);
  v("initializer_range", c.initializer_range);
  v("dtype", c.dtype);
}

}  // namespace

void BertConfig::validate() const {
  const char* w = "BERT config";
  TRIDENT_CHECK(vocab_size > 0, w, ": vocab_size must be positive, got ", vocab_size);
  TRIDENT_CHECK(padded_vocab_size == 0 || padded_vocab_size >= vocab_size, w, ": padded_vocab_size ", padded_vocab_size,
                " must be 0 (no padding) or at least vocab_size ", vocab_size);
  TRIDENT_CHECK(num_hidden_layers > 0, w, ": num_hidden_layers must be positive, got ", num_hidden_layers);
  TRIDENT_CHECK(num_attention_heads > 0, w, ": num_attention_heads must be positive, got ", num_attention_heads);
  TRIDENT_CHECK(hidden_size > 0 && hidden_size % num_attention_heads == 0, w, ": hidden_size ", hidden_size,
                " must be a positive multiple of num_attention_heads ", num_attention_heads);
  TRIDENT_CHECK(intermediate_size > 0, w, ": intermediate_size must be positive, got ", intermediate_size);
  TRIDENT_CHECK(max_position_embeddings > 0, w, ": max_position_embeddings must be positive, got ", max_position_embeddings);
  TRIDENT_CHECK(type_vocab_size > 0, w, ": type_vocab_size must be positive, got ", type_vocab_size);
  TRIDENT_CHECK(pad_token_id >= 0 && pad_token_id < vocab_size, w, ": pad_token_id ", pad_token_id, " must be in [0, ",
                vocab_size, ")");
  check_probability(w, "hidden_dropout_prob", hidden_dropout_prob);
  check_probability(w, "attention_probs_dropout_prob", attention_probs_dropout_prob);
  TRIDENT_CHECK(layer_norm_eps > 0, w, ": layer_norm_eps must be positive, got ", layer_norm_eps);
  TRIDENT_CHECK(initializer_range >= 0, w, ": initializer_range must be >= 0, got ", initializer_range);
  TRIDENT_CHECK(is_floating(dtype), w, ": dtype must be floating point, got ", dtype);
}

std::string BertConfig::to_json() const {
  nlohmann::ordered_json j;
  j["model_type"] = "bert";
  visit_fields(*this, JsonWriter{j});
  return j.dump(2);
}

void BertConfig::apply_json(std::string_view text) {
  const nlohmann::json j = parse_config_object("BERT config", text);
  if (j.contains("model_type"))
    TRIDENT_CHECK(j["model_type"] == "bert", "BERT config: model_type ", j["model_type"].dump(),
                  " is not \"bert\" (a config of another model?)");
  BertConfig c = *this;
  if (j.contains("preset")) {
    TRIDENT_CHECK(j["preset"].is_string(), "BERT config: \"preset\" must be a string, got ", j["preset"].dump());
    c = preset(j["preset"].get<std::string>());
    c.layers = layers;
    c.dropout_generator = dropout_generator;
  }
  JsonReader reader{"BERT config", j, /*strict=*/true, {"preset", "model_type"}};
  visit_fields(c, reader);
  reader.check_unknown();
  c.validate();
  *this = c;
}

BertConfig BertConfig::from_json(std::string_view json) {
  BertConfig c;
  c.apply_json(json);
  return c;
}

BertConfig BertConfig::from_hf_config(std::string_view text) {
  const nlohmann::json j = parse_config_object("Hugging Face BERT config", text);
  if (j.contains("hidden_act"))
    TRIDENT_CHECK(j["hidden_act"] == "gelu", "Hugging Face BERT config: hidden_act ", j["hidden_act"].dump(),
                  " is not supported (Trident's BERT uses the exact GELU, \"gelu\")");
  BertConfig c;
  JsonReader reader{"Hugging Face BERT config", j, /*strict=*/false, {}};
  visit_fields(c, [&](const char* key, auto& field) {
    if (std::string_view(key) != "dtype") reader(key, field);
  });
  c.validate();
  return c;
}

BertConfig BertConfig::preset(std::string_view name, std::string_view overrides) {
  for (const Preset& p : kPresets) {
    if (name != p.name) continue;
    BertConfig c;
    c.num_hidden_layers = p.layers;
    c.num_attention_heads = p.heads;
    c.hidden_size = p.hidden;
    c.intermediate_size = 4 * p.hidden;
    if (!overrides.empty()) c.apply_json(overrides);
    return c;
  }
  TRIDENT_FAIL("unknown BERT preset '", std::string(name), "' (expected one of ", preset_names(), ")");
}

std::vector<std::string> BertConfig::preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

int64_t BertConfig::num_parameters_base() const {
  const int64_t H = hidden_size, I = intermediate_size;
  const int64_t embeddings = vocab_rows() * H + max_position_embeddings * H + type_vocab_size * H + 2 * H;
  const int64_t layer = 3 * (H * H + H)  // query, key, value
                        + H * H + H      // attention.output.dense
                        + 2 * H          // attention.output.LayerNorm
                        + H * I + I      // intermediate.dense
                        + I * H + H      // output.dense
                        + 2 * H;         // output.LayerNorm
  const int64_t pooler = H * H + H;
  return embeddings + num_hidden_layers * layer + pooler;
}

int64_t BertConfig::num_parameters() const {
  const int64_t H = hidden_size;
  return num_parameters_base() + H * H + H + 2 * H + vocab_rows() + 2 * H + 2;
}

MemoryEstimate BertConfig::estimate_memory(int64_t batch, int64_t seq_len, int64_t predictions, const MemoryOptions& o) const {
  TRIDENT_CHECK(batch > 0 && seq_len > 0 && seq_len <= max_position_embeddings && predictions >= 0 && predictions <= seq_len,
                "BERT memory estimate: batch ", batch, ", seq_len ", seq_len, " and predictions ", predictions,
                " must be positive (predictions >= 0), seq_len at most max_position_embeddings ", max_position_embeddings,
                ", predictions at most seq_len");
  const int64_t n = num_parameters(), H = hidden_size, I = intermediate_size;
  const int64_t V = padded_vocab_size > vocab_size && o.cuda ? vocab_rows() + vocab_size : vocab_size;
  MemoryEstimate e;
  e.parameters = n * o.param_bytes;
  e.gradients = n * o.grad_bytes;
  e.optimizer = n * o.optimizer_slots * o.optimizer_bytes;
  const int64_t per_token = num_hidden_layers * (10 * H + 2 * I + num_attention_heads + 4) + 3 * H;
  const int64_t logits = o.logits_tiled && loss_without_logits ? 0 : 2 * V;  // the logits and their gradient
  const int64_t per_prediction = 3 * H + logits;
  e.activations = (batch * seq_len * per_token + batch * predictions * per_prediction) * o.activation_bytes;
  return e;
}

}  // namespace trident::models
