#include "nn/optim/sgd.h"

#include "nn/optim/kernels.h"

namespace trident::nn::optim {

namespace {
constexpr std::string_view kSlots[] = {"momentum_buffer"};
}

void SGDOptions::validate() const {
  TRIDENT_CHECK(lr >= 0, "SGD: lr must be >= 0, got ", lr);
  TRIDENT_CHECK(momentum >= 0, "SGD: momentum must be >= 0, got ", momentum);
  TRIDENT_CHECK(weight_decay >= 0, "SGD: weight_decay must be >= 0, got ", weight_decay);
  TRIDENT_CHECK(!nesterov || (momentum > 0 && dampening == 0),
                "SGD: Nesterov momentum needs momentum > 0 and dampening 0, got momentum ", momentum,
                ", dampening ", dampening);
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD(std::vector<ParamGroup<SGDOptions>>{{std::move(params), options}}) {}

SGD::SGD(std::vector<ParamGroup<SGDOptions>> groups) : OptimizerWith(std::move(groups)) {}

std::span<const std::string_view> SGD::slot_names() const { return kSlots; }

bool SGD::slot_used(size_t group, size_t) const { return options(group).momentum != 0; }

void SGD::update(size_t group, int64_t, const Tensor& param, const Tensor& grad, ParamState& state) {
  const SGDOptions& o = options(group);
  math::SGDUpdate<double> f{o.lr, o.weight_decay, o.momentum, o.dampening, o.nesterov, false};
  Tensor buf;
  if (o.momentum != 0) {
    f.first = ensure_slot(state, 0, param);
    buf = state.slots[0];
  }
  cpu::sgd(param, grad, buf, f);
}

void SGD::update_group(size_t group, std::span<const ParamUpdate> items) {
  const SGDOptions& o = options(group);
  // A parameter whose momentum buffer does not exist yet takes d as its buffer (f.first).
  const auto first = [](const ParamUpdate& u) -> int64_t {
    return u.state->slots.empty() || !u.state->slots[0].defined();
  };
  for (const Batch& b : batches(items, o.momentum != 0 ? first : std::function<int64_t(const ParamUpdate&)>())) {
    if (b.device.is_cpu()) {
      for (const ParamUpdate* u : b.items) update(group, u->index, u->param, u->grad, *u->state);
      continue;
    }
#if TRIDENT_HAVE_CUDA
    const math::SGDUpdate<double> f{o.lr, o.weight_decay, o.momentum, o.dampening, o.nesterov, b.key != 0};
    if (o.momentum != 0)
      for (const ParamUpdate* u : b.items) ensure_slot(*u->state, 0, u->param);
    cuda::sgd(b.params(), b.grads(), o.momentum != 0 ? b.slots(0) : cuda::TensorVec{}, f);
#endif
  }
}

}  // namespace trident::nn::optim
