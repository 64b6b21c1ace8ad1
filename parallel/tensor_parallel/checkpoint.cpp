#include "parallel/tensor_parallel/checkpoint.h"

#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "nn/safetensors.h"

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
  const auto shards = sharded_parameters(model);
  nn::StateDict full;
  // std::map order: the same on every rank, so the gathers match.
  for (const auto& [name, t] : model.state_dict()) {
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

}  // namespace trident::parallel::tp
