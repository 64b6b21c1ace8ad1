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
           // Recompute with the same random draws, then put the generators back where they were.
           RngStates now{before.gens, {}};
           now.save();
           before.restore();
           TensorList replay_inputs;
           for (size_t i = 0; i < saved.size(); ++i) {
             Tensor t = saved[i].unpack();
             if (t.defined()) {
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
           if (!roots.empty()) backward(roots, root_grads);
           TensorList input_grads;
           for (size_t i = 0; i < replay_inputs.size(); ++i)
             input_grads.push_back(needs_grad[i] ? replay_inputs[i].grad() : Tensor());
           return input_grads;
         });
  return outputs;
}

}  // namespace trident::autograd
