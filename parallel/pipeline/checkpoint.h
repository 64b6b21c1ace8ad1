// The model and optimizer state of a pipeline run as the whole model's, for training checkpoints
// (parallel/checkpoint.h).
//
// NOTE [Pipeline checkpoints]: each rank holds its stage's tensors only (NOTE [Stage-only
// model]) and each stage's optimizer its own parameters' state (NOTE [Pipeline step]). A
// checkpoint stores what the serial model and its optimizer would hold: gather_state_dict()
// assembles the whole model's state dict (parameters and persistent buffers, such as batch
// norm's running statistics) on pp rank 0, each entry sent by the first stage holding it, and
// gather_optimizer_state() assembles there the state dict of an optimizer over the whole model's
// parameters (grouped as the stage optimizers group theirs) from the stages' state dicts, each
// parameter's state taken from the first stage that holds it (a tied parameter's copies are
// updated alike on every stage holding it). Tensors travel one at a time, owner to rank 0, in
// host memory (send_to_first): the accelerators never hold more than their stage. These two
// functions hold the whole state on rank 0; the training checkpoints send each entry only when
// the writer is about to write it and hold none of them whole (NOTE [Streamed checkpoints] in
// parallel/checkpoint.h), with the same bytes. stage_optimizer_state() picks a stage's
// part back out of a whole state dict. So a run at --pp K writes the directory a serial run
// writes, and any checkpoint resumes at any number of stages. Optimizer parameters are matched
// by identity (the stage's parameters are the model's tensors).
#pragma once

#include <span>
#include <string_view>

#include "nn/optim/optimizer.h"
#include "nn/state_dict.h"
#include "parallel/pipeline/pipeline.h"
#include "parallel/zero.h"

namespace trident::parallel::pipeline {

// Collective over pp: the model's whole state dict on pp rank 0 (host tensors; a rank-0 entry may
// share storage with the model), from every stage's `stage_state` (this stage's entries by
// state-dict name: pipe.state_dict(), or under tp their full tensors, tp::full_state_dict);
// every other rank gets an empty dict. Every name of pipe.state_owners() is taken from its
// owner. Errors: the owner's stage_state lacks the name.
nn::StateDict gather_state_dict(const Pipeline& pipe, const nn::StateDict& stage_state);

// `stage_state`: the state dict of the stage optimizer over `stage_groups` (this stage's
// parameters, pipe.parameters()); `whole_groups`: the whole model's parameters, grouped as
// stage_groups is (the same number of groups, each stage group's parameters a subset of the
// whole group's); `slots`: the optimizer's slot_names(). Returns the state dict of that
// optimizer over whole_groups (hyperparameters from this stage's) on pp rank 0, and an empty
// state on the other ranks. Collective over the pp group (an all-reduce of which stage holds
// which parameter, then each state tensor sent by its owner to rank 0). Errors: a whole-model
// parameter no stage holds.
nn::optim::OptimizerState gather_optimizer_state(const Pipeline& pipe, const nn::optim::OptimizerState& stage_state,
                                                 const ParamGroups& stage_groups, const ParamGroups& whole_groups,
                                                 std::span<const std::string_view> slots);

// `t` (given on pp rank `owner`) as a host tensor on pp rank 0, undefined on the other ranks.
// Only the owner and rank 0 communicate (a header of dtype and sizes, then the data); the others
// return at once. On rank 0 an owner-0 tensor comes back as it is (detached, not copied).
Tensor send_to_first(comm::Communicator& pp, const Tensor& t, int owner);

// The inverse: the state dict of the stage optimizer over `stage_groups`, picked out of
// `whole_state` (an optimizer's over whole_groups). No communication.
nn::optim::OptimizerState stage_optimizer_state(const nn::optim::OptimizerState& whole_state,
                                                const ParamGroups& whole_groups, const ParamGroups& stage_groups);

}  // namespace trident::parallel::pipeline
