// The backward engine.
//
// NOTE [Engine order]: backward first counts, for every node reachable from the roots, how
// many gradients it will receive; a node runs once all have arrived (summed per input), so
// each node runs exactly once per backward. Among ready nodes the most recently created runs
// first (reverse creation order, as PyTorch does), and AccumulateGrad nodes run before
// anything else, so a leaf's post-accumulate hooks fire as soon as its gradient is final.
// Nodes run with grad mode off (on in a create_graph backward, below). Unless retain_graph, each
// node frees its saved tensors after running, and a second backward through it is an error.
// grad() runs only the nodes on a path to the inputs it was asked for.
//
// NOTE [Higher-order gradients]: with create_graph the engine runs with grad mode on, so the
// ops a node's formula calls record a graph of their own, and the gradients it returns can be
// differentiated again (Hessian-vector products, gradient penalties, gradgradcheck). What makes
// that correct:
// - a formula must say it can be recorded (record(..., Backward::Differentiable)): it computes
//   with differentiable ops, from its gradients and from SavedTensor::unpack(), which in this mode
//   returns the saved tensor attached to the graph as it was when saved (its inputs as
//   themselves, its own output through the node; NOTE [Saved tensors and higher-order gradients]
//   in node.h). Built-in ops whose fast formula is a kernel take a composite path when
//   GradMode::is_enabled() (ops/unary.cpp, ops/softmax.cpp, ...).
// - a node that cannot (the pipeline's transfers between stages, a user function that did not
//   opt in) still runs, with grad mode off, and its results become outputs of a node that fails, naming the op, only if a
//   later backward reaches it: the first-order gradients are right either way, and a second
//   derivative is never silently missing a term.
// - gradients summed from several paths, and a leaf's .grad under backward(create_graph), are
//   added out of place with a recorded add. A leaf's .grad then holds a graph that references
//   the leaf (the cycle PyTorch warns about): zero_grad() (set to none) breaks it; grad() has no
//   such cycle.
// create_graph implies retain_graph.
#pragma once

#include <functional>

#include "autograd/node.h"

namespace trident::autograd {

// Backpropagates from `roots`, with `grad_roots` as their gradients (may be omitted for
// one-element roots: ones), accumulating into the .grad of the leaves that require grad.
void backward(const TensorList& roots, const TensorList& grad_roots = {}, bool retain_graph = false,
              bool create_graph = false);

// The gradients of `outputs` (weighted by grad_outputs) with respect to `inputs`, returned
// instead of accumulated: no .grad changes. An input the outputs do not depend on is an
// error unless allow_unused, which returns an undefined tensor for it. With create_graph the
// gradients carry a graph and can be differentiated again (NOTE [Higher-order gradients]).
TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs = {},
                bool retain_graph = false, bool allow_unused = false, bool create_graph = false);

// NOTE [Backward callbacks]: queue_callback(fn) runs fn once the outermost backward() or grad()
// running on this thread has finished every node, just before it returns (in queue order; a
// callback may queue another). Nested backwards (autograd::checkpoint re-runs a segment and
// backpropagates through it inside the outer backward) share the outermost one's queue, so a
// callback queued from a post-accumulate hook fired in a nested backward still runs at the very
// end. When the backward fails with an exception the queued callbacks are dropped, not run.
// Data parallelism queues its "wait for every bucket" step here from the first gradient hook, so
// the gradients are averaged when backward() returns and nobody can forget to wait.
// Throws when no backward is running on this thread.
void queue_callback(std::function<void()> fn);
// A number identifying the outermost backward running on this thread (1, 2, 3, ... in start
// order across the thread's life), or 0 when none is running. Lets a hook tell whether state it
// kept from an earlier hook belongs to this backward or to one that failed.
uint64_t current_backward_id();

}  // namespace trident::autograd
