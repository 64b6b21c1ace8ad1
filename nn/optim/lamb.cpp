#include "nn/optim/lamb.h"

#include <cmath>

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
  return static_cast<size_t>(i) < trust_ratio_.size() ? trust_ratio_[static_cast<size_t>(i)] : 1.0;
}

void LAMB::update(size_t group, int64_t index, const Tensor& param, const Tensor& grad, ParamState& state) {
  const LAMBOptions& o = options(group);
  ensure_slot(state, kExpAvg, param);
  ensure_slot(state, kExpAvgSq, param);
  const double t = static_cast<double>(state.step);
  const math::LambUpdate<double> f{o.beta1, o.beta2, o.eps, o.weight_decay, 1.0 - std::pow(o.beta1, t),
                                   1.0 - std::pow(o.beta2, t)};
  const cpu::LambNorms norms = TRIDENT_OPTIM_KERNEL(lamb_moments)(param, grad, state.slots[kExpAvg], state.slots[kExpAvgSq], f);
  const double ratio = o.layer_adaptation ? math::lamb_trust_ratio(norms.param, norms.update) : 1.0;
  if (trust_ratio_.size() < static_cast<size_t>(num_params())) trust_ratio_.resize(static_cast<size_t>(num_params()), 1.0);
  trust_ratio_[static_cast<size_t>(index)] = ratio;
  TRIDENT_OPTIM_KERNEL(lamb_apply)(param, state.slots[kExpAvg], state.slots[kExpAvgSq], f, o.lr * ratio);
}

}  // namespace trident::nn::optim
