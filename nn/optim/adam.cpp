#include "nn/optim/adam.h"

#include <cmath>

#include "nn/optim/kernels.h"

namespace trident::nn::optim {

namespace {

constexpr std::string_view kSlots[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
enum Slot : size_t { kExpAvg = 0, kExpAvgSq = 1, kMaxExpAvgSq = 2 };

template <typename O>
void validate_adam(const O& o) {
  const std::string_view n = O::kName;
  TRIDENT_CHECK(o.lr >= 0, n, ": lr must be >= 0, got ", o.lr);
  TRIDENT_CHECK(o.eps >= 0, n, ": eps must be >= 0, got ", o.eps);
  TRIDENT_CHECK(o.beta1 >= 0 && o.beta1 < 1, n, ": beta1 must be in [0, 1), got ", o.beta1);
  TRIDENT_CHECK(o.beta2 >= 0 && o.beta2 < 1, n, ": beta2 must be in [0, 1), got ", o.beta2);
  TRIDENT_CHECK(o.weight_decay >= 0, n, ": weight_decay must be >= 0, got ", o.weight_decay);
}

// The per-step scalars in double, as PyTorch computes them in Python floats.
template <typename Options, bool kDecoupled>
math::AdamUpdate<double> adam_update(const Options& o, int64_t step) {
  const double t = static_cast<double>(step);
  math::AdamUpdate<double> f;
  f.beta1 = o.beta1;
  f.beta2 = o.beta2;
  f.eps = o.eps;
  f.weight_decay = kDecoupled ? 0.0 : o.weight_decay;
  f.decay = kDecoupled ? 1.0 - o.lr * o.weight_decay : 1.0;
  f.step_size = o.lr / (1.0 - std::pow(o.beta1, t));
  f.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(o.beta2, t));
  return f;
}

}  // namespace

void AdamOptions::validate() const { validate_adam(*this); }
void AdamWOptions::validate() const { validate_adam(*this); }

namespace detail {

template <typename Options, bool kDecoupled>
std::span<const std::string_view> AdamImpl<Options, kDecoupled>::slot_names() const {
  return kSlots;
}

template <typename Options, bool kDecoupled>
bool AdamImpl<Options, kDecoupled>::slot_used(size_t group, size_t slot) const {
  return slot != kMaxExpAvgSq || this->options(group).amsgrad;
}

template <typename Options, bool kDecoupled>
void AdamImpl<Options, kDecoupled>::update(size_t group, int64_t, const Tensor& param, const Tensor& grad, ParamState& state) {
  const Options& o = this->options(group);
  for (size_t k : {kExpAvg, kExpAvgSq}) this->ensure_slot(state, k, param);
  if (o.amsgrad) this->ensure_slot(state, kMaxExpAvgSq, param);
  cpu::adam(param, grad, state.slots[kExpAvg], state.slots[kExpAvgSq], o.amsgrad ? state.slots[kMaxExpAvgSq] : Tensor(),
            adam_update<Options, kDecoupled>(o, state.step));
}

template <typename Options, bool kDecoupled>
void AdamImpl<Options, kDecoupled>::update_group(size_t group, std::span<const Optimizer::ParamUpdate> items) {
  using ParamUpdate = Optimizer::ParamUpdate;
  [[maybe_unused]] const Options& o = this->options(group);
  // The step count enters the functor through the bias corrections.
  for (const auto& b : this->batches(items, [](const ParamUpdate& u) { return u.state->step; })) {
    if (b.device.is_cpu()) {
      for (const ParamUpdate* u : b.items) update(group, u->index, u->param, u->grad, *u->state);
      continue;
    }
#if TRIDENT_HAVE_CUDA
    for (const ParamUpdate* u : b.items) {
      for (size_t k : {kExpAvg, kExpAvgSq}) this->ensure_slot(*u->state, k, u->param);
      if (o.amsgrad) this->ensure_slot(*u->state, kMaxExpAvgSq, u->param);
    }
    cuda::adam(b.params(), b.grads(), b.slots(kExpAvg), b.slots(kExpAvgSq),
               o.amsgrad ? b.slots(kMaxExpAvgSq) : cuda::TensorVec{}, adam_update<Options, kDecoupled>(o, b.key));
#endif
  }
}

template class AdamImpl<AdamOptions, false>;
template class AdamImpl<AdamWOptions, true>;

}  // namespace detail
}  // namespace trident::nn::optim
