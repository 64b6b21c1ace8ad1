// Stochastic gradient descent with momentum, dampening, Nesterov momentum and L2 weight decay,
// in PyTorch's exact update order (torch.optim.SGD, nn/optim/math.h SGDUpdate):
//   d = g + weight_decay * p
//   buf = d (first step of the buffer) or momentum * buf + (1 - dampening) * d
//   d = nesterov ? d + momentum * buf : buf          (when momentum != 0)
//   p = p - lr * d
// Buffer: "momentum_buffer" (when momentum != 0). Errors: lr, momentum or weight_decay < 0;
// nesterov without momentum or with dampening (as PyTorch). See optimizer.h for groups and
// the state dict.
#pragma once

#include "nn/optim/optimizer.h"

namespace trident::nn::optim {

struct SGDOptions {
  static constexpr std::string_view kName = "SGD";
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;

  template <typename V>
  void visit(V&& v) {
    v("lr", lr);
    v("momentum", momentum);
    v("dampening", dampening);
    v("weight_decay", weight_decay);
    v("nesterov", nesterov);
  }
  void validate() const;
};

class SGD final : public OptimizerWith<SGDOptions> {
 public:
  explicit SGD(std::vector<Tensor> params, SGDOptions options = {});
  explicit SGD(std::vector<ParamGroup<SGDOptions>> groups);

  std::span<const std::string_view> slot_names() const override;

 protected:
  bool slot_used(size_t group, size_t slot) const override;
  void update(size_t group, int64_t index, const Tensor& param, const Tensor& grad, ParamState& state) override;
  void update_group(size_t group, std::span<const ParamUpdate> items) override;
};

}  // namespace trident::nn::optim
