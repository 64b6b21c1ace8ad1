// Loading Hugging Face weight files into the models (shared by GPT-2 and BERT; each model's
// loader first maps the file's names to its own).
#pragma once

#include <map>
#include <string>

#include "nn/module.h"
#include "nn/state_dict.h"

namespace trident::models {

// Copies `source`, already under the model's state-dict names, into the model's tensors, in
// place: dtypes are converted to the model's (a file saved in f16 loads into f32 weights). A
// tensor named in `vocab_rows` (name -> the true vocabulary size) may have exactly that many rows
// in the source while the model's has more (its padded vocabulary): the rows are copied and the
// padding zeroed. Anything missing, unexpected or of another shape is one trident::Error listing
// all of them (nn::describe_load_problems), naming `source_name`; nothing is changed then.
void load_weights(nn::Module& model, const nn::StateDict& source, const std::map<std::string, int64_t>& vocab_rows,
                  const std::string& source_name);

// The model's state dict with each tensor of `vocab_rows` cut to its true vocabulary (views): what
// a Hugging Face file holds.
nn::StateDict unpadded_state_dict(const nn::Module& model, const std::map<std::string, int64_t>& vocab_rows);

// Whether two tensors hold the same values (shape and elements): for files that store a tied
// weight twice.
bool same_values(const Tensor& a, const Tensor& b);

}  // namespace trident::models
