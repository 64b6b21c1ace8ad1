// Checkpoints that do not depend on the tensor-parallel layout.
//
// NOTE [Layout-independent checkpoints]: a tp-split model is saved as the serial model would be:
// every split parameter (NOTE [Parameter shards]) is gathered into its full tensor, the
// vocabulary padding dropped, under the model's own state-dict names (Hugging Face's for GPT-2
// and BERT). Loading cuts each full tensor into this rank's shard. So a file written at tp = 4
// loads at tp = 2, at tp = 1 or into the serial model (load_state_dict, load_gpt2_hf_weights),
// and a serial file loads at any tp; Megatron-LM's per-rank files need a conversion script for
// that. The optimizer state goes the same way: an element-wise optimizer's buffers (Adam's
// moments) are split exactly like their parameters, so full_optimizer_state() gathers them into
// the state dict the serial model's optimizer would have (NOTE [Optimizer state dict]: the same
// parameter numbering, as the split model registers its parameters in the serial order) and
// local_optimizer_state() cuts that back into this rank's shards; the vocabulary padding's
// buffers are zeros (the padding's logits are -inf, so its gradient is 0) and are dropped and
// re-created as zeros. The training checkpoints of parallel/checkpoint.h build on both.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "nn/module.h"
#include "nn/optim/optimizer.h"
#include "nn/state_dict.h"
#include "parallel/tensor_parallel/layers.h"

namespace trident::parallel::tp {

// Every split parameter of `model` by its state-dict name.
std::map<std::string, ParamShard> sharded_parameters(nn::Module& model);

// The full (serial) state dict of a split model. Collective over `group` (every rank of it
// calls, in the same order); every rank gets the whole dict.
nn::StateDict full_state_dict(nn::Module& model, comm::Communicator& group);
// The same for part of the model's state dict (`local`: entries of model.state_dict(), e.g. a
// pipeline stage's, Pipeline::state_dict()): its split entries gathered, the rest copied.
// Collective over `group` (every rank the same names).
nn::StateDict full_state_dict(const nn::StateDict& local, nn::Module& model, comm::Communicator& group);

// Loads a full (serial) state dict into a split model: split parameters get this rank's shard,
// the rest are copied whole. strict: a missing, unexpected or mismatched name (against the full
// shapes) is an error listing them all, and nothing is loaded. No communication.
void load_full_state_dict(nn::Module& model, const nn::StateDict& full, const comm::Communicator& group, bool strict = true);

// full_state_dict written by group rank 0 to a safetensors file, then a barrier on the group
// (so the file exists when any rank returns); and the file loaded at any tp.
void save_full_safetensors(nn::Module& model, const std::string& path, comm::Communicator& group);
void load_full_safetensors(nn::Module& model, const std::string& path, const comm::Communicator& group, bool strict = true);

// Per parameter of `params` (the model's, matched by identity with its named parameters): its
// shard description when it is split, else nullopt.
std::vector<std::optional<ParamShard>> param_shards(nn::Module& model, const std::vector<Tensor>& params);

// The full shape of each of `params` (a split parameter's along its split dim, the others their
// own), e.g. to build the serial optimizer a checkpoint is converted through.
std::vector<Shape> full_shapes(nn::Module& model, const std::vector<Tensor>& params);

// `local`: the state dict of an optimizer over `params` (parameters of `model`, in the
// optimizer's state-dict order); returns it with every buffer of a split parameter gathered to
// its full tensor (the buffer must have the parameter's shape: element-wise optimizers only).
// Collective over `group` (every rank, the same parameters and state keys).
nn::optim::OptimizerState full_optimizer_state(const nn::optim::OptimizerState& local, nn::Module& model,
                                               const std::vector<Tensor>& params, comm::Communicator& group);
// The inverse: this rank's shards of a full state dict (buffers of other shapes than the full
// parameter's are an error naming the key). No communication.
nn::optim::OptimizerState local_optimizer_state(const nn::optim::OptimizerState& full, nn::Module& model,
                                                const std::vector<Tensor>& params, const comm::Communicator& group);

}  // namespace trident::parallel::tp
