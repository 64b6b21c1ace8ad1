#include "models/bert_hf.h"

#include <filesystem>
#include <fstream>
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
std::string replace_suffix(const std::string& s, const std::string& from, const std::string& to) {
  return s.substr(0, s.size() - from.size()) + to;
}

const std::string kWord = "bert.embeddings.word_embeddings.weight";
const std::string kBias = "cls.predictions.bias";

}  // namespace

void load_bert_hf_weights(BertForPreTraining& model, const nn::StateDict& hf, const std::string& source_name) {
  nn::StateDict mapped;
  Tensor decoder_weight, decoder_bias;
  for (const auto& [name, t] : hf) {
    if (name == "cls.predictions.decoder.weight") {
      decoder_weight = t;
      continue;
    }
    if (name == "cls.predictions.decoder.bias") {
      decoder_bias = t;
      continue;
    }
    std::string n = name;
    if (!starts_with(n, "bert.") && !starts_with(n, "cls.")) n = "bert." + n;
    if (n == "bert.embeddings.position_ids") continue;
    if (ends_with(n, "LayerNorm.gamma")) n = replace_suffix(n, "gamma", "weight");
    if (ends_with(n, "LayerNorm.beta")) n = replace_suffix(n, "beta", "bias");
    TRIDENT_CHECK(mapped.emplace(n, t).second, "loading ", source_name, ": '", n, "' appears twice (as '", name,
                  "' and under another spelling)");
  }
  if (decoder_bias.defined()) {
    auto it = mapped.find(kBias);
    if (it == mapped.end())
      mapped.emplace(kBias, decoder_bias);
    else
      TRIDENT_CHECK(same_values(decoder_bias, it->second), "loading ", source_name,
                    ": cls.predictions.decoder.bias differs from ", kBias, " (they are one tensor in BERT)");
  }
  if (decoder_weight.defined()) {
    auto it = mapped.find(kWord);
    TRIDENT_CHECK(it != mapped.end() && same_values(decoder_weight, it->second), "loading ", source_name,
                  ": cls.predictions.decoder.weight (shape ", decoder_weight.sizes(), ") differs from ", kWord,
                  "; Trident's BERT ties the MLM decoder to the word embeddings");
  }
  const int64_t V = model.config().vocab_size;
  load_weights(model, mapped, {{kWord, V}, {kBias, V}}, source_name);
}

nn::StateDict bert_hf_weights(const BertForPreTraining& model) {
  const int64_t V = model.config().vocab_size;
  return unpadded_state_dict(model, {{kWord, V}, {kBias, V}});
}

std::shared_ptr<BertForPreTraining> load_bert_hf(const std::string& path, const std::string& overrides) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  TRIDENT_CHECK(fs::exists(p), "BERT checkpoint ", path, " does not exist");
  const fs::path file = fs::is_directory(p) ? p / "model.safetensors" : p;
  const fs::path config_file = file.parent_path() / "config.json";
  TRIDENT_CHECK(fs::exists(file), "BERT checkpoint: ", file.string(), " does not exist");
  TRIDENT_CHECK(fs::exists(config_file), "BERT checkpoint: ", config_file.string(),
                " does not exist (BERT's sizes cannot all be read from the tensors)");
  std::ifstream in(config_file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  BertConfig config;
  try {
    config = BertConfig::from_hf_config(text.str());
  } catch (const Error& e) {
    TRIDENT_FAIL(config_file.string(), ": ", e.message());
  }
  if (!overrides.empty()) config.apply_json(overrides);
  // Every tensor is loaded below (strictly), so the random initialization is skipped (NOTE
  // [Skipped draws]).
  std::shared_ptr<BertForPreTraining> model;
  {
    const nn::init::SkipDrawsGuard skip;
    model = std::make_shared<BertForPreTraining>(config);
  }
  load_bert_hf_weights(*model, nn::load_safetensors(file.string()).tensors, file.string());
  return model;
}

}  // namespace trident::models
