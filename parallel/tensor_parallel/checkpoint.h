// Checkpoints that do not depend on the tensor-parallel layout.
//
// NOTE [Layout-independent checkpoints]: a tp-split model is saved as the serial model would be:
// every split parameter (NOTE [Parameter shards]) is gathered into its full tensor, the
// vocabulary padding dropped, under the model's own state-dict names (Hugging Face's for GPT-2
// and BERT). Loading cuts each full tensor into this rank's shard. So a file written at tp = 4
// loads at tp = 2, at tp = 1 or into the serial model (load_state_dict, load_gpt2_hf_weights),
// and a serial file loads at any tp; Megatron-LM's per-rank files need a conversion script for
// that.
#pragma once

#include <map>
#include <string>

#include "nn/module.h"
#include "nn/state_dict.h"
#include "parallel/tensor_parallel/layers.h"

namespace trident::parallel::tp {

// Every split parameter of `model` by its state-dict name.
std::map<std::string, ParamShard> sharded_parameters(nn::Module& model);

// The full (serial) state dict of a split model. Collective over `group` (every rank of it
// calls, in the same order); every rank gets the whole dict.
nn::StateDict full_state_dict(nn::Module& model, comm::Communicator& group);

// Loads a full (serial) state dict into a split model: split parameters get this rank's shard,
// the rest are copied whole. strict: a missing, unexpected or mismatched name (against the full
// shapes) is an error listing them all, and nothing is loaded. No communication.
void load_full_state_dict(nn::Module& model, const nn::StateDict& full, const comm::Communicator& group, bool strict = true);

// full_state_dict written by group rank 0 to a safetensors file, then a barrier on the group
// (so the file exists when any rank returns); and the file loaded at any tp.
void save_full_safetensors(nn::Module& model, const std::string& path, comm::Communicator& group);
void load_full_safetensors(nn::Module& model, const std::string& path, const comm::Communicator& group, bool strict = true);

}  // namespace trident::parallel::tp
