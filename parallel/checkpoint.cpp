#include "parallel/checkpoint.h"

#include <functional>
#include <set>
#include <tuple>

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

namespace {

// NOTE [Streamed checkpoints]: one entry of a part, and how it reaches the writer.
struct Entry {
  nn::TensorSpec spec;
  // Collective among the ranks that hold a piece of the entry (and a no-op on the others): the
  // whole tensor on the writer, undefined elsewhere.
  std::function<Tensor()> fetch;
};
using Entries = std::vector<Entry>;

// The entries in the order the safetensors writer asks for them (nn::safetensors_order: a pure
// function of the specs, the same on every rank).
Entries in_file_order(Entries entries) {
  std::vector<nn::TensorSpec> specs;
  for (const Entry& e : entries) specs.push_back(e.spec);
  Entries out;
  for (size_t i : nn::safetensors_order(specs)) out.push_back(std::move(entries[i]));
  return out;
}

using nn::optim::detail::state_key;

// Who takes part in the save, and where the pieces are.
struct Layout {
  comm::Communicator* dp = nullptr;
  comm::Communicator* tp = nullptr;
  comm::Communicator* pp = nullptr;
  bool writer = false;
  int pp_rank() const { return pp ? pp->rank() : 0; }
  // The last hop of an entry whose pieces are whole on stage `owner` (tp rank 0 of dp rank 0 of
  // it): to pp rank 0, the writer's stage. Returns what the writer keeps.
  Tensor to_writer(Tensor t, int owner) const {
    if (pp) {
      if (tp && tp->rank() != 0) return {};
      t = pipeline::send_to_first(*pp, t, owner);
    }
    return writer ? t : Tensor();
  }
};

// The model's entries under model parallelism: every name of the model's state dict with its
// full (serial) shape, held by the stage that owns it (all of them without pp), split over tp
// when it is a tp shard. Only dp rank 0's ranks take part (the replicas are identical).
Entries model_entries(nn::Module& model, const ModelParallelCheckpoint& mp, const Layout& at) {
  const nn::StateDict all = model.state_dict();  // under pp: other stages' entries are placeholders of their shape
  const auto shards = mp.tp ? tp::sharded_parameters(model) : std::map<std::string, tp::ParamShard>{};
  auto stage = std::make_shared<nn::StateDict>(mp.pipe ? mp.pipe->state_dict() : all);
  // Under pp the names are the pipeline's (every entry of the model's state dict, with the stage
  // that owns it).
  std::map<std::string, int64_t> owners;
  if (mp.pipe)
    owners = mp.pipe->state_owners();
  else
    for (const auto& [name, t] : all) owners[name] = 0;
  Entries out;
  for (const auto& [name, owner_stage] : owners) {
    const auto entry = all.find(name);
    TRIDENT_CHECK(entry != all.end(), "checkpoint: the pipeline's entry '", name, "' is not in the model's state dict");
    const Tensor& t = entry->second;
    Shape shape = t.sizes();
    std::optional<tp::ParamShard> shard;
    if (const auto it = shards.find(name); it != shards.end()) {
      shard = it->second;
      shape[static_cast<size_t>(shard->dim)] = shard->full_size;
    }
    const int owner = static_cast<int>(owner_stage);
    out.push_back({{name, t.dtype(), shape}, [at, stage, name = name, shard, owner]() -> Tensor {
                     if (at.dp->rank() != 0 || (at.pp_rank() != owner && at.pp_rank() != 0)) return {};
                     Tensor whole;
                     if (at.pp_rank() == owner) {
                       const auto it = stage->find(name);
                       TRIDENT_CHECK(it != stage->end(), "checkpoint: stage ", owner, " holds '", name,
                                     "' but its state dict has no such entry");
                       whole = it->second.detach();
                       if (shard) whole = tp::gather_full(whole, *shard, *at.tp);  // collective over tp
                     }
                     return at.to_writer(whole, owner);
                   }});
  }
  return in_file_order(std::move(out));
}

// What each stage's optimizer holds, per parameter of the whole model.
struct ParamInfo {
  int owner = -1;  // the first stage holding the parameter
  std::optional<double> step;
  std::vector<std::optional<DType>> slots;  // by slot_names()
};

// The optimizer's entries and its state without tensors (name and scalars, the serial
// optimizer's). Taking part: every rank under ZeRO (the buffers are sharded over dp), dp rank
// 0's ranks otherwise. `zero` or `opt` (the plain optimizer over `groups`) holds the state;
// `whole_groups`: the whole model's parameters (the stage's groups without pp).
std::pair<Entries, nn::optim::OptimizerState> optimizer_entries(ZeroOptimizer* zero, nn::optim::Optimizer* opt,
                                                                const ParamGroups& groups, const ParamGroups& whole_groups,
                                                                nn::Module* model, const Layout& at) {
  nn::optim::Optimizer& own = zero ? zero->shard_optimizer() : *opt;
  const auto slot_names = own.slot_names();
  const size_t ns = slot_names.size();
  const std::vector<Tensor> whole = flatten(whole_groups), stage = flatten(groups);
  const size_t n = whole.size();
  // Where each whole-model parameter is in this stage's optimizer (-1: another stage's).
  std::vector<int64_t> local(n, -1);
  for (size_t j = 0; j < n; ++j)
    for (size_t i = 0; i < stage.size() && local[j] < 0; ++i)
      if (whole[j].is_same(stage[i])) local[j] = static_cast<int64_t>(i);
  // This stage's state: steps and buffers per stage parameter.
  auto state = std::make_shared<nn::optim::OptimizerState>(own.state_dict());
  std::vector<ZeroOptimizer::ParamStateInfo> mine;
  if (zero) {
    mine = zero->param_state_info();
  } else {
    for (size_t i = 0; i < stage.size(); ++i) {
      ZeroOptimizer::ParamStateInfo info{std::nullopt, std::vector<std::optional<DType>>(ns)};
      if (const auto it = state->scalars.find(state_key(i, "step")); it != state->scalars.end())
        info.step = it->second;
      for (size_t k = 0; k < ns; ++k)
        if (const auto it = state->tensors.find(state_key(i, slot_names[k])); it != state->tensors.end()) {
          TRIDENT_CHECK(it->second.sizes() == stage[i].sizes(), "checkpoint: optimizer state '", it->first, "' has shape ",
                        it->second.sizes(), ", not its parameter's ", stage[i].sizes(),
                        ": only element-wise optimizers' state can be streamed");
          info.slots[k] = it->second.dtype();
        }
      mine.push_back(std::move(info));
    }
  }
  // Every stage's row: [held, has step, step, slot dtype + 1 ...] per whole-model parameter; the
  // stages' rows meet over pp (the same on every rank of the pp group).
  const int64_t k = at.pp ? at.pp->size() : 1, width = 3 + static_cast<int64_t>(ns);
  Tensor table = zeros({k, static_cast<int64_t>(n), width}, TensorOptions(DType::F64));
  double* row = table.data<double>() + at.pp_rank() * static_cast<int64_t>(n) * width;
  for (size_t j = 0; j < n; ++j, row += width) {
    if (local[j] < 0) continue;
    const ZeroOptimizer::ParamStateInfo& info = mine.at(static_cast<size_t>(local[j]));
    row[0] = 1;
    row[1] = info.step ? 1 : 0;
    row[2] = info.step.value_or(0);
    for (size_t s = 0; s < ns; ++s) row[3 + s] = info.slots[s] ? static_cast<double>(*info.slots[s]) + 1 : 0;
  }
  if (at.pp) at.pp->all_reduce(table, comm::ReduceOp::Sum).wait();
  const double* t = table.data<double>();
  std::vector<ParamInfo> info(n);
  for (size_t j = 0; j < n; ++j) {
    for (int64_t r = 0; r < k && info[j].owner < 0; ++r) {
      const double* p = t + (r * static_cast<int64_t>(n) + static_cast<int64_t>(j)) * width;
      if (p[0] == 0) continue;
      info[j].owner = static_cast<int>(r);
      if (p[1] != 0) info[j].step = p[2];
      for (size_t s = 0; s < ns; ++s)
        if (p[3 + s] != 0) info[j].slots.push_back(static_cast<DType>(static_cast<int>(p[3 + s]) - 1));
        else info[j].slots.push_back(std::nullopt);
    }
    TRIDENT_CHECK(info[j].owner >= 0, "checkpoint: parameter ", j, " of the whole model (shape ", whole[j].sizes(),
                  ") belongs to no stage");
  }

  // The serial optimizer's scalars: the hyperparameters, each group's parameter count, the steps.
  nn::optim::OptimizerState header;
  header.optimizer = state->optimizer;
  header.scalars = nn::optim::detail::shared_scalars(state->scalars, group_sizes(whole_groups));
  for (size_t j = 0; j < n; ++j)
    if (info[j].step) header.scalars[state_key(j, "step")] = *info[j].step;

  const std::vector<Shape> shapes = at.tp ? tp::full_shapes(*model, whole) : std::vector<Shape>{};
  const std::vector<std::optional<tp::ParamShard>> shards =
      at.tp ? tp::param_shards(*model, whole) : std::vector<std::optional<tp::ParamShard>>(n);
  Entries out;
  for (size_t j = 0; j < n; ++j)
    for (size_t s = 0; s < ns; ++s) {
      if (!info[j].slots[s]) continue;
      const int owner = info[j].owner;
      const int64_t li = local[j];
      const std::string_view slot = slot_names[s];
      const std::optional<tp::ParamShard> shard = shards[j];
      out.push_back({{state_key(j, slot), *info[j].slots[s], at.tp ? shapes[j] : whole[j].sizes()},
                     [at, zero, state, owner, li, slot, shard]() -> Tensor {
                       if (at.pp_rank() != owner && at.pp_rank() != 0) return {};
                       if (!zero && at.dp->rank() != 0) return {};
                       Tensor whole;
                       if (at.pp_rank() == owner) {
                         const size_t i = static_cast<size_t>(li);
                         whole = zero ? zero->gather_param_slot_to(i, slot, 0)  // collective over dp
                                      : state->tensors.at(state_key(i, slot)).detach();
                         if (at.dp->rank() != 0) return {};
                         if (shard) whole = tp::gather_full(whole, *shard, *at.tp);  // collective over tp
                       }
                       if (at.dp->rank() != 0) return {};
                       return at.to_writer(whole, owner);
                     }});
    }
  return {in_file_order(std::move(out)), std::move(header)};
}

// A part's entries as the writer's stream: produce(i) fetches entry i, which the writer asks for
// in file order; `done` counts the entries fetched, so that after a failed write the rest can
// still be fetched and the other ranks are not left waiting.
nn::TensorStream stream_of(const Entries& entries, size_t& done) {
  nn::TensorStream s;
  for (const Entry& e : entries) s.specs.push_back(e.spec);
  s.produce = [&entries, &done](size_t i) {
    TRIDENT_CHECK(i == done, "checkpoint: the writer asked for entry ", i, " while ", done, " were fetched");
    Tensor t = entries[i].fetch();
    ++done;
    return t;
  };
  return s;
}

}  // namespace

void save_training_checkpoint(const std::string& path, comm::Communicator& dp, const nn::TrainingCheckpointParts& parts,
                              const nn::TrainingProgress& progress, ZeroOptimizer* zero, const ModelParallelCheckpoint* mp) {
  TRIDENT_CHECK(!(zero && parts.optimizer), "save_training_checkpoint ", path,
                ": give the ZeroOptimizer or parts.optimizer, not both");
  TRIDENT_CHECK(!mp || parts.model != nullptr, "save_training_checkpoint ", path,
                ": a model-parallel checkpoint needs the model");
  const bool has_optimizer = zero || parts.optimizer;
  Layout at;
  at.dp = &dp;
  if (mp) {
    at.tp = mp->tp;
    at.pp = mp->pipe ? mp->pipe->pp().get() : nullptr;
  }
  at.writer = dp.rank() == 0 && (!at.tp || at.tp->rank() == 0) && at.pp_rank() == 0;
  // NOTE [Streamed checkpoints]: the parts' entries, fetched one at a time. Only the ranks whose
  // state is not the writer's own take part: under model parallelism dp rank 0's (the other dp
  // indices' groups skip together: every rank of a tp or pp group has one dp index), under ZeRO
  // every rank; a serial-shaped run without ZeRO writes dp rank 0's parts as they are.
  Entries model, optimizer;
  nn::optim::OptimizerState optimizer_header;
  const bool takes_part = zero || (mp && dp.rank() == 0);
  if (takes_part) {
    if (mp) model = model_entries(*parts.model, *mp, at);
    if (has_optimizer) {
      const ParamGroups groups = zero ? zero->param_groups() : groups_of(*parts.optimizer);
      const ParamGroups& whole = mp && mp->pipe ? mp->whole_groups : groups;
      std::tie(optimizer, optimizer_header) = optimizer_entries(zero, parts.optimizer, groups, whole, parts.model, at);
    }
  }
  std::string failure;
  if (at.writer) {
    size_t model_done = 0, optimizer_done = 0;
    bool fetch_failed = false;
    const nn::TensorStream model_stream = stream_of(model, model_done);
    const nn::TensorStream optimizer_stream = stream_of(optimizer, optimizer_done);
    try {
      nn::TrainingCheckpointParts p = parts;
      if (mp) p.model_stream = &model_stream;
      if (takes_part && has_optimizer) {
        p.optimizer = nullptr;
        p.optimizer_state = &optimizer_header;
        p.optimizer_stream = &optimizer_stream;
      }
      nn::save_training_checkpoint(path, p, progress);
    } catch (const Error& e) {
      failure = e.message();
      // The others are fetching entry by entry: finish the sequence with them (unless the
      // fetching itself failed), then tell them.
      try {
        for (; model_done < model.size(); ++model_done) (void)model[model_done].fetch();
        for (; optimizer_done < optimizer.size(); ++optimizer_done) (void)optimizer[optimizer_done].fetch();
      } catch (const Error&) {
        fetch_failed = true;
      }
    }
    if (fetch_failed) TRIDENT_FAIL(failure);
  } else if (takes_part) {
    for (const Entry& e : model) (void)e.fetch();
    for (const Entry& e : optimizer) (void)e.fetch();
  }
  // The writer's result reaches its tp group (dp and pp rank 0), then over pp every rank of dp
  // rank 0, then over dp everyone (what other groups' rank 0s send first is overwritten).
  Tensor ok = scalar_tensor(failure.empty() ? 1.0 : 0.0, DType::I32);
  if (at.tp) at.tp->broadcast(ok, 0).wait();
  if (at.pp) at.pp->broadcast(ok, 0).wait();
  dp.broadcast(ok, 0).wait();
  if (at.writer && !failure.empty()) TRIDENT_FAIL(failure);
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
