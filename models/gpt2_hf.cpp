#include "models/gpt2_hf.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "models/hf_weights.h"
#include "nn/safetensors.h"
#include "nn/init.h"

namespace trident::models {

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

const std::string kPrefix = "transformer.";

// A Hugging Face name without "transformer.", or "" for tensors Trident does not keep.
std::string gpt2_local_name(const std::string& name) {
  const std::string n = starts_with(name, kPrefix) ? name.substr(kPrefix.size()) : name;
  // The causal-mask buffers of older files (not the attention's c_attn/c_proj biases).
  if (starts_with(n, "h.") && (ends_with(n, ".attn.bias") || ends_with(n, ".attn.masked_bias"))) return "";
  return n;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TRIDENT_CHECK(in, "cannot read ", path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace

void load_gpt2_hf_weights(GPT2LMHeadModel& model, const nn::StateDict& hf, const std::string& source_name) {
  nn::StateDict mapped;
  Tensor lm_head;
  for (const auto& [name, t] : hf) {
    if (name == "lm_head.weight") {
      lm_head = t;
      continue;
    }
    const std::string local = gpt2_local_name(name);
    if (local.empty()) continue;
    TRIDENT_CHECK(mapped.emplace(kPrefix + local, t).second, "loading ", source_name, ": '", local,
                  "' appears both with and without the \"transformer.\" prefix");
  }
  const std::string wte = kPrefix + "wte.weight";
  if (lm_head.defined()) {
    auto it = mapped.find(wte);
    TRIDENT_CHECK(it != mapped.end() && same_values(lm_head, it->second), "loading ", source_name,
                  ": lm_head.weight (shape ", lm_head.sizes(), ") differs from ", wte,
                  "; Trident's GPT-2 ties its output layer to the token embeddings");
  }
  load_weights(model, mapped, {{wte, model.config().vocab_size}}, source_name);
}

nn::StateDict gpt2_hf_weights(const GPT2LMHeadModel& model) {
  return unpadded_state_dict(model, {{kPrefix + "wte.weight", model.config().vocab_size}});
}

std::shared_ptr<GPT2LMHeadModel> load_gpt2_hf(const std::string& path, const std::string& overrides) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  TRIDENT_CHECK(fs::exists(p), "GPT-2 checkpoint ", path, " does not exist");
  const fs::path file = fs::is_directory(p) ? p / "model.safetensors" : p;
  const fs::path config_file = file.parent_path() / "config.json";
  TRIDENT_CHECK(fs::exists(file), "GPT-2 checkpoint: ", file.string(), " does not exist");
  const nn::SafetensorsHeader header = nn::read_safetensors_header(file.string());
  GPT2Config config;
  if (fs::exists(config_file)) {
    try {
      config = GPT2Config::from_hf_config(read_text(config_file.string()));
    } catch (const Error& e) {
      TRIDENT_FAIL(config_file.string(), ": ", e.message());
    }
  } else {
    // The sizes from the shapes.
    std::set<int64_t> blocks;
    bool have_wte = false, have_wpe = false;
    for (const nn::SafetensorsEntry& e : header.entries) {
      const std::string n = gpt2_local_name(e.name);
      if (n == "wte.weight" && e.shape.size() == 2) {
        config.vocab_size = e.shape[0];
        config.n_embd = e.shape[1];
        have_wte = true;
      } else if (n == "wpe.weight" && e.shape.size() == 1 + 1) {
        config.n_positions = e.shape[0];
        have_wpe = true;
      } else if (starts_with(n, "h.")) {
        blocks.insert(std::stoll(n.substr(2, n.find('.', 2) - 2)));
      }
    }
    TRIDENT_CHECK(have_wte && have_wpe && !blocks.empty(), file.string(),
                  " does not look like a GPT-2 checkpoint (no wte.weight, wpe.weight or h.* tensors) and has no config.json beside it");
    config.n_layer = static_cast<int64_t>(blocks.size());
    // The head count is not in the shapes: GPT-2's heads are 64 wide (every released size).
    TRIDENT_CHECK(config.n_embd % 64 == 0, file.string(), " has no config.json beside it, and its width ", config.n_embd,
                  " is not a multiple of 64 (GPT-2's head size), so its number of heads cannot be told from the weights: "
                  "put a config.json with \"n_head\" beside it");
    config.n_head = config.n_embd / 64;
  }
  if (!overrides.empty()) config.apply_json(overrides);
  // A word embedding with more rows than the vocabulary (a train_gpt2 checkpoint's, padded for
  // speed, beside a config.json that names the real vocabulary): the padded table.
  if (config.padded_vocab_size == 0) {
    for (const nn::SafetensorsEntry& e : header.entries)
      if (gpt2_local_name(e.name) == "wte.weight" && e.shape.size() == 2 && e.shape[0] > config.vocab_size)
        config.padded_vocab_size = e.shape[0];
  }
  // Every tensor is loaded below (strictly: a missing one is an error), so the random
  // initialization is skipped (NOTE [Skipped draws]): GPT-2 1.5B's 1.5 billion draws were made
  // only to be overwritten.
  std::shared_ptr<GPT2LMHeadModel> model;
  {
    const nn::init::SkipDrawsGuard skip;
    model = std::make_shared<GPT2LMHeadModel>(config);
  }
  load_gpt2_hf_weights(*model, nn::load_safetensors(file.string()).tensors, file.string());
  return model;
}

}  // namespace trident::models
