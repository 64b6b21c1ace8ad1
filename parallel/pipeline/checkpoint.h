// The optimizer state of a pipeline run as the whole model's, for training checkpoints
// (parallel/checkpoint.h).
//
// NOTE [Pipeline checkpoints]: every rank holds the whole model but each stage's optimizer
// holds its own parameters' state only (NOTE [Pipeline step]). A checkpoint stores what the
// serial model's optimizer would hold: gather_optimizer_state() assembles, on every pp rank, the
// state dict of an optimizer over the whole model's parameters (grouped as the stage optimizers
// group theirs) from the stages' state dicts, each parameter's state taken from the first stage
// that holds it (a tied parameter's copies are updated alike on every stage holding it), and
// stage_optimizer_state() picks a stage's part back out of such a state dict. With the model
// itself synchronized first (sync_full_model), a run at --pp K writes the directory a serial run
// writes, and any checkpoint resumes at any number of stages. Parameters are matched by identity
// (the stage's parameters are the model's tensors).
#pragma once

#include <span>
#include <string_view>

#include "nn/optim/optimizer.h"
#include "parallel/pipeline/pipeline.h"
#include "parallel/zero.h"

namespace trident::parallel::pipeline {

// `stage_state`: the state dict of the stage optimizer over `stage_groups` (this stage's
// parameters, pipe.parameters()); `whole_groups`: the whole model's parameters, grouped as
// stage_groups is (the same number of groups, each stage group's parameters a subset of the
// whole group's); `slots`: the optimizer's slot_names(). Returns the state dict of that
// optimizer over whole_groups (hyperparameters from this stage's). Collective over the pp group
// (one broadcast per parameter state tensor). Errors: a whole-model parameter no stage holds.
nn::optim::OptimizerState gather_optimizer_state(const Pipeline& pipe, const nn::optim::OptimizerState& stage_state,
                                                 const ParamGroups& stage_groups, const ParamGroups& whole_groups,
                                                 std::span<const std::string_view> slots);

// The inverse: the state dict of the stage optimizer over `stage_groups`, picked out of
// `whole_state` (an optimizer's over whole_groups). No communication.
nn::optim::OptimizerState stage_optimizer_state(const nn::optim::OptimizerState& whole_state,
                                                const ParamGroups& whole_groups, const ParamGroups& stage_groups);

}  // namespace trident::parallel::pipeline
