// Training checkpoints of data-parallel runs, on nn/training_checkpoint.h (NOTE [Exact resume]).
//
// The replicas are identical, so one checkpoint serves every rank: dp rank 0 writes it (its
// model, its generators, the optimizer), and every rank reads it back (from a file system they
// share). With ZeRO-1 the optimizer part is the gathered, unsharded state (NOTE [ZeRO-1
// checkpoints]), so the checkpoint is the very directory a serial run writes and resumes on any
// dp size, sharded or not. Not included by trident.h (nlohmann/json.hpp is heavy).
//
// With model parallelism (`mp` given) the checkpoint is layout-independent too: under tensor
// parallelism (mp.tp; NOTE [Layout-independent checkpoints]) the model's state and the
// optimizer's (plain, or ZeRO's gathered state) are gathered over the tp group into the serial
// model's full tensors; under pipeline parallelism (mp.pipe; NOTE [Pipeline checkpoints]) the
// stages' tensors (tp-gathered first under tp x pp) and optimizer states are sent, one tensor at
// a time, to pp rank 0 and assembled there into the whole model's. The rank that is dp, pp and
// tp rank 0 writes them, through a
// serial-shaped copy (a module of the full tensors under the model's names, and the gathered
// optimizer state, which is the serial optimizer's state dict). So a run at tp = 2 or pp = 2 writes the directory a
// serial run writes, and a checkpoint of any layout (or of a serial run) resumes at any other:
// loading reads the full tensors, keeps this rank's shards of this stage's tensors and this
// stage's optimizer state (under pp the files are memory-mapped and only the stage's part is
// read; every entry's name, shape and dtype is still checked).
// Generators are saved as in the serial case (the default one, the caller's: world rank 0's).
#pragma once

#include <string>

#include "nn/training_checkpoint.h"
#include "parallel/comm/communicator.h"
#include "parallel/zero.h"

namespace trident::parallel {

namespace pipeline {
class Pipeline;
}

// What a model-parallel checkpoint needs besides the parts.
struct ModelParallelCheckpoint {
  comm::Communicator* tp = nullptr;    // the tp group of parts.model's split layers (null: none)
  pipeline::Pipeline* pipe = nullptr;  // the pipeline over parts.model (null: none)
  // With pipe: the whole model's parameters, grouped as the stage optimizer groups the stage's.
  ParamGroups whole_groups;
};

// Collective over `dp`: with `zero`, gathers its state (every rank takes part); dp rank 0 writes
// the checkpoint of `parts` (parts.optimizer: the plain optimizer, or null with zero) and then
// tells the others whether it succeeded, so that a failed write throws on every rank (naming
// the path) instead of leaving them waiting.
// With `mp`: collective over the tp and pp groups as well (gathers the full tensors); the rank
// that is dp, pp and tp rank 0 alone writes, and its success is broadcast over tp, pp, then dp.
void save_training_checkpoint(const std::string& path, comm::Communicator& dp, const nn::TrainingCheckpointParts& parts,
                              const nn::TrainingProgress& progress, ZeroOptimizer* zero = nullptr,
                              const ModelParallelCheckpoint* mp = nullptr);

// Every rank restores `parts` from the checkpoint (with zero: the optimizer part goes into it,
// each rank keeping its shards; parts.optimizer must then be null). Not collective.
// With `mp`: the checkpoint's full tensors are read into a serial-shaped copy first (all
// checked before anything changes; under pp, the stage's entries only, the optimizer state
// straight into the stage's part), then this rank's shards of its stage's tensors go into the
// model and this stage's optimizer state into the optimizer. Not collective.
nn::TrainingProgress load_training_checkpoint(const std::string& path, const nn::TrainingCheckpointParts& parts,
                                              ZeroOptimizer* zero = nullptr, const ModelParallelCheckpoint* mp = nullptr);

}  // namespace trident::parallel
