#include "parallel/pipeline/checkpoint.h"

#include "autograd/grad_mode.h"
#include "core/factory.h"

namespace trident::parallel::pipeline {
namespace {

std::vector<Tensor> flatten(const ParamGroups& groups) {
  std::vector<Tensor> all;
  for (const auto& g : groups) all.insert(all.end(), g.begin(), g.end());
  return all;
}

// For each of `from`, its index in `in` (by identity), or -1.
std::vector<int64_t> positions(const std::vector<Tensor>& from, const std::vector<Tensor>& in) {
  std::vector<int64_t> out(from.size(), -1);
  for (size_t i = 0; i < from.size(); ++i)
    for (size_t j = 0; j < in.size(); ++j)
      if (from[i].is_same(in[j])) {
        out[i] = static_cast<int64_t>(j);
        break;
      }
  return out;
}

std::string key(int64_t i, std::string_view slot) { return nn::optim::detail::state_key(static_cast<size_t>(i), slot); }

}  // namespace

constexpr int64_t kMaxDims = 16;

Tensor send_to_first(comm::Communicator& pp, const Tensor& t, int owner) {
  const int me = pp.rank();
  if (owner == 0) return me == 0 ? t.detach() : Tensor();
  if (me == owner) {
    TRIDENT_CHECK(t.dim() <= kMaxDims, "pipeline checkpoint: a tensor of ", t.dim(), " dims; at most ", kMaxDims);
    const Tensor host = t.detach().to(Device::cpu()).contiguous();
    std::vector<int64_t> h{static_cast<int64_t>(host.dtype()), host.dim()};
    for (int64_t d : host.sizes()) h.push_back(d);
    h.resize(2 + kMaxDims, 0);
    pp.send(from_vector<int64_t>(h, {2 + kMaxDims}), 0).wait();
    pp.send(host, 0).wait();
    return {};
  }
  if (me != 0) return {};
  Tensor header = zeros({2 + kMaxDims}, DType::I64);
  pp.recv(header, owner).wait();
  const std::vector<int64_t> h = header.to_vector<int64_t>();
  Tensor out = empty(Shape(h.begin() + 2, h.begin() + 2 + h[1]), static_cast<DType>(h[0]));
  pp.recv(out, owner).wait();
  return out;
}


nn::optim::OptimizerState gather_optimizer_state(const Pipeline& pipe, const nn::optim::OptimizerState& stage_state,
                                                 const ParamGroups& stage_groups, const ParamGroups& whole_groups,
                                                 std::span<const std::string_view> slots) {
  TRIDENT_CHECK(stage_groups.size() == whole_groups.size(), "pipeline optimizer state: the stage optimizer has ",
                stage_groups.size(), " parameter groups, the whole model's ", whole_groups.size());
  comm::Communicator& pp = *pipe.pp();
  const std::vector<Tensor> whole = flatten(whole_groups);
  const std::vector<int64_t> mine = positions(whole, flatten(stage_groups));
  const int64_t n = static_cast<int64_t>(whole.size()), k = pp.size();
  // Which stages hold each parameter: row r is stage r's.
  Tensor held = zeros({k, n}, TensorOptions(DType::F64));
  double* h = held.data<double>();
  for (int64_t j = 0; j < n; ++j) h[pp.rank() * n + j] = mine[static_cast<size_t>(j)] >= 0 ? 1.0 : 0.0;
  pp.all_reduce(held, comm::ReduceOp::Sum).wait();
  h = held.data<double>();

  nn::optim::OptimizerState out;
  out.optimizer = stage_state.optimizer;
  out.scalars = nn::optim::detail::shared_scalars(stage_state.scalars, group_sizes(whole_groups));
  const int64_t ns = static_cast<int64_t>(slots.size());
  const int me = pp.rank();
  for (int64_t j = 0; j < n; ++j) {
    int owner = -1;
    for (int64_t r = 0; r < k && owner < 0; ++r)
      if (h[r * n + j] > 0) owner = static_cast<int>(r);
    TRIDENT_CHECK(owner >= 0, "pipeline optimizer state: parameter ", j, " of the whole model (shape ",
                  whole[static_cast<size_t>(j)].sizes(), ") belongs to no stage");
    if (me != owner && me != 0) continue;
    const int64_t li = mine[static_cast<size_t>(j)];
    // [has state, step, slot present...], from the owner to rank 0.
    Tensor header;
    if (me == owner) {
      header = zeros({2 + ns}, TensorOptions(DType::F64));
      double* p = header.data<double>();
      const auto step = stage_state.scalars.find(key(li, "step"));
      p[0] = step != stage_state.scalars.end() ? 1.0 : 0.0;
      p[1] = step != stage_state.scalars.end() ? step->second : 0.0;
      for (int64_t s = 0; s < ns; ++s) p[2 + s] = stage_state.tensors.count(key(li, slots[static_cast<size_t>(s)])) ? 1.0 : 0.0;
    }
    const Tensor got = send_to_first(pp, header, owner);
    const std::vector<double> p = (me == owner ? header : got).to_vector<double>();
    if (me == 0 && p[0] > 0) out.scalars[key(j, "step")] = p[1];
    for (int64_t s = 0; s < ns; ++s) {
      if (p[2 + static_cast<size_t>(s)] == 0) continue;
      const std::string_view slot = slots[static_cast<size_t>(s)];
      const Tensor t = send_to_first(pp, me == owner ? stage_state.tensors.at(key(li, slot)) : Tensor(), owner);
      if (me == 0) out.tensors[key(j, slot)] = t.clone();
    }
  }
  if (me != 0) return {};
  return out;
}

nn::StateDict gather_state_dict(const Pipeline& pipe, const nn::StateDict& stage_state) {
  comm::Communicator& pp = *pipe.pp();
  NoGradGuard no_grad;
  nn::StateDict out;
  for (const auto& [name, owner] : pipe.state_owners()) {
    Tensor t;
    if (pp.rank() == owner) {
      const auto it = stage_state.find(name);
      TRIDENT_CHECK(it != stage_state.end(), "pipeline state dict: stage ", owner, " holds '", name,
                    "' but its stage state has no such entry");
      t = it->second;
    }
    Tensor got = send_to_first(pp, t, static_cast<int>(owner));
    if (pp.rank() == 0) out.emplace(name, std::move(got));
  }
  return out;
}

nn::optim::OptimizerState stage_optimizer_state(const nn::optim::OptimizerState& whole_state,
                                                const ParamGroups& whole_groups, const ParamGroups& stage_groups) {
  const std::vector<Tensor> stage = flatten(stage_groups);
  const std::vector<int64_t> at = positions(stage, flatten(whole_groups));
  nn::optim::OptimizerState out;
  out.optimizer = whole_state.optimizer;
  out.scalars = nn::optim::detail::shared_scalars(whole_state.scalars, group_sizes(stage_groups));
  for (size_t i = 0; i < stage.size(); ++i) {
    const int64_t j = at[i];
    TRIDENT_CHECK(j >= 0, "pipeline optimizer state: stage parameter ", i, " (shape ", stage[i].sizes(),
                  ") is not a parameter of the whole model");
    const std::string from = "state." + std::to_string(j) + ".", to = "state." + std::to_string(i) + ".";
    const auto step = whole_state.scalars.find(from + "step");
    if (step != whole_state.scalars.end()) out.scalars[to + "step"] = step->second;
    for (auto it = whole_state.tensors.lower_bound(from); it != whole_state.tensors.end() && it->first.rfind(from, 0) == 0; ++it)
      out.tensors[to + it->first.substr(from.size())] = it->second;
  }
  return out;
}

}  // namespace trident::parallel::pipeline
