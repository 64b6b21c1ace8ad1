#include "autograd/checkpoint.h"

#include "autograd/engine.h"
#include "core/factory.h"

namespace trident::autograd {
namespace {

struct RngStates {
  std::vector<Generator*> gens;
  std::vector<PhiloxState> states;
  void save() {
    states.clear();
    for (Generator* g : gens) states.push_back(g->state());
  }
  void restore() const {
    for (size_t i = 0; i < gens.size(); ++i) gens[i]->set_state(states[i]);
  }
};

thread_local bool recomputing = false;

// Sets the flag for the re-run, restoring the outer value (a nested checkpoint's re-run ends
// inside the outer one's).
class RecomputingGuard {
 public:
  RecomputingGuard() : outer_(recomputing) { recomputing = true; }
  ~RecomputingGuard() { recomputing = outer_; }
  RecomputingGuard(const RecomputingGuard&) = delete;
  RecomputingGuard& operator=(const RecomputingGuard&) = delete;

 private:
  bool outer_;
};

// NOTE [Checkpoint and higher-order gradients]: under a create_graph backward the re-run must
// stay connected to the inputs' own graph, or the gradients it returns would be constants in
// them (a second derivative missing its terms). So each input that requires grad enters the
// re-run through a node of its own (CheckpointInput: the identity, its edge to the input's
// history), and the re-run's graph is differentiated with create_graph (parameters inside fn get
// recorded sums in .grad, as a create_graph backward gives them). That inner backward must stop
// at the inputs: while it runs, each CheckpointInput node has no edges and keeps the gradient it
// receives (the input's gradient, itself a recorded tensor) instead of passing it on. Afterwards
// its edge is back and it is an ordinary identity, so a later backward through the returned
// gradients reaches the inputs' history.
struct Capture {
  std::shared_ptr<Node> node;  // the CheckpointInput node
  std::vector<Edge> edges;     // its edge, put aside while the inner backward runs
  bool active = true;
  Tensor grad;
};

// Puts the captures' edges back, whatever happens.
struct RestoreEdges {
  std::vector<std::shared_ptr<Capture>>& captures;
  ~RestoreEdges() {
    for (auto& c : captures)
      if (c && c->active) {
        c->node->next_edges = std::move(c->edges);
        c->active = false;
      }
  }
};

}  // namespace

bool is_recomputing() { return recomputing; }

TensorList checkpoint(const CheckpointFn& fn, const TensorList& inputs, std::vector<Generator*> generators) {
  if (generators.empty()) generators.push_back(&default_generator());
  if (!GradMode::is_enabled()) return fn(inputs);

  RngStates before{generators, {}};
  before.save();
  const AutocastMode forward_mode = AutocastMode::get();  // NOTE [Autocast state]
  TensorList outputs;
  {
    NoGradGuard no_grad;
    TensorList detached;
    for (const Tensor& t : inputs) detached.push_back(t.defined() ? t.detach() : t);
    outputs = fn(detached);
  }
  // Outputs that alias an input or each other would share one impl; give each its own handle.
  TensorList fresh;
  std::vector<size_t> differentiable;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].defined() && is_floating(outputs[i].dtype())) {
      differentiable.push_back(i);
      fresh.push_back(outputs[i].detach());
      outputs[i] = fresh.back();
    }
  }
  if (fresh.empty()) return outputs;

  std::vector<SavedTensor> saved;
  std::vector<bool> needs_grad;
  for (const Tensor& t : inputs) {
    saved.emplace_back(t);
    needs_grad.push_back(t.defined() && t.requires_grad());
  }
  record("CheckpointBackward", inputs, fresh,
         [fn, saved, needs_grad, before, differentiable, forward_mode](const TensorList& grads) -> TensorList {
           // Recorded by a create_graph backward: NOTE [Checkpoint and higher-order gradients].
           const bool create_graph = GradMode::is_enabled();
           // Recompute with the same random draws, then put the generators back where they were.
           RngStates now{before.gens, {}};
           now.save();
           before.restore();
           TensorList replay_inputs;
           std::vector<std::shared_ptr<Capture>> captures(saved.size());
           RestoreEdges restore{captures};
           for (size_t i = 0; i < saved.size(); ++i) {
             Tensor t = saved[i].unpack();  // under create_graph: attached to the inputs' graph
             if (t.defined() && needs_grad[i] && create_graph) {
               auto c = std::make_shared<Capture>();
               Tensor r = t.detach();
               // Weakly: the capture holds the node; once this backward is over it is gone and the
               // node is the identity.
               c->node = record("CheckpointInput", {t}, r,
                                [weak = std::weak_ptr<Capture>(c)](const TensorList& g) -> TensorList {
                                  if (const auto cap = weak.lock(); cap && cap->active) {
                                    cap->grad = g[0];
                                    return {};
                                  }
                                  return {g[0]};
                                },
                                Backward::Differentiable);
               c->edges = std::move(c->node->next_edges);
               c->node->next_edges.clear();
               captures[i] = c;
               t = r;
             } else if (t.defined()) {
               t = t.detach();
               if (needs_grad[i]) t.set_requires_grad(true);
             }
             replay_inputs.push_back(t);
           }
           TensorList recomputed;
           {
             EnableGradGuard enable;
             RecomputingGuard flag;
             AutocastModeGuard mode(forward_mode);
             recomputed = fn(replay_inputs);
           }
           now.restore();
           TRIDENT_CHECK(recomputed.size() > (differentiable.empty() ? 0 : differentiable.back()),
                         "checkpoint: the function returned fewer outputs when re-run (", recomputed.size(), ")");
           TensorList roots, root_grads;
           for (size_t k = 0; k < differentiable.size(); ++k) {
             const Tensor& out = recomputed[differentiable[k]];
             if (out.requires_grad()) {
               roots.push_back(out);
               root_grads.push_back(grads[k]);
             }
           }
           if (!roots.empty()) backward(roots, root_grads, /*retain_graph=*/create_graph, create_graph);
           TensorList input_grads;
           for (size_t i = 0; i < replay_inputs.size(); ++i)
             input_grads.push_back(!needs_grad[i] ? Tensor() : captures[i] ? captures[i]->grad : replay_inputs[i].grad());
           return input_grads;
         },
         Backward::Differentiable);
  return outputs;
}

}  // namespace trident::autograd
