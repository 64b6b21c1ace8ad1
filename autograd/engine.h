// The backward engine.
//
// NOTE [Engine order]: backward first counts, for every node reachable from the roots, how
// many gradients it will receive; a node runs once all have arrived (summed per input), so
// each node runs exactly once per backward. Among ready nodes the most recently created runs
// first (reverse creation order, as PyTorch does), and AccumulateGrad nodes run before
// anything else, so a leaf's post-accumulate hooks fire as soon as its gradient is final.
// Nodes run with grad mode off. Unless retain_graph, each node frees its saved tensors after
// running, and a second backward through it is an error.
#pragma once

#include "autograd/node.h"

namespace trident::autograd {

// Backpropagates from `roots`, with `grad_roots` as their gradients (may be omitted for
// one-element roots: ones), accumulating into the .grad of the leaves that require grad.
void backward(const TensorList& roots, const TensorList& grad_roots = {}, bool retain_graph = false);

// The gradients of `outputs` (weighted by grad_outputs) with respect to `inputs`, returned
// instead of accumulated: no .grad changes. An input the outputs do not depend on is an
// error unless allow_unused, which returns an undefined tensor for it.
TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs = {},
                bool retain_graph = false, bool allow_unused = false);

}  // namespace trident::autograd
