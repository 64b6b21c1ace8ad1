#include "autograd/engine.h"

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/copy.h"
#include "core/factory.h"

namespace trident::autograd {
namespace {

// NOTE [Backward callbacks]: the state of the outermost backward on this thread.
struct BackwardTask {
  int depth = 0;        // nesting of run_backward calls
  uint64_t id = 0;      // of the outermost one while depth > 0
  uint64_t last_id = 0;
  std::vector<std::function<void()>> callbacks;
};
thread_local BackwardTask tls_task;

// Enters a (possibly nested) backward; the outermost exit runs the queued callbacks on success
// (run_callbacks) or drops them (the destructor, on an exception).
class BackwardScope {
 public:
  BackwardScope() {
    if (tls_task.depth++ == 0) {
      tls_task.id = ++tls_task.last_id;
      tls_task.callbacks.clear();
    }
  }
  ~BackwardScope() {
    if (--tls_task.depth == 0) {
      tls_task.id = 0;
      tls_task.callbacks.clear();
    }
  }
  BackwardScope(const BackwardScope&) = delete;
  BackwardScope& operator=(const BackwardScope&) = delete;
  // Called after the graph ran: the outermost scope runs the callbacks (they may queue more).
  void run_callbacks() {
    if (tls_task.depth != 1) return;
    for (size_t i = 0; i < tls_task.callbacks.size(); ++i) {
      std::function<void()> fn = std::move(tls_task.callbacks[i]);
      fn();
    }
    tls_task.callbacks.clear();
  }
};

struct ReadyOrder {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

Tensor sum_grads(const Tensor& a, const Tensor& b) { return add_gradients(a, b); }

// NOTE [Higher-order gradients]: the results of a node whose formula cannot be recorded
// (Node::differentiable_backward() false) in a create_graph backward. They become outputs of a
// node that depends on everything they may depend on (the gradients the node received that
// require grad, and the node's own inputs) and fails, naming the op, if a later backward reaches
// it; a later backward that does not need them (grad() prunes it) never notices.
void attach_not_differentiable(const Node& node, const TensorList& grads_in, TensorList& grads_out) {
  bool any = false;
  for (const Tensor& g : grads_out) any = any || g.defined();
  if (!any) return;
  std::vector<Edge> edges;
  for (const Tensor& g : grads_in)
    if (g.defined() && g.requires_grad()) edges.push_back(gradient_edge(g));
  for (const Edge& e : node.next_edges)
    if (e.fn) edges.push_back(e);
  if (edges.empty()) return;  // the results depend on nothing that requires grad: constants
  const std::string op = node.name();
  TensorList outs;
  std::vector<size_t> where;
  for (size_t i = 0; i < grads_out.size(); ++i) {
    if (!grads_out[i].defined() || !is_floating(grads_out[i].dtype())) continue;
    grads_out[i] = grads_out[i].detach();  // a fresh handle: it may alias a gradient it received
    outs.push_back(grads_out[i]);
    where.push_back(i);
  }
  if (outs.empty()) return;
  std::shared_ptr<Node> err = record(op + "Backward", {}, outs, [op](const TensorList&) -> TensorList {
    TRIDENT_FAIL("the backward of ", op, " is not differentiable: a higher-order gradient through this op is not "
                 "implemented (a gradient computed with create_graph=true went through ", op,
                 " and is being differentiated again)");
  });
  err->next_edges = std::move(edges);
}

void check_grad(const Tensor& g, const Node::OutputMeta& m, const std::string& producer, size_t input, const Node& target) {
  TRIDENT_CHECK(g.sizes() == m.sizes, producer, " returned a gradient of shape ", g.sizes(), " for its input ", input,
                ", but that input (an output of ", target.name(), ") has shape ", m.sizes);
  TRIDENT_CHECK(g.dtype() == m.dtype, producer, " returned a gradient of dtype ", g.dtype(), " for its input ", input,
                ", but that input has dtype ", m.dtype);
  TRIDENT_CHECK(g.device() == m.device, producer, " returned a gradient on ", g.device(), " for its input ", input,
                ", but that input is on ", m.device);
}

// Runs the graph. `capture`: edges whose incoming gradient is returned (by grad()); when
// `accumulate` is false, AccumulateGrad nodes do not run.
TensorList run_backward(const TensorList& roots, const TensorList& grad_roots_in, bool retain_graph, bool accumulate,
                        const std::vector<Edge>& capture, bool create_graph) {
  BackwardScope scope;
  TRIDENT_CHECK(grad_roots_in.empty() || grad_roots_in.size() == roots.size(), "backward: got ", roots.size(),
                " tensors but ", grad_roots_in.size(), " gradients");
  retain_graph = retain_graph || create_graph;
  // NOTE [Higher-order gradients]: a create_graph backward records the formulas it runs.
  const bool prev_grad_mode = GradMode::is_enabled();
  GradMode::set_enabled(create_graph);
  struct RestoreGradMode {
    bool prev;
    ~RestoreGradMode() { GradMode::set_enabled(prev); }
  } restore_grad_mode{prev_grad_mode};
  AutocastModeGuard no_autocast({});  // NOTE [Autocast state]

  std::vector<Edge> root_edges;
  TensorList root_grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    TRIDENT_CHECK(r.defined(), "backward: root ", i, " is undefined");
    TRIDENT_CHECK(r.requires_grad(), "backward: tensor ", i, " (shape ", r.sizes(),
                  ") does not require grad and has no grad_fn: nothing to differentiate");
    Tensor g = grad_roots_in.empty() ? Tensor() : grad_roots_in[i];
    if (!g.defined()) {
      TRIDENT_CHECK(r.numel() == 1, "backward: a gradient can be created implicitly only for one-element outputs; "
                                    "pass one for the output of shape ", r.sizes());
      g = ones_like(r);
    } else {
      TRIDENT_CHECK(g.sizes() == r.sizes(), "backward: gradient shape ", g.sizes(), " does not match output shape ", r.sizes());
      TRIDENT_CHECK(g.dtype() == r.dtype(), "backward: gradient dtype ", g.dtype(), " does not match output dtype ", r.dtype());
      TRIDENT_CHECK(g.device() == r.device(), "backward: gradient on ", g.device(), " but output on ", r.device());
    }
    root_edges.push_back(gradient_edge(r));
    root_grads.push_back(g);
  }

  // Count the gradients each node will receive.
  std::unordered_map<Node*, int> deps;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (const Edge& e : root_edges) {
    if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.fn) continue;
      ++deps[e.fn.get()];
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }

  // grad() runs only the nodes on a path to an input it was asked for (as PyTorch does): the
  // others would cost time and, in a nested grad() inside a backward, free saved tensors the
  // outer backward still needs. A node whose gradient is captured is itself run only if another
  // captured input lies beyond it.
  std::unordered_set<Node*> skip;
  if (!accumulate) {
    std::unordered_set<const Node*> targets;
    for (const Edge& e : capture)
      if (e.fn) targets.insert(e.fn.get());
    // Topological order (every node after all nodes that send it gradients), then backwards.
    std::unordered_map<Node*, int> left = deps;
    std::vector<Node*> order, frontier;
    for (const Edge& e : root_edges)
      if (left[e.fn.get()] == 0 && std::find(frontier.begin(), frontier.end(), e.fn.get()) == frontier.end())
        frontier.push_back(e.fn.get());
    while (!frontier.empty()) {
      Node* n = frontier.back();
      frontier.pop_back();
      order.push_back(n);
      for (const Edge& e : n->next_edges)
        if (e.fn && --left[e.fn.get()] == 0) frontier.push_back(e.fn.get());
    }
    std::unordered_set<const Node*> needed;
    for (size_t i = order.size(); i-- > 0;) {
      Node* n = order[i];
      bool need = false;
      for (const Edge& e : n->next_edges)
        need = need || (e.fn && (targets.count(e.fn.get()) || needed.count(e.fn.get())));
      if (need) {
        needed.insert(n);
      } else {
        skip.insert(n);
      }
    }
  }

  std::unordered_map<Node*, TensorList> buffers;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep_alive;  // roots' nodes may have no other owner
  auto add_to_buffer = [&](const Edge& e, const Tensor& g) {
    TensorList& buf = buffers[e.fn.get()];
    if (buf.size() < e.fn->outputs.size()) buf.resize(e.fn->outputs.size());
    TRIDENT_ASSERT(e.input_nr < buf.size(), e.fn->name(), " has no input ", e.input_nr);
    buf[e.input_nr] = sum_grads(buf[e.input_nr], g);
  };
  for (size_t i = 0; i < root_edges.size(); ++i) {
    add_to_buffer(root_edges[i], root_grads[i]);
    keep_alive[root_edges[i].fn.get()] = root_edges[i].fn;
  }

  std::unordered_map<const Node*, std::vector<size_t>> capture_at;  // node -> indices into capture
  for (size_t i = 0; i < capture.size(); ++i)
    if (capture[i].fn) capture_at[capture[i].fn.get()].push_back(i);
  TensorList captured(capture.size());

  std::priority_queue<Node*, std::vector<Node*>, ReadyOrder> ready;
  for (const Edge& e : root_edges) {
    if (deps[e.fn.get()] == 0 && seen.erase(e.fn.get())) ready.push(e.fn.get());  // erase: push each root once
  }

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    TensorList grads = std::move(buffers[node]);
    buffers.erase(node);
    grads.resize(node->outputs.size());

    // Tensor hooks of non-leaf outputs, then retained gradients.
    for (auto& [nr, hook] : node->pre_hooks) {
      if (nr >= grads.size() || !grads[nr].defined()) continue;
      Tensor r = hook(grads[nr]);
      if (r.defined()) {
        TRIDENT_CHECK(r.sizes() == grads[nr].sizes(), "a tensor hook returned a gradient of shape ", r.sizes(),
                      " for a tensor of shape ", grads[nr].sizes());
        grads[nr] = r;
      }
    }
    for (auto& [nr, weak] : node->retained) {
      if (auto impl = weak.lock(); impl && nr < grads.size() && grads[nr].defined()) {
        AutogradMeta& m = impl->autograd_meta();
        m.grad = m.grad.defined() ? sum_grads(m.grad, grads[nr]) : grads[nr];
      }
    }
    if (auto it = capture_at.find(node); it != capture_at.end()) {
      for (size_t ci : it->second) {
        const uint32_t nr = capture[ci].input_nr;
        if (nr < grads.size()) captured[ci] = grads[nr];
      }
    }

    bool any_defined = false;
    for (const Tensor& g : grads) any_defined = any_defined || g.defined();
    const bool is_accumulate = dynamic_cast<AccumulateGrad*>(node) != nullptr;
    const bool skipped = skip.count(node) != 0;
    TensorList out;
    if (any_defined && !(is_accumulate && !accumulate) && !skipped) {
      for (size_t i = 0; i < grads.size(); ++i) {  // zeros for outputs that got no gradient
        if (!grads[i].defined()) {
          const Node::OutputMeta& m = node->outputs[i];
          grads[i] = zeros(m.sizes, TensorOptions(m.dtype).device(m.device));
        }
      }
      try {
        if (create_graph && !is_accumulate && !node->differentiable_backward()) {
          const TensorList received = grads;
          {
            NoGradGuard off;
            out = node->apply(std::move(grads));
          }
          attach_not_differentiable(*node, received, out);
        } else {
          out = node->apply(std::move(grads));
        }
      } catch (const Error& e) {
        throw Error(detail::str("trident error in backward of ", node->name(), ": ", e.what()), e.file(), e.line(),
                    detail::str("in backward of ", node->name(), ": ", e.message()));
      }
      TRIDENT_CHECK(out.size() == node->next_edges.size() || (is_accumulate && out.empty()), node->name(), " returned ",
                    out.size(), " gradients but has ", node->next_edges.size(), " inputs");
    }
    if (!retain_graph && !skipped) node->release_saved();

    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.fn) continue;
      if (i < out.size() && out[i].defined()) {
        check_grad(out[i], e.fn->outputs.at(e.input_nr), node->name(), i, *e.fn);
        add_to_buffer(e, out[i]);
      }
      if (--deps[e.fn.get()] == 0) ready.push(e.fn.get());
    }
  }
  scope.run_callbacks();
  return captured;
}

}  // namespace

void queue_callback(std::function<void()> fn) {
  TRIDENT_CHECK(tls_task.depth > 0, "autograd::queue_callback: no backward is running on this thread");
  TRIDENT_CHECK(fn != nullptr, "autograd::queue_callback: empty function");
  tls_task.callbacks.push_back(std::move(fn));
}

uint64_t current_backward_id() { return tls_task.depth > 0 ? tls_task.id : 0; }

void backward(const TensorList& roots, const TensorList& grad_roots, bool retain_graph, bool create_graph) {
  run_backward(roots, grad_roots, retain_graph, /*accumulate=*/true, {}, create_graph);
}

TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs, bool retain_graph,
                bool allow_unused, bool create_graph) {
  std::vector<Edge> capture;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TRIDENT_CHECK(inputs[i].defined() && inputs[i].requires_grad(), "grad: input ", i, " does not require grad");
    capture.push_back(gradient_edge(inputs[i]));
  }
  TensorList result = run_backward(outputs, grad_outputs, retain_graph, /*accumulate=*/false, capture, create_graph);
  for (size_t i = 0; i < result.size(); ++i) {
    TRIDENT_CHECK(allow_unused || result[i].defined(), "grad: input ", i, " (shape ", inputs[i].sizes(),
                  ") was not used to compute the outputs; pass allow_unused=true if this is expected");
  }
  return result;
}

}  // namespace trident::autograd

namespace trident {
void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph, create_graph);
}
}  // namespace trident
