#include "nn/optim/rmsprop.h"

#include "nn/optim/kernels.h"

namespace trident::nn::optim {

namespace {
constexpr std::string_view kSlots[] = {"square_avg", "momentum_buffer", "grad_avg"};
enum Slot : size_t { kSquareAvg = 0, kMomentumBuffer = 1, kGradAvg = 2 };
}  // namespace

void RMSPropOptions::validate() const {
  TRIDENT_CHECK(lr >= 0, "RMSProp: lr must be >= 0, got ", lr);
  TRIDENT_CHECK(eps >= 0, "RMSProp: eps must be >= 0, got ", eps);
  TRIDENT_CHECK(momentum >= 0, "RMSProp: momentum must be >= 0, got ", momentum);
  TRIDENT_CHECK(weight_decay >= 0, "RMSProp: weight_decay must be >= 0, got ", weight_decay);
  TRIDENT_CHECK(alpha >= 0, "RMSProp: alpha must be >= 0, got ", alpha);
}

RMSProp::RMSProp(std::vector<Tensor> params, RMSPropOptions options)
    : RMSProp(std::vector<ParamGroup<RMSPropOptions>>{{std::move(params), options}}) {}

RMSProp::RMSProp(std::vector<ParamGroup<RMSPropOptions>> groups) : OptimizerWith(std::move(groups)) {}

std::span<const std::string_view> RMSProp::slot_names() const { return kSlots; }

bool RMSProp::slot_used(size_t group, size_t slot) const {
  const RMSPropOptions& o = options(group);
  switch (slot) {
    case kSquareAvg: return true;
    case kMomentumBuffer: return o.momentum > 0;
    case kGradAvg: return o.centered;
  }
  return false;
}

void RMSProp::update(size_t group, int64_t, const Tensor& param, const Tensor& grad, ParamState& state) {
  const RMSPropOptions& o = options(group);
  for (size_t k = 0; k < std::size(kSlots); ++k)
    if (slot_used(group, k)) ensure_slot(state, k, param);
  const math::RMSPropUpdate<double> f{o.lr, o.alpha, o.eps, o.weight_decay, o.momentum};
  cpu::rmsprop(param, grad, state.slots[kSquareAvg], o.centered ? state.slots[kGradAvg] : Tensor(),
               o.momentum > 0 ? state.slots[kMomentumBuffer] : Tensor(), f);
}

void RMSProp::update_group(size_t group, std::span<const ParamUpdate> items) {
  [[maybe_unused]] const RMSPropOptions& o = options(group);
  for (const Batch& b : batches(items)) {
    if (b.device.is_cpu()) {
      for (const ParamUpdate* u : b.items) update(group, u->index, u->param, u->grad, *u->state);
      continue;
    }
#if TRIDENT_HAVE_CUDA
    for (const ParamUpdate* u : b.items)
      for (size_t k = 0; k < std::size(kSlots); ++k)
        if (slot_used(group, k)) ensure_slot(*u->state, k, u->param);
    const math::RMSPropUpdate<double> f{o.lr, o.alpha, o.eps, o.weight_decay, o.momentum};
    cuda::rmsprop(b.params(), b.grads(), b.slots(kSquareAvg), o.centered ? b.slots(kGradAvg) : cuda::TensorVec{},
                  o.momentum > 0 ? b.slots(kMomentumBuffer) : cuda::TensorVec{}, f);
#endif
  }
}

}  // namespace trident::nn::optim
