// Adam (Kingma and Ba 2015) and AdamW (Loshchilov and Hutter 2019), with PyTorch 1.13's formulas
// (torch.optim.Adam / AdamW, nn/optim/math.h AdamUpdate). With t the parameter's step count:
//   Adam:  g = g + weight_decay * p            (L2 decay coupled into the gradient)
//   AdamW: p = p * (1 - lr * weight_decay)     (decoupled decay, before the update)
//   m = beta1 m + (1 - beta1) g,  v = beta2 v + (1 - beta2) g^2
//   amsgrad: v_max = max(v_max, v), used in place of v below
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// Buffers: "exp_avg", "exp_avg_sq", and "max_exp_avg_sq" with amsgrad. The options differ only
// in the default weight decay (0 for Adam, 0.01 for AdamW, as PyTorch). Errors: lr, eps or
// weight_decay < 0, a beta outside [0, 1). See optimizer.h for groups and the state dict.
#pragma once

#include "nn/optim/optimizer.h"

namespace trident::nn::optim {

struct AdamOptions {
  static constexpr std::string_view kName = "Adam";
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool amsgrad = false;

  template <typename V>
  void visit(V&& v) {
    v("lr", lr);
    v("beta1", beta1);
    v("beta2", beta2);
    v("eps", eps);
    v("weight_decay", weight_decay);
    v("amsgrad", amsgrad);
  }
  void validate() const;
};

struct AdamWOptions {
  static constexpr std::string_view kName = "AdamW";
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;

  template <typename V>
  void visit(V&& v) {
    v("lr", lr);
    v("beta1", beta1);
    v("beta2", beta2);
    v("eps", eps);
    v("weight_decay", weight_decay);
    v("amsgrad", amsgrad);
  }
  void validate() const;
};

namespace detail {
// The update both share; kDecoupled selects AdamW's decay.
template <typename Options, bool kDecoupled>
class AdamImpl : public OptimizerWith<Options> {
 public:
  std::span<const std::string_view> slot_names() const override;

 protected:
  explicit AdamImpl(std::vector<ParamGroup<Options>> groups) : OptimizerWith<Options>(std::move(groups)) {}
  bool slot_used(size_t group, size_t slot) const override;
  void update(size_t group, int64_t index, const Tensor& param, const Tensor& grad, ParamState& state) override;
  void update_group(size_t group, std::span<const Optimizer::ParamUpdate> items) override;
};
}  // namespace detail

class Adam final : public detail::AdamImpl<AdamOptions, false> {
 public:
  explicit Adam(std::vector<Tensor> params, AdamOptions options = {})
      : Adam(std::vector<ParamGroup<AdamOptions>>{{std::move(params), options}}) {}
  explicit Adam(std::vector<ParamGroup<AdamOptions>> groups) : AdamImpl(std::move(groups)) {}
};

class AdamW final : public detail::AdamImpl<AdamWOptions, true> {
 public:
  explicit AdamW(std::vector<Tensor> params, AdamWOptions options = {})
      : AdamW(std::vector<ParamGroup<AdamWOptions>>{{std::move(params), options}}) {}
  explicit AdamW(std::vector<ParamGroup<AdamWOptions>> groups) : AdamImpl(std::move(groups)) {}
};

}  // namespace trident::nn::optim
