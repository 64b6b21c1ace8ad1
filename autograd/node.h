// The backward graph: nodes, edges, saved tensors, and the helpers ops use to record
// themselves.
//
// An op whose inputs require grad records one Node. The node's next_edges point at the nodes
// that produced its inputs (or at the AccumulateGrad node of a leaf); its apply() receives the
// gradients of its outputs and returns one gradient per input. Backward formulas are written
// as lambdas next to the forward code (see ops/arith.cpp), recorded with autograd::record.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/tensor.h"

namespace trident::autograd {

using TensorList = std::vector<Tensor>;
struct Node;

// Where a gradient goes: input `input_nr` of node `fn` (the output_nr of the tensor it
// belongs to). An edge without fn leads nowhere (the input did not require grad).
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

struct Node : std::enable_shared_from_this<Node> {
  Node();
  // Releases the graph behind this node iteratively: a chain of 100k nodes must not overflow
  // the stack when its last handle goes.
  virtual ~Node();
  virtual std::string name() const = 0;
  // grads[i] is the gradient of output i (the engine gives zeros for outputs no gradient
  // reached, as long as one did). Returns one gradient per next edge; an undefined tensor
  // means no gradient for that input. Runs with grad mode off.
  virtual TensorList apply(TensorList&& grads) = 0;
  // Frees saved tensors once backward has used them (unless retain_graph).
  virtual void release_saved() {}
  // Whether apply() can itself be recorded: its formula is made of differentiable ops on its
  // gradients and SavedTensors (NOTE [Higher-order gradients] in autograd/engine.h). When false,
  // a create_graph backward runs apply() with grad mode off and hands its results to a node that
  // fails if a later backward reaches it.
  virtual bool differentiable_backward() const { return false; }

  bool needs_input_grad(size_t i) const { return i < next_edges.size() && next_edges[i].valid(); }

  struct OutputMeta {
    Shape sizes;
    DType dtype = DType::F32;
    Device device;
  };

  std::vector<Edge> next_edges;  // one per forward input
  std::vector<OutputMeta> outputs;  // one per forward output: what its gradient must look like
  // Larger runs first among ready nodes: the reverse of creation order, as in PyTorch.
  uint64_t sequence_nr = 0;
  // Tensor hooks of non-leaf outputs, in registration order: (output_nr, hook).
  std::vector<std::pair<uint32_t, TensorHook>> pre_hooks;
  // Non-leaf outputs that asked to keep their gradient (retain_grad).
  std::vector<std::pair<uint32_t, std::weak_ptr<TensorImpl>>> retained;
};

// Whether a recorded backward formula may be differentiated again (NOTE [Higher-order
// gradients] in autograd/engine.h). Differentiable: the lambda computes its gradients with
// differentiable ops from the gradients it receives and SavedTensor::unpack() (never from a
// tensor it captured otherwise, which would be a constant), taking the composite path when
// GradMode::is_enabled() says the engine is recording it. Once: a kernel-only formula.
enum class Backward : uint8_t { Once, Differentiable };

// A node whose backward is a lambda (the common case for built-in ops and user functions).
using BackwardFn = std::function<TensorList(const TensorList& grads)>;
struct LambdaNode final : Node {
  LambdaNode(std::string name, BackwardFn fn, Backward kind = Backward::Once)
      : name_(std::move(name)), fn_(std::move(fn)), kind_(kind) {}
  std::string name() const override { return name_; }
  TensorList apply(TensorList&& grads) override;
  void release_saved() override { fn_ = nullptr; }
  bool differentiable_backward() const override { return kind_ == Backward::Differentiable; }

 private:
  std::string name_;
  BackwardFn fn_;  // null once released: a second backward is an error
  Backward kind_;
};

// The sink of a leaf's gradient: runs the leaf's hooks, accumulates into .grad, then fires the
// leaf's post-accumulate hooks (its gradient is final at that moment; data parallelism starts
// communicating there).
struct AccumulateGrad final : Node {
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::string name() const override { return "AccumulateGrad"; }
  TensorList apply(TensorList&& grads) override;
  std::shared_ptr<TensorImpl> leaf;
};

// NOTE [Saved tensors and higher-order gradients]: a SavedTensor keeps a detached alias of the
// tensor (the values, version-checked) and, for a create_graph backward, the tensor's place in
// the graph, so that a formula using it is differentiated through it too:
// - a tensor that requires grad when saved (an input of the op) keeps its place: a leaf is kept
//   itself, an earlier op's output as its grad_fn and output index (references upstream, which
//   cannot form a cycle, and no storage beyond the alias);
// - a tensor that does not (yet) is most often the op's own output, saved before record() makes
//   it one. It gets a SavedIdentity cell, shared through its AutogradMeta, which set_history
//   fills with a weak reference to the node (a strong one would be a cycle: node -> formula ->
//   saved output -> node) and the output's index. Unpacked while that node is alive (as it is
//   while it runs) it comes back as a fresh alias attached to it, as PyTorch's SavedVariable does.
//   A cell never filled (a mask, indices, a constant) leaves a constant.
// unpack() returns the detached alias whenever grad mode is off, which it is in every backward
// but a create_graph one, so first-order backward is unchanged.
struct SavedIdentity {
  std::weak_ptr<Node> fn;
  uint32_t output_nr = 0;
};

// A tensor kept for backward, with the version it had when saved (NOTE [Version counter]).
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t);  // NOLINT(google-explicit-constructor): save(x) reads well
  // Saves `values` (a view of `like`'s storage, or a contiguous copy of `like`: the same elements
  // in row-major order) and, for a create_graph backward, `like`'s place in the graph: unpack()
  // then returns the values in like's shape, attached where like was. Lets an op keep the copy
  // its kernels read (attention's [batch x heads, T, D] operands) without also keeping `like`.
  SavedTensor(const Tensor& values, const Tensor& like);
  // The saved tensor; throws if it was modified in place since it was saved. With grad mode on,
  // attached to the graph as the tensor was (NOTE [Saved tensors and higher-order gradients]).
  Tensor unpack() const;
  bool defined() const { return data_.defined(); }

 private:
  Tensor data_;  // detached alias: no reference back into the graph, so no cycles
  uint32_t version_ = 0;
  Shape shape_, strides_;                   // the geometry unpack() gives when it attaches the values
  int64_t offset_ = 0;
  std::shared_ptr<TensorImpl> leaf_;        // a leaf that required grad when saved
  std::shared_ptr<Node> fn_;                // or the grad_fn (and output_nr) of an op's output
  uint32_t output_nr_ = 0;
  std::shared_ptr<SavedIdentity> output_;   // otherwise: filled if it becomes an op's output
};

// a + b for two gradients of one shape, dtype and device (either may be undefined), recorded when
// grad mode is on and either requires grad: how the engine sums gradients in a create_graph
// backward (the ops' add lives above autograd).
Tensor add_gradients(const Tensor& a, const Tensor& b);

// Moves the SavedIdentity cell of `from` (if any) to `to`: a user function's forward saves its
// outputs before they are replaced by fresh aliases (autograd/function.cpp).
void move_saved_identity(const Tensor& from, const Tensor& to);

// ---- helpers for writing ops ----

// True when grad mode is on and any of the tensors requires grad.
bool any_requires_grad(std::initializer_list<Tensor> ts);
bool any_requires_grad(const TensorList& ts);
// The edge a gradient for t must follow.
Edge gradient_edge(const Tensor& t);
// The AccumulateGrad node of a leaf that requires grad (created once, shared while alive).
std::shared_ptr<Node> grad_accumulator(const Tensor& leaf);

// Connects `outputs` to `node`, whose inputs are `inputs`, and marks them as requiring grad.
void set_history(const std::shared_ptr<Node>& node, const TensorList& inputs, const TensorList& outputs);

// Records a LambdaNode named `name` for an op with these inputs and output(s). The usual
// pattern, next to the forward kernel call:
//   if (autograd::any_requires_grad({a, b}))
//     autograd::record("MulBackward", {a, b}, out, [sa = SavedTensor(a), sb = SavedTensor(b)](const TensorList& g) {
//       return TensorList{mul(g[0], sb.unpack()), mul(g[0], sa.unpack())};
//     });
// `kind` says whether the formula may be differentiated again (Backward above).
std::shared_ptr<Node> record(std::string name, const TensorList& inputs, const Tensor& output, BackwardFn fn,
                             Backward kind = Backward::Once);
std::shared_ptr<Node> record(std::string name, const TensorList& inputs, const TensorList& outputs, BackwardFn fn,
                             Backward kind = Backward::Once);

std::string node_name(const Node& n);

}  // namespace trident::autograd
