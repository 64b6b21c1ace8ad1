// Re-materialization (activation checkpointing): run a function without keeping its
// intermediate activations, and run it again during backward to get them back.
//
// checkpoint(fn, inputs) calls fn on the inputs with grad recording off, so only the inputs
// (and the outputs) stay alive, and records one node. Its backward re-runs fn with recording on,
// starting from the same generator states so dropout draws the same masks (NOTE [Philox
// streams]), and backpropagates through the recomputed graph: the inputs' gradients flow on
// through the node, and parameters used inside fn (module weights) receive theirs directly,
// with their hooks firing as usual. This is what GPipe applies to every pipeline stage.
//
// The node is recorded whenever grad mode is on (fn's parameters may need gradients even when
// no input does, e.g. an embedding stage fed token ids). Like PyTorch's reentrant checkpoint,
// parameters inside fn accumulate into .grad even under autograd::grad() (so differentiate them
// with backward()). Under a create_graph backward the re-run's backward is recorded too (NOTE
// [Checkpoint and higher-order gradients] in checkpoint.cpp): the inputs' gradients and the
// parameters' .grad can be differentiated again, as without checkpoint.
#pragma once

#include <functional>
#include <vector>

#include "autograd/node.h"
#include "core/rng.h"

namespace trident::autograd {

using CheckpointFn = std::function<TensorList(const TensorList& inputs)>;

// `generators`: whose states to save and replay (default: the default generator).
TensorList checkpoint(const CheckpointFn& fn, const TensorList& inputs, std::vector<Generator*> generators = {});

// True on this thread while checkpoint's backward re-runs a function (torchgpipe's
// is_recomputing): state that a forward updates as a side effect, such as batch norm's running
// statistics, must not be updated a second time by the re-run.
bool is_recomputing();

}  // namespace trident::autograd
