#include "models/gpt2_config.h"

#include <nlohmann/json.hpp>

#include "models/config_json.h"

namespace trident::models {

namespace {

struct Preset {
  const char* name;
  int64_t n_layer, n_head, n_embd, n_positions, padded_vocab_size;
};

// Radford et al. 2019 (Table 2) for the four GPT-2 sizes; Shoeybi et al. 2019 (Table 2) for 8.3B.
constexpr Preset kPresets[] = {
    {"124M", 12, 12, 768, 1024, 0},   {"355M", 24, 16, 1024, 1024, 0},    {"774M", 36, 20, 1280, 1024, 0},
    {"1.5B", 48, 25, 1600, 1024, 0},  {"8.3B", 72, 32, 3072, 1024, 51200}, {"tiny", 4, 4, 256, 256, 50304},
};

// Every JSON field of the config, visited in one place so that reading and writing agree.
template <typename Config, typename V>
void visit_fields(Config& c, V&& v) {
  v("n_layer", c.n_layer);
  v("n_head", c.n_head);
  v("n_embd", c.n_embd);
  v("vocab_size", c.vocab_size);
  v("padded_vocab_size", c.padded_vocab_size);
  v("n_positions", c.n_positions);
  v("embd_pdrop", c.embd_pdrop);
  v("attn_pdrop", c.attn_pdrop);
  v("resid_pdrop", c.resid_pdrop);
  v("layer_norm_epsilon", c.layer_norm_epsilon);
  v("initializer_range", c.initializer_range);
  v("dtype", c.dtype);
}

}  // namespace

void GPT2Config::validate() const {
  TRIDENT_CHECK(n_layer > 0, "GPT-2 config: n_layer must be positive, got ", n_layer);
  TRIDENT_CHECK(n_head > 0, "GPT-2 config: n_head must be positive, got ", n_head);
  TRIDENT_CHECK(n_embd > 0 && n_embd % n_head == 0, "GPT-2 config: n_embd ", n_embd, " must be a positive multiple of n_head ",
                n_head);
  TRIDENT_CHECK(vocab_size > 0, "GPT-2 config: vocab_size must be positive, got ", vocab_size);
  TRIDENT_CHECK(padded_vocab_size == 0 || padded_vocab_size >= vocab_size, "GPT-2 config: padded_vocab_size ",
                padded_vocab_size, " must be 0 (no padding) or at least vocab_size ", vocab_size);
  TRIDENT_CHECK(n_positions > 0, "GPT-2 config: n_positions must be positive, got ", n_positions);
  check_probability("GPT-2 config", "embd_pdrop", embd_pdrop);
  check_probability("GPT-2 config", "attn_pdrop", attn_pdrop);
  check_probability("GPT-2 config", "resid_pdrop", resid_pdrop);
  TRIDENT_CHECK(layer_norm_epsilon > 0, "GPT-2 config: layer_norm_epsilon must be positive, got ", layer_norm_epsilon);
  TRIDENT_CHECK(initializer_range >= 0, "GPT-2 config: initializer_range must be >= 0, got ", initializer_range);
  TRIDENT_CHECK(is_floating(dtype), "GPT-2 config: dtype must be floating point, got ", dtype);
}

std::string GPT2Config::to_json() const {
  nlohmann::ordered_json j;
  j["model_type"] = "gpt2";
  visit_fields(*this, JsonWriter{j});
  return j.dump(2);
}

void GPT2Config::apply_json(std::string_view text) {
  const nlohmann::json j = parse_config_object("GPT-2 config", text);
  if (j.contains("model_type"))
    TRIDENT_CHECK(j["model_type"] == "gpt2", "GPT-2 config: model_type ", j["model_type"].dump(),
                  " is not \"gpt2\" (a config of another model?)");
  GPT2Config c = *this;
  if (j.contains("preset")) {
    TRIDENT_CHECK(j["preset"].is_string(), "GPT-2 config: \"preset\" must be a string, got ", j["preset"].dump());
    c = preset(j["preset"].get<std::string>());
    c.layers = layers;
    c.dropout_generator = dropout_generator;
  }
  JsonReader reader{"GPT-2 config", j, /*strict=*/true, {"preset", "model_type"}};
  visit_fields(c, reader);
  reader.check_unknown();
  c.validate();
  *this = c;
}

GPT2Config GPT2Config::from_json(std::string_view json) {
  GPT2Config c;
  c.apply_json(json);
  return c;
}

GPT2Config GPT2Config::from_hf_config(std::string_view text) {
  nlohmann::json j = parse_config_object("Hugging Face GPT-2 config", text);
  if (!j.contains("n_positions") && j.contains("n_ctx")) j["n_positions"] = j["n_ctx"];
  // Hugging Face's files name the dtype "torch_dtype" ("float32"); ours "dtype". Weights load
  // into f32 unless asked otherwise, whatever the file was saved in.
  GPT2Config c;
  JsonReader reader{"Hugging Face GPT-2 config", j, /*strict=*/false, {}};
  visit_fields(c, [&](const char* key, auto& field) {
    if (std::string_view(key) != "dtype") reader(key, field);
  });
  c.validate();
  return c;
}

GPT2Config GPT2Config::preset(std::string_view name, std::string_view overrides) {
  for (const Preset& p : kPresets) {
    if (name != p.name) continue;
    GPT2Config c;
    c.n_layer = p.n_layer;
    c.n_head = p.n_head;
    c.n_embd = p.n_embd;
    c.n_positions = p.n_positions;
    c.padded_vocab_size = p.padded_vocab_size;
    if (!overrides.empty()) c.apply_json(overrides);
    return c;
  }
  TRIDENT_FAIL("unknown GPT-2 preset '", std::string(name), "' (expected one of ", preset_names(), ")");
}

std::vector<std::string> GPT2Config::preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

int64_t GPT2Config::num_parameters() const {
  const int64_t C = n_embd;
  const int64_t block = 2 * C                    // ln_1
                        + C * 3 * C + 3 * C      // c_attn
                        + C * C + C              // attn.c_proj
                        + 2 * C                  // ln_2
                        + C * 4 * C + 4 * C      // c_fc
                        + 4 * C * C + C;         // mlp.c_proj
  return vocab_rows() * C + n_positions * C + n_layer * block + 2 * C;
}

MemoryEstimate GPT2Config::estimate_memory(int64_t batch, int64_t seq_len, const MemoryOptions& o) const {
  TRIDENT_CHECK(batch > 0 && seq_len > 0 && seq_len <= n_positions, "GPT-2 memory estimate: batch ", batch,
                " and seq_len ", seq_len, " must be positive, seq_len at most n_positions ", n_positions);
  const int64_t n = num_parameters(), C = n_embd, tokens = batch * seq_len;
  const int64_t V = padded_vocab_size > vocab_size && o.cuda ? vocab_rows() + vocab_size : vocab_size;
  MemoryEstimate e;
  e.parameters = n * o.param_bytes;
  e.gradients = n * o.grad_bytes;
  e.optimizer = n * o.optimizer_slots * o.optimizer_bytes;
  const int64_t logits = o.logits_tiled && loss_without_logits ? 0 : 2 * V;  // the logits and their gradient
  const int64_t per_token = n_layer * (17 * C + n_head + 4) + 2 * C + logits;
  e.activations = tokens * per_token * o.activation_bytes;
  return e;
}

}  // namespace trident::models
