// Training checkpoints of data-parallel runs, on nn/training_checkpoint.h (NOTE [Exact resume]).
//
// The replicas are identical, so one checkpoint serves every rank: dp rank 0 writes it (its
// model, its generators, the optimizer), and every rank reads it back (from a file system they
// share). With ZeRO-1 the optimizer part is the gathered, unsharded state (NOTE [ZeRO-1
// checkpoints]), so the checkpoint is the very directory a serial run writes and resumes on any
// dp size, sharded or not. Not included by trident.h (nlohmann/json.hpp is heavy).
#pragma once

#include <string>

#include "nn/training_checkpoint.h"
#include "parallel/comm/communicator.h"
#include "parallel/zero.h"

namespace trident::parallel {

// Collective over `dp`: with `zero`, gathers its state (every rank takes part); dp rank 0 writes
// the checkpoint of `parts` (parts.optimizer: the plain optimizer, or null with zero) and then
// tells the others whether it succeeded, so that a failed write throws on every rank (naming
// the path) instead of leaving them waiting.
void save_training_checkpoint(const std::string& path, comm::Communicator& dp, const nn::TrainingCheckpointParts& parts,
                              const nn::TrainingProgress& progress, ZeroOptimizer* zero = nullptr);

// Every rank restores `parts` from the checkpoint (with zero: the optimizer part goes into it,
// each rank keeping its shards; parts.optimizer must then be null). Not collective.
nn::TrainingProgress load_training_checkpoint(const std::string& path, const nn::TrainingCheckpointParts& parts,
                                              ZeroOptimizer* zero = nullptr);

}  // namespace trident::parallel
