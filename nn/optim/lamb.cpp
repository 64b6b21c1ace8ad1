#include "nn/optim/lamb.h"

#include <cmath>

#include "core/factory.h"
#include "nn/optim/kernels.h"

namespace trident::nn::optim {

namespace {
constexpr std::string_view kSlots[] = {"exp_avg", "exp_avg_sq"};
enum Slot : size_t { kExpAvg = 0, kExpAvgSq = 1 };
}  // namespace

void LAMBOptions::validate() const {
  TRIDENT_CHECK(lr >= 0, "LAMB: lr must be >= 0, got ", lr);
  TRIDENT_CHECK(eps >= 0, "LAMB: eps must be >= 0, got ", eps);
  TRIDENT_CHECK(beta1 >= 0 && beta1 < 1, "LAMB: beta1 must be in [0, 1), got ", beta1);
  TRIDENT_CHECK(beta2 >= 0 && beta2 < 1, "LAMB: beta2 must be in [0, 1), got ", beta2);
  TRIDENT_CHECK(weight_decay >= 0, "LAMB: weight_decay must be >= 0, got ", weight_decay);
}

LAMB::LAMB(std::vector<Tensor> params, LAMBOptions options)
    : LAMB(std::vector<ParamGroup<LAMBOptions>>{{std::move(params), options}}) {}

LAMB::LAMB(std::vector<ParamGroup<LAMBOptions>> groups) : OptimizerWith(std::move(groups)) {}

std::span<const std::string_view> LAMB::slot_names() const { return kSlots; }

bool LAMB::slot_used(size_t, size_t) const { return true; }

double LAMB::last_trust_ratio(int64_t i) const {
  state(i);  // range check
  if (static_cast<size_t>(i) >= trust_ratio_.size()) return 1.0;
  const TrustRatio& r = trust_ratio_[static_cast<size_t>(i)];
  if (!r.device.defined()) return r.host;
  return r.device.to(Device::cpu()).to_vector<double>().at(static_cast<size_t>(r.pos));
}

namespace {
math::LambUpdate<double> lamb_update(const LAMBOptions& o, int64_t step) {
  const double t = static_cast<double>(step);
  return {o.beta1, o.beta2, o.eps, o.weight_decay, 1.0 - std::pow(o.beta1, t), 1.0 - std::pow(o.beta2, t)};
}
}  // namespace

void LAMB::update(size_t group, int64_t index, const Tensor& param, const Tensor& grad, ParamState& state) {
  const LAMBOptions& o = options(group);
  ensure_slot(state, kExpAvg, param);
  ensure_slot(state, kExpAvgSq, param);
  const math::LambUpdate<double> f = lamb_update(o, state.step);
  const cpu::LambNorms norms = cpu::lamb_moments(param, grad, state.slots[kExpAvg], state.slots[kExpAvgSq], f);
  const double ratio = o.layer_adaptation ? math::lamb_trust_ratio(norms.param, norms.update) : 1.0;
  if (trust_ratio_.size() < static_cast<size_t>(num_params())) trust_ratio_.resize(static_cast<size_t>(num_params()));
  trust_ratio_[static_cast<size_t>(index)] = TrustRatio{ratio, Tensor(), 0};
  cpu::lamb_apply(param, state.slots[kExpAvg], state.slots[kExpAvgSq], f, o.lr * ratio);
}

void LAMB::update_group(size_t group, std::span<const ParamUpdate> items) {
  [[maybe_unused]] const LAMBOptions& o = options(group);
  if (trust_ratio_.size() < static_cast<size_t>(num_params())) trust_ratio_.resize(static_cast<size_t>(num_params()));
  for (const Batch& b : batches(items, [](const ParamUpdate& u) { return u.state->step; })) {
    if (b.device.is_cpu()) {
      for (const ParamUpdate* u : b.items) update(group, u->index, u->param, u->grad, *u->state);
      continue;
    }
#if TRIDENT_HAVE_CUDA
    Batch live = b;  // the parameters with elements: an empty one's ratio is 1, as on the CPU
    live.items.clear();
    for (const ParamUpdate* u : b.items) {
      ensure_slot(*u->state, kExpAvg, u->param);
      ensure_slot(*u->state, kExpAvgSq, u->param);
      trust_ratio_[static_cast<size_t>(u->index)] = TrustRatio{};
      if (u->param.numel() > 0) live.items.push_back(u);
    }
    if (live.items.empty()) continue;
    const int64_t n = static_cast<int64_t>(live.items.size());
    const Tensor ratios =
        o.layer_adaptation ? empty({n}, TensorOptions(DType::F64).device(b.device)) : Tensor();
    cuda::lamb(live.params(), live.grads(), live.slots(kExpAvg), live.slots(kExpAvgSq), lamb_update(o, b.key), o.lr,
               o.layer_adaptation, ratios);
    if (o.layer_adaptation)
      for (int64_t k = 0; k < n; ++k)
        trust_ratio_[static_cast<size_t>(live.items[static_cast<size_t>(k)]->index)] = TrustRatio{1.0, ratios, k};
#endif
  }
}

}  // namespace trident::nn::optim
