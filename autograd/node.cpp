#include "autograd/node.h"

#include <atomic>

#include "core/copy.h"
#include "core/factory.h"
#include "core/shape.h"

namespace trident::autograd {

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};

Node::OutputMeta meta_of(const Tensor& t) { return {t.sizes(), t.dtype(), t.device()}; }

void check_hook_result(const Tensor& r, const Tensor& g, const char* where) {
  TRIDENT_CHECK(r.sizes() == g.sizes(), where, ": a hook returned a gradient of shape ", r.sizes(),
                " for a tensor of shape ", g.sizes());
  TRIDENT_CHECK(r.dtype() == g.dtype(), where, ": a hook returned a gradient of dtype ", r.dtype(), ", expected ", g.dtype());
}
}  // namespace

Node::Node() : sequence_nr(g_next_sequence_nr.fetch_add(1)) {}

namespace {
thread_local std::vector<std::shared_ptr<Node>> g_graveyard;
thread_local bool g_draining = false;
}  // namespace

Node::~Node() {
  // Hand our edges to a queue instead of dropping them here (which would destroy the next
  // node inside this destructor, and so on down the chain); the outermost destructor drains it.
  for (Edge& e : next_edges)
    if (e.fn) g_graveyard.push_back(std::move(e.fn));
  if (g_draining) return;
  g_draining = true;
  while (!g_graveyard.empty()) {
    std::shared_ptr<Node> n = std::move(g_graveyard.back());
    g_graveyard.pop_back();
    n.reset();
  }
  g_draining = false;
}

std::string node_name(const Node& n) { return n.name(); }

TensorList LambdaNode::apply(TensorList&& grads) {
  TRIDENT_CHECK(fn_ != nullptr, "trying to backward through the graph a second time (or to use saved tensors after they "
                                "were freed); pass retain_graph=true to the first backward if you need to do this");
  return fn_(grads);
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> l) : leaf(std::move(l)) {
  // Leaves' gradients are accumulated as soon as they are ready (NOTE [Engine order]).
  sequence_nr = UINT64_MAX;
  Tensor t(leaf);
  outputs.push_back(meta_of(t));
}

TensorList AccumulateGrad::apply(TensorList&& grads) {
  Tensor g = std::move(grads.at(0));
  if (!g.defined()) return {};
  AutogradMeta& meta = leaf->autograd_meta();
  for (const TensorHook& hook : meta.hooks) {
    Tensor r = hook(g);
    if (r.defined()) {
      check_hook_result(r, g, "leaf hook");
      g = r;
    }
  }
  if (GradMode::is_enabled() && (g.requires_grad() || (meta.grad.defined() && meta.grad.requires_grad()))) {
    // A create_graph backward (NOTE [Higher-order gradients]): .grad keeps its graph and is
    // summed out of place, so it can be differentiated.
    meta.grad = meta.grad.defined() ? add_gradients(meta.grad, g) : g;
  } else if (!meta.grad.defined()) {
    // Keep our own dense copy unless nobody else can see this gradient.
    if (!g.is_contiguous() || g.impl_ptr().use_count() > 1 || g.storage().use_count() > 1) {
      Tensor c = empty_like(g);
      copy_(c, g);
      g = c;
    }
    meta.grad = g.detach();
  } else if (meta.grad.impl_ptr().use_count() == 1 && !meta.grad.requires_grad()) {
    add_into_(meta.grad, g);  // nobody holds the old .grad: accumulate in place
  } else {
    Tensor sum = empty_like(meta.grad);
    copy_(sum, meta.grad);
    add_into_(sum, g);
    meta.grad = sum;
  }
  const Tensor leaf_tensor(leaf);
  for (const PostAccumulateGradHook& hook : meta.post_accumulate_hooks) hook(leaf_tensor);
  return {};
}

SavedTensor::SavedTensor(const Tensor& t) : SavedTensor(t, t) {}

SavedTensor::SavedTensor(const Tensor& values, const Tensor& like) {
  if (!values.defined()) return;
  TRIDENT_ASSERT(like.defined() && like.numel() == values.numel() && like.dtype() == values.dtype(),
                 "SavedTensor: values of shape ", values.sizes(), " cannot stand for a tensor of shape ",
                 like.defined() ? like.sizes() : Shape{});
  data_ = values.detach();
  version_ = values.version();
  shape_ = like.sizes();
  if (values.storage() == like.storage()) {  // a view: like's own geometry in the same storage
    strides_ = like.strides();
    offset_ = like.storage_offset();
  } else {
    TRIDENT_ASSERT(values.is_contiguous(), "SavedTensor: a copy standing for another tensor must be contiguous");
    strides_ = contiguous_strides(shape_);
    offset_ = values.storage_offset();
  }
  // NOTE [Saved tensors and higher-order gradients].
  if (like.requires_grad()) {
    if (like.grad_fn()) {
      fn_ = like.grad_fn();
      output_nr_ = like.output_nr();
    } else {
      leaf_ = like.impl_ptr();
    }
  } else {  // (a user function's forward saves its outputs with grad mode off)
    AutogradMeta& meta = like.impl()->autograd_meta();
    if (!meta.saved_identity) meta.saved_identity = std::make_shared<SavedIdentity>();
    output_ = meta.saved_identity;
  }
}

Tensor SavedTensor::unpack() const {
  if (!data_.defined()) return data_;
  TRIDENT_CHECK(data_.version() == version_, "a tensor saved for backward (shape ", data_.sizes(), ", ", data_.dtype(),
                ") was modified by an in-place operation: it was at version ", version_, " when saved and is now at version ",
                data_.version(), ". Use an out-of-place op, or clone() the tensor before modifying it");
  if (!GradMode::is_enabled()) return data_;
  if (leaf_) return Tensor(leaf_);
  std::shared_ptr<Node> fn = fn_;
  uint32_t nr = output_nr_;
  if (!fn && output_) {
    fn = output_->fn.lock();
    nr = output_->output_nr;
  }
  if (!fn) return data_;  // a constant
  Tensor t = data_.as_strided(shape_, strides_, offset_);
  AutogradMeta& meta = t.impl()->autograd_meta();
  meta.requires_grad = true;
  meta.grad_fn = std::move(fn);
  meta.output_nr = nr;
  return t;
}

void move_saved_identity(const Tensor& from, const Tensor& to) {
  if (!from.defined() || !to.defined() || !from.impl()->autograd) return;
  std::shared_ptr<SavedIdentity>& cell = from.impl()->autograd->saved_identity;
  if (cell) to.impl()->autograd_meta().saved_identity = std::move(cell);
}

Tensor add_gradients(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  const bool recording = any_requires_grad({a, b});
  if (!recording && !a.requires_grad() && a.is_contiguous() && a.impl_ptr().use_count() == 1 && a.storage().use_count() == 1) {
    add_into_(a, b);  // nobody else holds a or its memory (as AccumulateGrad's in-place sum): one pass, no copy
    return a;
  }
  Tensor out = empty_like(a);
  copy_(out, a);
  add_into_(out, b);
  if (recording)
    record("AddBackward", {a, b}, out, [](const TensorList& g) { return TensorList{g[0], g[0]}; },
           Backward::Differentiable);
  return out;
}

bool any_requires_grad(std::initializer_list<Tensor> ts) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : ts)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

bool any_requires_grad(const TensorList& ts) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : ts)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  TRIDENT_ASSERT(leaf.is_leaf() && leaf.requires_grad(), "grad_accumulator of a tensor that is not a leaf requiring grad");
  AutogradMeta& meta = leaf.impl()->autograd_meta();
  std::shared_ptr<Node> acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(leaf.impl_ptr());
    meta.grad_accumulator = acc;
  }
  return acc;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  if (t.grad_fn()) return {t.grad_fn(), t.output_nr()};
  return {grad_accumulator(t), 0};
}

void set_history(const std::shared_ptr<Node>& node, const TensorList& inputs, const TensorList& outputs) {
  node->next_edges.clear();
  node->next_edges.reserve(inputs.size());
  for (const Tensor& in : inputs) node->next_edges.push_back(gradient_edge(in));
  node->outputs.clear();
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    TRIDENT_ASSERT(out.defined(), node->name(), ": output ", i, " is undefined");
    TRIDENT_ASSERT(!out.grad_fn() && !out.requires_grad(), node->name(), ": output ", i,
                   " already belongs to a graph (an op must return a new tensor, not its input)");
    AutogradMeta& meta = out.impl()->autograd_meta();
    meta.requires_grad = true;
    meta.grad_fn = node;
    meta.output_nr = static_cast<uint32_t>(i);
    if (meta.saved_identity) {  // NOTE [Saved tensors and higher-order gradients]
      meta.saved_identity->fn = node;
      meta.saved_identity->output_nr = meta.output_nr;
      meta.saved_identity.reset();
    }
    node->outputs.push_back(meta_of(out));
  }
}

std::shared_ptr<Node> record(std::string name, const TensorList& inputs, const Tensor& output, BackwardFn fn,
                             Backward kind) {
  return record(std::move(name), inputs, TensorList{output}, std::move(fn), kind);
}

std::shared_ptr<Node> record(std::string name, const TensorList& inputs, const TensorList& outputs, BackwardFn fn,
                             Backward kind) {
  auto node = std::make_shared<LambdaNode>(std::move(name), std::move(fn), kind);
  set_history(node, inputs, outputs);
  return node;
}

}  // namespace trident::autograd

// ---- Tensor's hook methods (NOTE [Tensor methods]) ----
namespace trident {

void Tensor::register_hook(TensorHook hook) {
  TRIDENT_CHECK(requires_grad(), "cannot register a hook on a tensor that does not require grad");
  if (is_leaf()) {
    impl()->autograd_meta().hooks.push_back(std::move(hook));
  } else {
    grad_fn()->pre_hooks.emplace_back(output_nr(), std::move(hook));
  }
}

void Tensor::register_post_accumulate_grad_hook(PostAccumulateGradHook hook) {
  TRIDENT_CHECK(requires_grad() && is_leaf(), "post-accumulate-grad hooks can only be registered on leaf tensors "
                                              "that require grad (parameters)");
  impl()->autograd_meta().post_accumulate_hooks.push_back(std::move(hook));
}

void Tensor::retain_grad() {
  TRIDENT_CHECK(requires_grad(), "retain_grad() on a tensor that does not require grad");
  if (is_leaf()) return;  // leaves keep their gradient anyway
  AutogradMeta& meta = impl()->autograd_meta();
  if (meta.retains_grad) return;
  meta.retains_grad = true;
  grad_fn()->retained.emplace_back(output_nr(), impl_ptr());
}

}  // namespace trident
