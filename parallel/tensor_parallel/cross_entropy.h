// Cross-entropy over a vocabulary split across the tp group, without gathering the logits
// (Megatron-LM's vocab_parallel_cross_entropy).
//
// logits [N, V / tp]: this rank's columns, global columns [rank V/tp, (rank + 1) V/tp); targets
// [N] i64 global class ids in [0, V), or ignore_index (loss 0, left out of a Mean). Forward
// all-reduces three [N] vectors over the group: the row max (Max), the target's logit (Sum: only
// the owning rank contributes) and the sum of exp(logit - max) (Sum); loss = log(sum exp) - (
// target logit - max). Backward needs no communication: d loss / d logits = softmax - onehot on
// this rank's columns, from the kept exp values. Columns holding -inf (padding of the vocabulary)
// get probability 0. Reduction as in ops/loss.h (Mean over the targets that are not ignored).
// At tp = 1 it is ordinary cross-entropy.
#pragma once

#include "ops/loss.h"
#include "parallel/tensor_parallel/mappings.h"

namespace trident::parallel::tp {

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, const CommPtr& group,
                                    int64_t ignore_index = -100, Reduction reduction = Reduction::Mean);

}  // namespace trident::parallel::tp
