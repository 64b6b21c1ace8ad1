#include "parallel/checkpoint.h"

#include <set>

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "parallel/pipeline/checkpoint.h"
#include "parallel/pipeline/pipeline.h"
#include "parallel/tensor_parallel/checkpoint.h"

namespace trident::parallel {
namespace {

// A module holding `state`'s tensors under the same dotted names (nested child modules), so
// that the serial training checkpoint code can write or read a state dict that no live module
// has: a split model's full tensors.
std::shared_ptr<nn::Module> module_of(const nn::StateDict& state) {
  auto root = std::make_shared<nn::Module>("FullState");
  std::map<std::string, std::shared_ptr<nn::Module>> made{{"", root}};
  for (const auto& [name, t] : state) {
    std::string prefix;
    std::shared_ptr<nn::Module> m = root;
    size_t from = 0;
    for (size_t dot = name.find('.'); dot != std::string::npos; from = dot + 1, dot = name.find('.', from)) {
      const std::string part = name.substr(from, dot - from);
      prefix += (prefix.empty() ? "" : ".") + part;
      auto it = made.find(prefix);
      if (it == made.end()) it = made.emplace(prefix, m->register_module(part, std::make_shared<nn::Module>())).first;
      m = it->second;
    }
    m->register_buffer(name.substr(from), t);
  }
  return root;
}

// The optimizer's parameters, grouped, and all of them in state-dict order.
ParamGroups groups_of(const nn::optim::Optimizer& opt) {
  ParamGroups g;
  for (size_t i = 0; i < opt.num_groups(); ++i) g.push_back(opt.params(i));
  return g;
}
std::vector<Tensor> flatten(const ParamGroups& groups) {
  std::vector<Tensor> all;
  for (const auto& g : groups) all.insert(all.end(), g.begin(), g.end());
  return all;
}

}  // namespace

void save_training_checkpoint(const std::string& path, comm::Communicator& dp, const nn::TrainingCheckpointParts& parts,
                              const nn::TrainingProgress& progress, ZeroOptimizer* zero, const ModelParallelCheckpoint* mp) {
  TRIDENT_CHECK(!(zero && parts.optimizer), "save_training_checkpoint ", path,
                ": give the ZeroOptimizer or parts.optimizer, not both");
  TRIDENT_CHECK(!mp || parts.model != nullptr, "save_training_checkpoint ", path,
                ": a model-parallel checkpoint needs the model");
  const bool has_optimizer = zero || parts.optimizer;
  nn::optim::OptimizerState full;
  // Collective over dp: the gathered state on dp rank 0, the writer's dp index, alone.
  if (zero) {
    if (auto gathered = zero->state_dict_to(0)) full = std::move(*gathered);
  }
  ParamGroups groups;
  nn::StateDict model_state;
  // Only dp rank 0's tp and pp groups gather: every rank of those groups has dp index 0, so the
  // other dp indices' groups skip them together.
  if (mp && dp.rank() == 0) {
    nn::optim::Optimizer* own = zero ? &zero->shard_optimizer() : parts.optimizer;
    groups = zero ? zero->param_groups() : parts.optimizer ? groups_of(*parts.optimizer) : ParamGroups{};
    if (parts.optimizer) full = parts.optimizer->state_dict();
    // This rank's part: the stage's tensors under pp (NOTE [Stage-only model]), else the model's.
    model_state = mp->pipe ? mp->pipe->state_dict() : parts.model->state_dict();
    if (mp->tp) {  // collective over tp: the split tensors gathered to full ones
      if (has_optimizer) full = tp::full_optimizer_state(full, *parts.model, flatten(groups), *mp->tp);
      model_state = tp::full_state_dict(model_state, *parts.model, *mp->tp);
    }
    // NOTE [Pipeline checkpoints]: the stages' full tensors to pp rank 0, over the pp group of tp
    // rank 0 (whose ranks all share that tp index, so the other pp groups skip it together).
    if (mp->pipe && (!mp->tp || mp->tp->rank() == 0)) {
      model_state = pipeline::gather_state_dict(*mp->pipe, model_state);
      if (has_optimizer) full = pipeline::gather_optimizer_state(*mp->pipe, full, groups, mp->whole_groups, own->slot_names());
      groups = mp->whole_groups;
    }
  }
  const bool writer = dp.rank() == 0 && (!mp || ((!mp->tp || mp->tp->rank() == 0) && (!mp->pipe || mp->pipe->pp()->rank() == 0)));
  std::string failure;
  if (writer) {
    try {
      nn::TrainingCheckpointParts p = parts;
      std::shared_ptr<nn::Module> holder;
      if (mp) {
        holder = module_of(model_state);
        p.model = holder.get();
      }
      // The gathered state is the unsharded (serial) optimizer's state dict: written as it is.
      if (mp || zero) {
        p.optimizer = nullptr;
        if (has_optimizer) p.optimizer_state = &full;
      }
      nn::save_training_checkpoint(path, p, progress);
    } catch (const Error& e) {
      failure = e.message();
    }
  }
  // The writer's result reaches its tp group (dp and pp rank 0), then over pp every rank of dp
  // rank 0, then over dp everyone (what other groups' rank 0s send first is overwritten).
  Tensor ok = scalar_tensor(failure.empty() ? 1.0 : 0.0, DType::I32);
  if (mp && mp->tp) mp->tp->broadcast(ok, 0).wait();
  if (mp && mp->pipe) mp->pipe->pp()->broadcast(ok, 0).wait();
  dp.broadcast(ok, 0).wait();
  if (writer && !failure.empty()) TRIDENT_FAIL(failure);
  TRIDENT_CHECK(ok.item<int>() == 1, "save_training_checkpoint ", path,
                ": the writing rank (dp, pp and tp rank 0) failed to write the checkpoint; its error says why");
}

nn::TrainingProgress load_training_checkpoint(const std::string& path, const nn::TrainingCheckpointParts& parts,
                                              ZeroOptimizer* zero, const ModelParallelCheckpoint* mp) {
  TRIDENT_CHECK(!(zero && parts.optimizer), "load_training_checkpoint ", path,
                ": give the ZeroOptimizer or parts.optimizer, not both");
  if (mp) {
    TRIDENT_CHECK(parts.model != nullptr, "load_training_checkpoint ", path, ": a model-parallel checkpoint needs the model");
    nn::Module& model = *parts.model;
    // A serial-shaped copy: the model's names with the full shapes.
    const auto shards = tp::sharded_parameters(model);
    // NOTE [Stage-only model]: under pp only the stage's entries are read; the others are
    // one-element placeholders of the full shape, checked by shape, never allocated whole.
    std::set<std::string> stage_names;
    if (mp->pipe)
      for (const auto& [name, t] : mp->pipe->state_dict()) stage_names.insert(name);
    nn::StateDict shaped;
    for (const auto& [name, t] : model.state_dict()) {
      Shape s = t.sizes();
      const auto it = shards.find(name);
      if (it != shards.end()) s[static_cast<size_t>(it->second.dim)] = it->second.full_size;
      const bool read = !mp->pipe || stage_names.count(name) != 0;
      shaped[name] = read ? zeros(s, TensorOptions(t.dtype())) : broadcast_scalar(s, 0.0, TensorOptions(t.dtype()));
    }
    const ParamGroups groups = zero ? zero->param_groups() : parts.optimizer ? groups_of(*parts.optimizer) : ParamGroups{};
    const ParamGroups& whole = mp->pipe ? mp->whole_groups : groups;
    nn::TrainingCheckpointParts p = parts;
    if (mp->pipe) p.load_only = &stage_names;
    // The optimizer state goes straight from the mapped file into this rank's part (this stage's,
    // this tp rank's shards of it, and under ZeRO this dp rank's shards of those): no rank builds
    // the whole model's state. The part's optimizer checks it before changing anything.
    p.optimizer = nullptr;
    if (zero || parts.optimizer)
      p.load_optimizer = [&](const nn::optim::OptimizerState& whole_state) {
        nn::optim::OptimizerState st = mp->pipe ? pipeline::stage_optimizer_state(whole_state, whole, groups) : whole_state;
        if (mp->tp) st = tp::local_optimizer_state(st, model, flatten(groups), *mp->tp);
        if (zero)
          zero->load_state_dict(st);
        else
          parts.optimizer->load_state_dict(st);
      };
    const std::shared_ptr<nn::Module> holder = module_of(shaped);
    p.model = holder.get();
    // Checks everything (names, shapes, optimizer state) before it changes the copy, the
    // scaler and the generators; the shards below cannot fail after that.
    nn::TrainingProgress progress = nn::load_training_checkpoint(path, p);
    {
      NoGradGuard no_grad;
      // Under pp, the stage's entries only (the rest are placeholders, NOTE [Stage-only model]);
      // the file was checked whole above.
      nn::StateDict mine = shaped;
      if (mp->pipe) {
        mine.clear();
        for (const auto& [name, t] : mp->pipe->state_dict()) mine.emplace(name, shaped.at(name));
      }
      if (mp->tp)
        tp::load_full_state_dict(model, mine, *mp->tp, /*strict=*/mp->pipe == nullptr);
      else
        model.load_state_dict(mine, /*strict=*/mp->pipe == nullptr);
    }
    return progress;
  }
  if (!zero) return nn::load_training_checkpoint(path, parts);
  // The optimizer state goes from the mapped file into this rank's shards: no rank builds the
  // whole state (NOTE [ZeRO-1 checkpoints]).
  nn::TrainingCheckpointParts p = parts;
  p.load_optimizer = [&](const nn::optim::OptimizerState& full) { zero->load_state_dict(full); };
  return nn::load_training_checkpoint(path, p);
}

}  // namespace trident::parallel
