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
// a time, to pp rank 0. The rank that is dp, pp and tp rank 0 writes them as they come, under
// the serial model's names, and the optimizer's as the serial optimizer's state dict (NOTE
// [Streamed checkpoints] below). So a run at tp = 2 or pp = 2 writes the directory a
// serial run writes, and a checkpoint of any layout (or of a serial run) resumes at any other:
// loading reads the full tensors, keeps this rank's shards of this stage's tensors and this
// stage's optimizer state (under pp the files are memory-mapped and only the stage's part is
// read; every entry's name, shape and dtype is still checked).
// Generators are saved as in the serial case (the default one, the caller's: world rank 0's).
//
// NOTE [Streamed checkpoints]: no rank gathers the whole state. The writer writes each
// safetensors file from a header of specs (names, dtypes, the serial shapes, known on every rank:
// the model's state dict holds every name, other stages' as placeholders of their shape; which
// optimizer buffers exist is one all-reduce of a small table over pp) and asks for the entries
// one at a time, in the file's order (NOTE [Streamed safetensors]). Every other rank walks the
// same list in the same order and sends its piece of each entry when it holds one: under ZeRO
// the dp ranks their shards' parts of a parameter's buffer to dp rank 0
// (ZeroOptimizer::gather_param_slot_to), under tp the shards to full tensors
// (tp::gather_full), under pp the stage's tp rank 0 the whole entry to pp rank 0
// (pipeline::send_to_first). The writer's host memory holds one entry at a time (and its
// gathering's temporaries): a few times the largest tensor, instead of the whole model and
// optimizer state, which for the 8.3B GPT-2 with Adam is about 100 GB. The files are byte for
// byte those the gathered state makes (tests/parallel/checkpoint_mpi_test.cpp). If the writer
// fails (its directory cannot be made, the disk is full), it still fetches the remaining
// entries with the others, so that nobody waits on a transfer that never comes, and then every
// rank throws.
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

// Collective over `dp`: dp rank 0 writes the checkpoint of `parts` (parts.optimizer: the plain
// optimizer, or null with zero; with `zero` every rank sends its shards' part of each buffer as
// it is written) and then tells the others whether it succeeded, so that a failed write throws
// on every rank (naming the path) instead of leaving them waiting.
// With `mp`: collective over the tp and pp groups as well (each entry's full tensor gathered
// as it is written, NOTE [Streamed checkpoints]); the rank that is dp, pp and tp rank 0 alone
// writes, and its success is broadcast over tp, pp, then dp.
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
