// BERT weights in Hugging Face's files: load a BertForPreTraining model.safetensors
// (bert-base-uncased and friends) and write one back.
//
// Accepted: BertForPreTraining's names ("bert.encoder.layer.0.attention.self.query.weight",
// "cls.predictions.transform.dense.weight", ...); the BertModel part may lack the "bert." prefix.
// Files converted from Google's TensorFlow checkpoints name LayerNorm parameters "gamma" and
// "beta": renamed to "weight" and "bias", as Hugging Face does. Ignored: the
// "bert.embeddings.position_ids" buffer. Tied copies, when a file stores them, must equal what
// they are tied to: "cls.predictions.decoder.weight" the word embeddings,
// "cls.predictions.decoder.bias" cls.predictions.bias (it stands in for it when that is absent).
#pragma once

#include <memory>
#include <string>

#include "models/bert.h"
#include "nn/state_dict.h"

namespace trident::models {

void load_bert_hf_weights(BertForPreTraining& model, const nn::StateDict& hf, const std::string& source_name = "state dict");

// The model's weights under Hugging Face's names and shapes (word embeddings and MLM bias cut to
// vocab_size; no decoder copies); views of the model's tensors.
nn::StateDict bert_hf_weights(const BertForPreTraining& model);

// A model from a directory holding model.safetensors and config.json, or from a .safetensors file
// with config.json beside it (required: BERT's sizes are not all in its shapes). `overrides` (JSON)
// is applied to the config last.
std::shared_ptr<BertForPreTraining> load_bert_hf(const std::string& path, const std::string& overrides = {});

}  // namespace trident::models
