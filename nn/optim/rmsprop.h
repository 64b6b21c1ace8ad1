// RMSProp (Hinton's lecture 6e; Graves 2013 for the centered form), with PyTorch 1.13's formulas
// (torch.optim.RMSprop, nn/optim/math.h RMSPropUpdate), eps added outside the square root:
//   g = g + weight_decay * p
//   sq = alpha sq + (1 - alpha) g^2
//   centered: ga = alpha ga + (1 - alpha) g,  avg = sqrt(sq - ga^2) + eps;  else avg = sqrt(sq) + eps
//   momentum > 0: buf = momentum buf + g / avg,  p = p - lr buf;  else p = p - lr g / avg
// (TensorFlow 1's RMSProp, which AmoebaNet's paper used, puts eps inside the root, starts sq at 1
// and folds lr into the momentum buffer; with that paper's eps of 1.0 the two differ noticeably:
// translate hyperparameters with care.)
// Buffers: "square_avg", "momentum_buffer" (momentum > 0), "grad_avg" (centered). Errors: lr,
// eps, momentum, weight_decay or alpha < 0. See optimizer.h for groups and the state dict.
#pragma once

#include "nn/optim/optimizer.h"

namespace trident::nn::optim {

struct RMSPropOptions {
  static constexpr std::string_view kName = "RMSProp";
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum = 0;
  bool centered = false;

  template <typename V>
  void visit(V&& v) {
    v("lr", lr);
    v("alpha", alpha);
    v("eps", eps);
    v("weight_decay", weight_decay);
    v("momentum", momentum);
    v("centered", centered);
  }
  void validate() const;
};

class RMSProp final : public OptimizerWith<RMSPropOptions> {
 public:
  explicit RMSProp(std::vector<Tensor> params, RMSPropOptions options = {});
  explicit RMSProp(std::vector<ParamGroup<RMSPropOptions>> groups);

  std::span<const std::string_view> slot_names() const override;

 protected:
  bool slot_used(size_t group, size_t slot) const override;
  void update(size_t group, int64_t index, const Tensor& param, const Tensor& grad, ParamState& state) override;
  void update_group(size_t group, std::span<const ParamUpdate> items) override;
};

}  // namespace trident::nn::optim
