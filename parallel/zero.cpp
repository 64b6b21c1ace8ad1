#include "parallel/zero.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "core/factory.h"
#include "ops/arith.h"
#include "ops/shape.h"
#include "ops/index.h"
#include "ops/reduce.h"

namespace trident::parallel {
namespace {

Tensor shard_view(const Tensor& flat, int rank, int64_t shard) {
  return flat.as_strided({shard}, {1}, flat.storage_offset() + rank * shard);
}

using nn::optim::detail::state_key;

std::vector<Tensor> trainable(const nn::Module& model) {
  std::vector<Tensor> out;
  for (const Tensor& p : model.parameters())
    if (p.requires_grad()) out.push_back(p);
  return out;
}

}  // namespace

ZeroOptimizer::ZeroOptimizer(ParamGroups groups, std::shared_ptr<comm::Communicator> dp, OptimizerFactory factory,
                             ZeroOptions options)
    : factory_(std::move(factory)) {
  init(std::move(groups), std::move(dp), options);
}

ZeroOptimizer::ZeroOptimizer(nn::Module& model, std::shared_ptr<comm::Communicator> dp, OptimizerFactory factory,
                             ZeroOptions options)
    : factory_(std::move(factory)) {
  TRIDENT_CHECK(dp != nullptr, "ZeroOptimizer: the dp communicator is null");
  if (options.broadcast_from_rank0) broadcast_tensors(*dp, model.buffers(), options.bucket_bytes);
  init({trainable(model)}, std::move(dp), options);
}

void ZeroOptimizer::init(ParamGroups groups, std::shared_ptr<comm::Communicator> dp, ZeroOptions options) {
  TRIDENT_CHECK(dp != nullptr, "ZeroOptimizer: the dp communicator is null");
  TRIDENT_CHECK(factory_ != nullptr, "ZeroOptimizer: no optimizer factory");
  TRIDENT_CHECK(!groups.empty(), "ZeroOptimizer: no parameter groups");
  for (size_t g = 0; g < groups.size(); ++g) {
    TRIDENT_CHECK(!groups[g].empty(), "ZeroOptimizer: parameter group ", g, " is empty");
    for (size_t j = 0; j < groups[g].size(); ++j) {
      const Tensor& p = groups[g][j];
      TRIDENT_CHECK(p.defined() && (p.dtype() == DType::F32 || p.dtype() == DType::F64), "ZeroOptimizer: parameter ",
                    j, " of group ", g, " must be f32 or f64 (optimizers keep master weights in those), got ",
                    p.defined() ? std::string(dtype_name(p.dtype())) : std::string("undefined"));
    }
  }
  if (options.broadcast_from_rank0) {
    std::vector<Tensor> all;
    for (const auto& g : groups) all.insert(all.end(), g.begin(), g.end());
    broadcast_tensors(*dp, all, options.bucket_bytes);
  }
  const int ranks = dp->size();
  const int rank = dp->rank();
  reducer_ = std::make_unique<GradReducer>(std::move(groups), std::move(dp), GradReducer::Mode::ReduceScatter,
                                           options.bucket_bytes, ranks, options.reduce_last);

  // NOTE [ZeRO-1 layout]: parameters become views of their bucket's flat buffer.
  NoGradGuard no_grad;
  ParamGroups shard_groups(reducer_->groups().size());
  for (const GradReducer::Bucket& b : reducer_->buckets()) {
    Tensor flat = zeros({b.padded}, TensorOptions(b.dtype).device(b.grads.device()));
    for (const GradReducer::Slot& s : b.slots) {
      Tensor view = GradReducer::slot_view(flat, s);
      copy_(view, s.param);
      Tensor(s.param).set_data(view);
    }
    const int64_t shard = b.shard_numel(ranks);
    Tensor leaf = shard_view(flat, rank, shard);
    leaf.set_requires_grad(true);
    param_flats_.push_back(flat);
    shard_params_.push_back(leaf);
    shard_grads_.push_back(shard_view(b.grads, rank, shard));
    shard_groups[b.group].push_back(leaf);
  }
  // NOTE [ZeRO-1 layout]: the gradients accumulate in the buckets.
  use_bucket_grads();
  optimizer_ = factory_(shard_groups);
  TRIDENT_CHECK(optimizer_ != nullptr, "ZeroOptimizer: the factory returned no optimizer");
  TRIDENT_CHECK(optimizer_->name() != "LAMB", "ZeroOptimizer: LAMB's trust ratio is computed per parameter, and a "
                "shard is not a parameter; use an element-wise optimizer (SGD, RMSProp, Adam, AdamW) (NOTE [ZeRO-1 layout])");
  TRIDENT_CHECK(optimizer_->num_groups() == shard_groups.size(), "ZeroOptimizer: the factory built ",
                optimizer_->num_groups(), " groups from ", shard_groups.size());
}

Tensor ZeroOptimizer::for_group(const Tensor& host) const {
  // NOTE [ZeRO-1 on GPUs]: an NCCL group carries device tensors only.
  if (group().backend() != comm::Backend::NCCL) return host;
  return host.to(reducer_->buckets().front().grads.device());
}

void ZeroOptimizer::take_shard_grads() {
  reducer_->finish();
  TRIDENT_CHECK(reducer_->rounds_finished() > rounds_at_last_step_, "ZeroOptimizer::step: no synchronized backward ",
                "since the last step (did every backward run under no_sync?)");
  for (size_t b = 0; b < shard_params_.size(); ++b) shard_params_[b].set_grad(shard_grads_[b]);
}

void ZeroOptimizer::gather_parameters() {
  std::vector<comm::Work> works;
  for (size_t b = 0; b < param_flats_.size(); ++b) works.push_back(group().all_gather(param_flats_[b], shard_params_[b]));
  comm::wait_all(works);
}

void ZeroOptimizer::step() {
  take_shard_grads();
  rounds_at_last_step_ = reducer_->rounds_finished();
  optimizer_->step();
  gather_parameters();
}

bool ZeroOptimizer::unscale_with(nn::GradScaler& scaler, const std::function<bool(bool)>& all_finite) {
  if (all_finite) return scaler.unscale_(*optimizer_, all_finite);
  // NOTE [ZeRO-1 with loss scaling]: by default the dp group agrees (the largest "overflowed" wins).
  return scaler.unscale_(*optimizer_, [&](bool finite) {
    Tensor overflow = for_group(scalar_tensor(finite ? 0.0 : 1.0, DType::F64));
    group().all_reduce(overflow, comm::ReduceOp::Max).wait();
    return overflow.item<double>() == 0.0;
  });
}

bool ZeroOptimizer::unscale_(nn::GradScaler& scaler, const std::function<bool(bool)>& all_finite) {
  take_shard_grads();
  return unscale_with(scaler, all_finite);
}

bool ZeroOptimizer::step(nn::GradScaler& scaler, const std::function<bool(bool)>& all_finite) {
  take_shard_grads();
  if (scaler.is_enabled() && !scaler.unscaled()) unscale_with(scaler, all_finite);
  rounds_at_last_step_ = reducer_->rounds_finished();
  const bool stepped = scaler.step(*optimizer_);
  // A skipped step changed no shard: the parameters are what every rank already holds.
  if (stepped) gather_parameters();
  return stepped;
}

void ZeroOptimizer::zero_grad() {
  reducer_->finish();  // a reduction in flight writes the buffers
  use_bucket_grads();
}

void ZeroOptimizer::use_bucket_grads() {
  NoGradGuard no_grad;
  for (const GradReducer::Bucket& b : reducer_->buckets()) {
    fill_(b.grads, 0.0);
    for (const GradReducer::Slot& s : b.slots) {
      if (!GradReducer::is_slot_view(s.param.grad(), b.grads, s)) Tensor(s.param).set_grad(GradReducer::slot_view(b.grads, s));
    }
  }
}

void ZeroOptimizer::reduce_gradients() {
  if (reducer_->async_in_flight())
    reducer_->finish();
  else
    reducer_->reduce();
}

void ZeroOptimizer::reduce_gradients_async() { reducer_->reduce_async(/*hold_last=*/true); }

double ZeroOptimizer::clip_grad_norm(double max_norm) { return clip_grad_norm(max_norm, NormParts{}); }

double ZeroOptimizer::clip_grad_norm(double max_norm, comm::Communicator& tp, const std::vector<Tensor>& split) {
  NormParts parts;
  parts.tp = &tp;
  parts.split = split;
  return clip_grad_norm(max_norm, parts);
}

double ZeroOptimizer::clip_grad_norm(double max_norm, const NormParts& parts) {
  TRIDENT_CHECK(max_norm >= 0, "ZeroOptimizer::clip_grad_norm: max_norm must be >= 0, got ", max_norm);
  reducer_->finish();
  NoGradGuard no_grad;
  auto listed = [](const std::vector<Tensor>& list, const Tensor& p) {
    return std::any_of(list.begin(), list.end(), [&](const Tensor& t) { return t.is_same(p); });
  };
  // This rank's part of each parameter (the range of it inside this rank's shards), its norm
  // accumulated in f64 and rounded to the dtype as nn::clip_grad_norm_ rounds a parameter's
  // (on the gradients' device, without a copy of the shard), by whether the parameter is split
  // over tp. Shards are disjoint and padding is zero, so the squares' dp sum is the whole.
  std::vector<Tensor> norms[2];  // {whole, split}
  const int ranks = group().size(), rank = group().rank();
  for (size_t b = 0; b < reducer_->buckets().size(); ++b) {
    const GradReducer::Bucket& bucket = reducer_->buckets()[b];
    const int64_t shard = bucket.shard_numel(ranks), lo = rank * shard, hi = lo + shard;
    for (const GradReducer::Slot& s : bucket.slots) {
      const int64_t from = std::max(lo, s.offset), to = std::min(hi, s.offset + s.numel);
      if (from >= to || listed(parts.elsewhere, s.param)) continue;
      norms[listed(parts.split, s.param) ? 1 : 0].push_back(norm(narrow(shard_grads_[b], 0, from - lo, to - from), 2.0).to(DType::F64));
    }
  }
  double sq[2] = {0, 0};
  for (int k = 0; k < 2; ++k)
    if (!norms[k].empty())
      for (double n : stack(norms[k]).to_vector<double>()) sq[k] += n * n;  // one read per kind
  Tensor both = for_group(from_vector<double>({sq[0], sq[1]}, {2}));
  group().all_reduce(both, comm::ReduceOp::Sum).wait();
  const std::vector<double> dp_sums = both.to_vector<double>();
  Tensor split_sq = scalar_tensor(dp_sums[1], DType::F64);
  if (parts.tp != nullptr && parts.tp->size() > 1) parts.tp->all_reduce(split_sq, comm::ReduceOp::Sum).wait();
  Tensor total = scalar_tensor(dp_sums[0] + split_sq.item<double>(), DType::F64);
  if (parts.pp != nullptr && parts.pp->size() > 1) parts.pp->all_reduce(total, comm::ReduceOp::Sum).wait();
  return scale_shard_grads(max_norm, std::sqrt(total.item<double>()));
}

double ZeroOptimizer::scale_shard_grads(double max_norm, double norm) {
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1) {
    for (const Tensor& g : shard_grads_) mul_(g, coef);
  }
  return norm;
}

std::vector<size_t> ZeroOptimizer::shard_indices() const {
  // The shard optimizer numbers its parameters group by group (NOTE [Optimizer state dict]), and
  // each group's shards were added in bucket order.
  const auto& buckets = reducer_->buckets();
  std::vector<size_t> first(param_groups().size() + 1, 0);
  for (const auto& b : buckets) ++first[b.group + 1];
  for (size_t g = 1; g < first.size(); ++g) first[g] += first[g - 1];
  std::vector<size_t> out;
  for (const auto& b : buckets) out.push_back(first[b.group]++);
  return out;
}

nn::optim::OptimizerState ZeroOptimizer::state_dict() { return gather_state(std::nullopt); }

std::optional<nn::optim::OptimizerState> ZeroOptimizer::state_dict_to(int root) {
  TRIDENT_CHECK(root >= 0 && root < group().size(), "ZeroOptimizer::state_dict_to: root ", root, " is not a rank of the ",
                group().size(), "-rank dp group");
  nn::optim::OptimizerState s = gather_state(root);
  if (group().rank() != root) return std::nullopt;
  return s;
}

std::vector<ZeroOptimizer::ParamStateInfo> ZeroOptimizer::param_state_info() {
  const nn::optim::OptimizerState local = optimizer_->state_dict();
  const auto slots = optimizer_->slot_names();
  size_t n = 0;
  for (const auto& g : param_groups()) n += g.size();
  std::vector<ParamStateInfo> out(n, ParamStateInfo{std::nullopt, std::vector<std::optional<DType>>(slots.size())});
  const std::vector<size_t> shard_of = shard_indices();
  const auto& buckets = reducer_->buckets();
  for (size_t b = 0; b < buckets.size(); ++b) {
    const auto step = local.scalars.find(state_key(shard_of[b], "step"));
    if (step == local.scalars.end()) continue;  // never updated (the same on every rank)
    for (const GradReducer::Slot& s : buckets[b].slots) {
      ParamStateInfo& info = out.at(s.index);
      info.step = step->second;
      for (size_t k = 0; k < slots.size(); ++k) {
        const auto it = local.tensors.find(state_key(shard_of[b], slots[k]));
        if (it != local.tensors.end()) info.slots[k] = it->second.dtype();
      }
    }
  }
  return out;
}

Tensor ZeroOptimizer::gather_param_slot_to(size_t i, std::string_view slot, int root) {
  TRIDENT_CHECK(root >= 0 && root < group().size(), "ZeroOptimizer::gather_param_slot_to: root ", root,
                " is not a rank of the ", group().size(), "-rank dp group");
  const auto& buckets = reducer_->buckets();
  const std::vector<size_t> shard_of = shard_indices();
  for (size_t b = 0; b < buckets.size(); ++b)
    for (const GradReducer::Slot& s : buckets[b].slots) {
      if (s.index != i) continue;
      // The shard's buffer itself (not a state dict, which would list every bucket's per call).
      const auto names = optimizer_->slot_names();
      const size_t k = static_cast<size_t>(std::find(names.begin(), names.end(), slot) - names.begin());
      const nn::optim::ParamState& st = optimizer_->state(static_cast<int64_t>(shard_of[b]));
      TRIDENT_CHECK(k < st.slots.size() && st.slots[k].defined(), "ZeroOptimizer::gather_param_slot_to: parameter ", i,
                    " has no ", slot);
      const Tensor& mine = st.slots[k];  // [shard] of the bucket's flat state
      const int ranks = group().size(), me = group().rank();
      const int64_t shard = buckets[b].shard_numel(ranks);
      // Rank r's shard holds [r shard, (r + 1) shard) of the bucket; the parameter [offset, offset + numel).
      auto overlap = [&](int r) {
        const int64_t lo = std::max(s.offset, r * shard), hi = std::min(s.offset + s.numel, (r + 1) * shard);
        return std::pair{lo, std::max(lo, hi)};
      };
      NoGradGuard no_grad;
      if (me != root) {
        const auto [lo, hi] = overlap(me);
        if (hi > lo) group().send(narrow(mine, 0, lo - me * shard, hi - lo), root).wait();
        return {};
      }
      Tensor flat = empty({s.numel}, TensorOptions(mine.dtype()).device(mine.device()));
      std::vector<comm::Work> works;
      for (int r = 0; r < ranks; ++r) {
        const auto [lo, hi] = overlap(r);
        if (hi == lo) continue;
        const Tensor part = narrow(flat, 0, lo - s.offset, hi - lo);
        if (r == me)
          copy_(part, narrow(mine, 0, lo - me * shard, hi - lo));
        else
          works.push_back(group().recv(part, r));
      }
      comm::wait_all(works);
      return reshape(flat.to(Device::cpu()), s.param.sizes());
    }
  TRIDENT_FAIL("ZeroOptimizer::gather_param_slot_to: no parameter ", i, " (the optimizer has ",
               param_state_info().size(), ")");
}

nn::optim::OptimizerState ZeroOptimizer::gather_state(std::optional<int> root) {
  const nn::optim::OptimizerState local = optimizer_->state_dict();
  nn::optim::OptimizerState full;
  full.optimizer = local.optimizer;
  full.scalars = nn::optim::detail::shared_scalars(local.scalars, group_sizes(param_groups()));

  const std::vector<size_t> shard_of = shard_indices();
  NoGradGuard no_grad;
  const auto& buckets = reducer_->buckets();
  for (size_t b = 0; b < buckets.size(); ++b) {
    const size_t j = shard_of[b];
    auto step = local.scalars.find(state_key(j, "step"));
    if (step == local.scalars.end()) continue;  // never updated (the same on every rank)
    for (const GradReducer::Slot& s : buckets[b].slots) full.scalars[state_key(s.index, "step")] = step->second;
    for (std::string_view slot : optimizer_->slot_names()) {
      auto it = local.tensors.find(state_key(j, slot));
      if (it == local.tensors.end()) continue;
      if (root && group().rank() != *root) {  // only the root assembles the state
        group().send(it->second, *root).wait();
        continue;
      }
      Tensor flat = empty({buckets[b].padded}, TensorOptions(it->second.dtype()).device(it->second.device()));
      if (root) {
        const int64_t shard = buckets[b].shard_numel(group().size());
        std::vector<comm::Work> works;
        for (int r = 0; r < group().size(); ++r) {
          const Tensor part = shard_view(flat, r, shard);
          if (r == *root)
            copy_(part, it->second);
          else
            works.push_back(group().recv(part, r));
        }
        comm::wait_all(works);
      } else {
        group().all_gather(flat, it->second).wait();
      }
      // For the writer (a root) on the host, one bucket at a time on the device; for state_dict()
      // where the unsharded optimizer's would be, on the parameters' device.
      for (const GradReducer::Slot& s : buckets[b].slots)
        full.tensors[state_key(s.index, slot)] = root ? GradReducer::slot_view(flat, s).to(Device::cpu()).contiguous()
                                                      : GradReducer::slot_view(flat, s).clone();
    }
  }
  return full;
}

void ZeroOptimizer::check_full_state(const nn::optim::OptimizerState& full) const {
  TRIDENT_CHECK(full.optimizer == optimizer_->name(), "ZeroOptimizer::load_state_dict: the state is ", full.optimizer,
                "'s but this optimizer is ", optimizer_->name());
  // What the unsharded optimizer's load_state_dict checks of the structure (NOTE [Optimizer state
  // dict]): groups, parameters per group, and every per-parameter entry against its parameter.
  const ParamGroups& groups = param_groups();
  auto scalar = [&](const std::string& key) {
    const auto it = full.scalars.find(key);
    TRIDENT_CHECK(it != full.scalars.end(), "ZeroOptimizer::load_state_dict: the state has no \"", key, "\"");
    return it->second;
  };
  TRIDENT_CHECK(scalar("num_groups") == static_cast<double>(groups.size()), "ZeroOptimizer::load_state_dict: the state has ",
                scalar("num_groups"), " parameter groups, this optimizer ", groups.size());
  std::vector<Tensor> params;  // registration order
  for (size_t g = 0; g < groups.size(); ++g) {
    const double n = scalar(nn::optim::detail::group_key(g, "num_params"));
    TRIDENT_CHECK(n == static_cast<double>(groups[g].size()), "ZeroOptimizer::load_state_dict: group ", g,
                  " of the state has ", n, " parameters, this optimizer's ", groups[g].size());
    params.insert(params.end(), groups[g].begin(), groups[g].end());
  }
  // "state.<i>.<rest>": the parameter i must exist.
  auto param_of = [&](const std::string& key, std::string_view& rest) -> const Tensor* {
    if (key.rfind("state.", 0) != 0) return nullptr;
    const size_t dot = key.find('.', 6);
    size_t i = 0;
    const bool ok = dot != std::string::npos && dot > 6 && key.find_first_not_of("0123456789", 6) == dot &&
                    (i = std::stoul(key.substr(6, dot - 6)), i < params.size());
    TRIDENT_CHECK(ok, "ZeroOptimizer::load_state_dict: \"", key, "\" names no parameter of this optimizer's ",
                  params.size());
    rest = std::string_view(key).substr(dot + 1);
    return &params[i];
  };
  const auto slots = optimizer_->slot_names();
  for (const auto& [key, t] : full.tensors) {
    std::string_view slot;
    const Tensor* p = param_of(key, slot);
    TRIDENT_CHECK(p != nullptr && std::find(slots.begin(), slots.end(), slot) != slots.end(),
                  "ZeroOptimizer::load_state_dict: unexpected tensor \"", key, "\" in a ", optimizer_->name(), " state");
    TRIDENT_CHECK(t.sizes() == p->sizes() && t.dtype() == p->dtype(), "ZeroOptimizer::load_state_dict: \"", key,
                  "\" is ", t.dtype(), " ", t.sizes(), ", its parameter ", p->dtype(), " ", p->sizes());
  }
  for (const auto& [key, v] : full.scalars) {
    std::string_view rest;
    if (param_of(key, rest) != nullptr)
      TRIDENT_CHECK(rest == "step", "ZeroOptimizer::load_state_dict: unexpected scalar \"", key, "\"");
  }
}

void ZeroOptimizer::load_state_dict(const nn::optim::OptimizerState& full) {
  check_full_state(full);
  nn::optim::OptimizerState local;
  local.optimizer = full.optimizer;
  const auto& buckets = reducer_->buckets();
  std::vector<size_t> per_group(param_groups().size(), 0);
  for (const auto& b : buckets) ++per_group[b.group];
  local.scalars = nn::optim::detail::shared_scalars(full.scalars, per_group);

  const std::vector<size_t> shard_of = shard_indices();
  const int ranks = group().size();
  const int rank = group().rank();
  NoGradGuard no_grad;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const GradReducer::Bucket& bucket = buckets[b];
    const size_t j = shard_of[b];
    // Every parameter of a bucket shares one shard, hence one step count.
    std::optional<double> step;
    size_t with_state = 0;
    for (const GradReducer::Slot& s : bucket.slots) {
      auto it = full.scalars.find(state_key(s.index, "step"));
      if (it == full.scalars.end()) continue;
      ++with_state;
      TRIDENT_CHECK(!step || *step == it->second, "ZeroOptimizer::load_state_dict: parameters ", bucket.slots.front().index,
                    " and ", s.index, " share a bucket but took ", *step, " and ", it->second,
                    " steps; ZeRO-1 updates a bucket's parameters together");
      step = it->second;
    }
    if (with_state == 0) continue;
    TRIDENT_CHECK(with_state == bucket.slots.size(), "ZeroOptimizer::load_state_dict: only ", with_state, " of the ",
                  bucket.slots.size(), " parameters of bucket ", b, " (parameters ", bucket.slots.back().index, "..",
                  bucket.slots.front().index, ") have optimizer state; ZeRO-1 updates a bucket's parameters together");
    local.scalars[state_key(j, "step")] = *step;
    for (std::string_view slot : optimizer_->slot_names()) {
      size_t present = 0;
      for (const GradReducer::Slot& s : bucket.slots) present += full.tensors.count(state_key(s.index, slot));
      if (present == 0) continue;
      Tensor flat = zeros({bucket.padded}, TensorOptions(bucket.dtype).device(bucket.grads.device()));
      for (const GradReducer::Slot& s : bucket.slots) {
        const std::string key = state_key(s.index, slot);
        auto it = full.tensors.find(key);
        TRIDENT_CHECK(it != full.tensors.end(), "ZeroOptimizer::load_state_dict: \"", key, "\" is missing while other "
                      "parameters of its bucket have their ", slot);
        TRIDENT_CHECK(it->second.sizes() == s.param.sizes(), "ZeroOptimizer::load_state_dict: \"", key, "\" has shape ",
                      it->second.sizes(), " but parameter ", s.index, " has shape ", s.param.sizes());
        copy_(GradReducer::slot_view(flat, s), it->second);
      }
      local.tensors[state_key(j, slot)] = shard_view(flat, rank, bucket.shard_numel(ranks)).clone();
    }
  }
  optimizer_->load_state_dict(local);
}

}  // namespace trident::parallel
