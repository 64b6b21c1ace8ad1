// GPT-2 weights in Hugging Face's files: load a model.safetensors (openai-community/gpt2 and
// its larger siblings, or any file saved from GPT2Model / GPT2LMHeadModel), and write one back.
//
// Accepted names: those of GPT2LMHeadModel ("transformer.h.0.attn.c_attn.weight") or of
// GPT2Model, without the prefix ("h.0.attn.c_attn.weight"), as the hub's original files have
// them. Older files also carry the attention-mask buffers "h.{i}.attn.bias" and
// "h.{i}.attn.masked_bias": ignored. "lm_head.weight", when a file stores it, must equal the
// token embeddings (Trident's GPT-2 ties them; an untied file is refused, naming both). Weights
// of another dtype are converted; a vocabulary of vocab_size rows loads into a padded table
// (the padding zeroed).
#pragma once

#include <memory>
#include <string>

#include "models/gpt2.h"
#include "nn/state_dict.h"

namespace trident::models {

// Copies a Hugging Face state dict into the model (errors list every missing, unexpected or
// misshapen tensor at once; nothing changes then). `source_name` names it in errors.
void load_gpt2_hf_weights(GPT2LMHeadModel& model, const nn::StateDict& hf, const std::string& source_name = "state dict");

// The model's weights under GPT2LMHeadModel's names and shapes (wte cut to vocab_size rows;
// no lm_head.weight, as save_pretrained writes a tied model to safetensors); views of the
// model's tensors.
nn::StateDict gpt2_hf_weights(const GPT2LMHeadModel& model);

// A model from a Hugging Face checkpoint: `path` is a directory holding model.safetensors (and
// config.json), or a .safetensors file (with config.json beside it, if any). Without a
// config.json the sizes come from the tensors' shapes and n_head = n_embd / 64 (true of all four
// GPT-2 sizes; a width that is no multiple of 64 is an error asking for a config.json), the
// rest Hugging Face's defaults. `overrides` (JSON, GPT2Config::apply_json) is applied last (e.g.
// {"padded_vocab_size": 50304} or dropout). A word embedding with more rows than the config's
// vocabulary (a train_gpt2 checkpoint's model.safetensors, padded) sets padded_vocab_size when
// nothing else did. Errors name the file.
std::shared_ptr<GPT2LMHeadModel> load_gpt2_hf(const std::string& path, const std::string& overrides = {});

}  // namespace trident::models
