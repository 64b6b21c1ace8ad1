// Saving and resuming a training run exactly.
//
// NOTE [Exact resume]: a training checkpoint holds everything the next step depends on: the
// model's parameters and buffers, the optimizer's per-parameter state and hyperparameters
// (learning rates included), the loss scaler's scale and clean-step count, the step number, the
// state of every random stream the run draws from (the default generator for dropout, and any
// the caller names: a data-order stream, ...), and the data loader's position as the caller's
// JSON. Restoring all of it makes the steps after a resume compute, bit for bit on the CPU, what
// the uninterrupted run computes (tests/nn/training_checkpoint_test.cpp checks it). The files
// are the checkpoint directory of nn/checkpoint.h: written under a temporary name, checksummed
// in a manifest, renamed into place only when complete.
//
// Layout: model.safetensors (the state dict, Hugging-Face-style names), optimizer.safetensors
// (its state tensors; hyperparameters and step counts as JSON in the metadata), trainer.json
// (step, generators, scaler, data position, the caller's extra fields).
#pragma once

#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "nn/grad_scaler.h"
#include "nn/safetensors.h"
#include "nn/module.h"
#include "nn/optim/optimizer.h"

namespace trident::nn {

struct TrainingCheckpointParts {
  Module* model = nullptr;                // required
  optim::Optimizer* optimizer = nullptr;  // optional
  GradScaler* scaler = nullptr;           // optional
  // Random streams to save and restore, by name. The default generator is always included
  // (as "default").
  std::vector<std::pair<std::string, Generator*>> generators;
  // Loading part of a model (a pipeline stage's, parallel/checkpoint.h): only these model entries
  // are read into `model`; the others are checked by name, shape and dtype but not read, and the
  // files are memory-mapped instead of read whole. Null: every entry.
  const std::set<std::string>* load_only = nullptr;
  // Loading, instead of `optimizer`: given the checkpoint's optimizer state (its tensors view the
  // mapped file), loads what it needs; it must check everything before it changes anything.
  std::function<void(const optim::OptimizerState&)> load_optimizer;
  // Saving, instead of `optimizer`: the optimizer state to write (a sharded optimizer's state
  // gathered for writing, parallel/zero.h).
  const optim::OptimizerState* optimizer_state = nullptr;
  // Saving, instead of the model's state dict: its entries produced one at a time (NOTE
  // [Streamed safetensors]; a model-parallel run's full tensors, NOTE [Streamed checkpoints] in
  // parallel/checkpoint.h). `model` may then be null.
  const TensorStream* model_stream = nullptr;
  // Saving, with optimizer_state (its name and scalars; its tensors must be empty): the
  // optimizer's tensors produced one at a time.
  const TensorStream* optimizer_stream = nullptr;
};

struct TrainingProgress {
  int64_t step = 0;
  nlohmann::json data_position;  // e.g. data::LoaderPosition's JSON
  nlohmann::json extra;          // anything else the application wants back
};

// Writes the checkpoint directory `path` atomically (replacing an older one of that name).
void save_training_checkpoint(const std::string& path, const TrainingCheckpointParts& parts,
                              const TrainingProgress& progress);

// Verifies the checkpoint (manifest, sizes, checksums), restores every part given, and returns
// the progress. A checkpoint of another model, or missing a part that was asked for, is an
// error naming the checkpoint and what does not match; nothing is changed then.
TrainingProgress load_training_checkpoint(const std::string& path, const TrainingCheckpointParts& parts);

}  // namespace trident::nn
