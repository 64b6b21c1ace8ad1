// Gradient clipping of a tensor-parallel model by the norm of the serial model's gradient.
//
// Each tp rank holds only its shard of a split parameter (NOTE [Parameter shards]), so clipping
// by the local norm (nn::clip_grad_norm_) would scale every rank by a different factor and drift
// from serial training. Here a split parameter's squared norm is summed over the tp group (one
// all-reduce of every split parameter's f64 sum of squares); a parameter every rank holds whole
// counts once. Each parameter's norm is rounded to its gradient's dtype before they are combined
// in f64, as nn::clip_grad_norm_ does, so the coefficient equals the serial one up to the order
// of the f64 sums. The vocabulary padding rows of a split embedding carry zero gradient.
#pragma once

#include "nn/module.h"
#include "parallel/comm/communicator.h"

namespace trident::parallel::tp {

// The 2-norm of the full gradient of `model` (before clipping); every gradient is multiplied in
// place by min(1, max_norm / (total + 1e-6)). Collective over `group` (every rank calls, with
// the same model structure). Errors: max_norm negative or NaN.
double clip_grad_norm_(nn::Module& model, double max_norm, comm::Communicator& group);

}  // namespace trident::parallel::tp
