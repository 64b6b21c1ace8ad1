#include "parallel/tensor_parallel/checkpoint.h"

#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "nn/safetensors.h"

#include <optional>

namespace trident::parallel::tp {

std::map<std::string, ParamShard> sharded_parameters(nn::Module& model) {
  std::map<std::string, ParamShard> out;
  // named_modules() lists the model itself only when a shared_ptr owns it: look at it directly.
  if (const auto* s = dynamic_cast<const ShardedModule*>(&model))
    for (const auto& [name, shard] : s->shards()) out[name] = shard;
  for (const auto& [prefix, m] : model.named_modules()) {
    const auto* s = dynamic_cast<const ShardedModule*>(m.get());
    if (!s || prefix.empty()) continue;
    for (const auto& [name, shard] : s->shards()) out[prefix.empty() ? name : prefix + "." + name] = shard;
  }
  return out;
}

nn::StateDict full_state_dict(nn::Module& model, comm::Communicator& group) {
  return full_state_dict(model.state_dict(), model, group);
}

nn::StateDict full_state_dict(const nn::StateDict& local, nn::Module& model, comm::Communicator& group) {
  const auto shards = sharded_parameters(model);
  nn::StateDict full;
  // std::map order: the same on every rank, so the gathers match.
  for (const auto& [name, t] : local) {
    const auto it = shards.find(name);
    full[name] = it == shards.end() ? t.detach().clone() : gather_full(t, it->second, group);
  }
  return full;
}

void load_full_state_dict(nn::Module& model, const nn::StateDict& full, const comm::Communicator& group, bool strict) {
  const auto shards = sharded_parameters(model);
  const nn::StateDict mine = model.state_dict();
  nn::StateDict local;
  nn::LoadResult problems;
  for (const auto& [name, t] : full) {
    const auto target = mine.find(name);
    if (target == mine.end()) {
      problems.unexpected.push_back(name);
      continue;
    }
    const auto it = shards.find(name);
    if (it == shards.end()) {
      local[name] = t;
      continue;
    }
    const ParamShard& s = it->second;
    Shape expected = target->second.sizes();
    expected[static_cast<size_t>(s.dim)] = s.full_size;
    if (t.sizes() != expected || t.dtype() != target->second.dtype()) {
      problems.mismatched.push_back({name, expected, target->second.dtype(), t.sizes(), t.dtype()});
      continue;
    }
    local[name] = shard_of(t, s, group.rank(), group.size());
  }
  for (const auto& [name, t] : mine)
    if (!full.count(name)) problems.missing.push_back(name);
  if (strict) {
    TRIDENT_CHECK(problems.ok(), "loading a full state dict at tp = ", group.size(), ": ", nn::describe_load_problems(problems));
  }
  nn::load_into(mine, local, false);
}

void save_full_safetensors(nn::Module& model, const std::string& path, comm::Communicator& group) {
  const nn::StateDict full = full_state_dict(model, group);
  if (group.rank() == 0) nn::save_safetensors(path, full, {{"format", "pt"}});
  group.barrier().wait();
}

void load_full_safetensors(nn::Module& model, const std::string& path, const comm::Communicator& group, bool strict) {
  load_full_state_dict(model, nn::load_safetensors(path, nn::LoadMode::Copy).tensors, group, strict);
}

namespace {

}  // namespace

std::vector<std::optional<ParamShard>> param_shards(nn::Module& model, const std::vector<Tensor>& params) {
  const auto shards = sharded_parameters(model);
  std::vector<std::optional<ParamShard>> out(params.size());
  const auto named = model.named_parameters();
  for (size_t i = 0; i < params.size(); ++i)
    for (const auto& [name, p] : named)
      if (p.is_same(params[i])) {
        const auto it = shards.find(name);
        if (it != shards.end()) out[i] = it->second;
        break;
      }
  return out;
}

namespace {

// The parameter index of an optimizer state key "state.<i>.<slot>".
size_t param_index(const std::string& key, size_t num_params) {
  const size_t dot = key.find('.', 6);
  TRIDENT_CHECK(key.rfind("state.", 0) == 0 && dot != std::string::npos, "optimizer state key '", key,
                "' is not state.<i>.<slot>");
  const size_t i = std::stoul(key.substr(6, dot - 6));
  TRIDENT_CHECK(i < num_params, "optimizer state key '", key, "' names parameter ", i, " of ", num_params);
  return i;
}

}  // namespace

std::vector<Shape> full_shapes(nn::Module& model, const std::vector<Tensor>& params) {
  const auto shards = param_shards(model, params);
  std::vector<Shape> out;
  for (size_t i = 0; i < params.size(); ++i) {
    Shape s = params[i].sizes();
    if (shards[i]) s[static_cast<size_t>(shards[i]->dim)] = shards[i]->full_size;
    out.push_back(s);
  }
  return out;
}

nn::optim::OptimizerState full_optimizer_state(const nn::optim::OptimizerState& local, nn::Module& model,
                                               const std::vector<Tensor>& params, comm::Communicator& group) {
  const auto shards = param_shards(model, params);
  nn::optim::OptimizerState full = local;
  // std::map order: the same on every rank, so the gathers match.
  for (const auto& [key, t] : local.tensors) {
    const size_t i = param_index(key, params.size());
    if (!shards[i]) {
      full.tensors[key] = t.detach().clone();
      continue;
    }
    TRIDENT_CHECK(t.sizes() == params[i].sizes(), "optimizer state '", key, "' has shape ", t.sizes(),
                  ", not its split parameter's ", params[i].sizes(), ": only element-wise optimizers' state can be gathered");
    full.tensors[key] = gather_full(t.detach(), *shards[i], group);
  }
  return full;
}

nn::optim::OptimizerState local_optimizer_state(const nn::optim::OptimizerState& full, nn::Module& model,
                                                const std::vector<Tensor>& params, const comm::Communicator& group) {
  const auto shards = param_shards(model, params);
  const auto shapes = full_shapes(model, params);
  nn::optim::OptimizerState local = full;
  for (const auto& [key, t] : full.tensors) {
    const size_t i = param_index(key, params.size());
    if (!shards[i]) continue;
    TRIDENT_CHECK(t.sizes() == shapes[i], "optimizer state '", key, "' has shape ", t.sizes(),
                  ", not its parameter's full shape ", shapes[i]);
    local.tensors[key] = shard_of(t, *shards[i], group.rank(), group.size());
  }
  return local;
}

}  // namespace trident::parallel::tp
