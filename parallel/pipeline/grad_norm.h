// Gradient clipping of a pipeline stage by the norm of the whole model's gradient.
//
// Each stage holds the gradients of its own layers only (NOTE [Pipeline step]), so clipping by
// the stage's norm (nn::clip_grad_norm_) would scale every stage by a different factor and drift
// from serial training. Here every stage sums the squares of its parameters' gradient norms (each
// norm rounded to its gradient's dtype, as nn::clip_grad_norm_ does) in f64, the sums are
// all-reduced over the pp group, and every stage scales by the coefficient of that total. A
// parameter several stages hold (GPT-2's tied word embedding, LayerList::tied()) has the same,
// summed gradient on each of them after Pipeline::step, so only the first holder counts it.
// Under dp the gradients are already averaged over the dp group, so the pp sum is the same on
// every dp rank. Under tp x pp (stages built by parallel::tp::TensorParallelLayers) a stage's
// split parameters hold shards (NOTE [Parameter shards]): their squares are summed over the tp
// group first, as parallel::tp::clip_grad_norm_ does, and parameters every tp rank holds whole
// count once; the pp sum is then the same on every tp rank.
#pragma once

#include "parallel/pipeline/pipeline.h"

namespace trident::parallel::pipeline {

// The 2-norm of the whole model's gradient (before clipping); this stage's gradients are
// multiplied in place by min(1, max_norm / (total + 1e-6)). Collective over the pipeline's pp
// group, and over `tp` when given (the stage's tensor-parallel group; null or size 1: none).
// Errors: max_norm negative or NaN.
double clip_grad_norm_(const Pipeline& pipe, double max_norm, comm::Communicator* tp = nullptr);

// Whether this stage counts its parameter `p` in the whole model's norm: a parameter several
// stages hold (LayerList::tied()) counts on the stage holding its first layer only.
bool counted_here(const Pipeline& pipe, const Tensor& p);

}  // namespace trident::parallel::pipeline
