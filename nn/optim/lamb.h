// LAMB: layer-wise adaptive moments (You et al. 2019, "Large Batch Optimization for Deep
// Learning: Training BERT in 76 minutes").
//
// NOTE [LAMB]: the variant is the paper's Algorithm 2 with phi = identity, per parameter tensor
// (each tensor is a "layer"), which is also what NVIDIA's FusedLAMB computes without its
// gradient pre-normalization. With t the parameter's step count:
//   m = beta1 m + (1 - beta1) g,  v = beta2 v + (1 - beta2) g^2
//   r = (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) + weight_decay * p
//   p = p - lr * trust_ratio * r,   trust_ratio = ||p|| / ||r||
// Conventions: trust_ratio = 1 when ||p|| = 0 (a zero-initialised bias or gain: it still moves)
// or ||r|| = 0 (nothing to scale), as in NVIDIA's and Google's implementations; ||p|| is taken
// before the update. Why this variant: Algorithm 2 is the algorithm the paper states and
// analyses, and NVIDIA's BERT-Large recipes use it with bias correction; Google's original TF
// code drops the bias correction, which changes only the first few thousand steps. phi's
// clipping bounds are left out: the identity is the common choice. Not included: NVLAMB's division of all gradients by
// their global norm before the moments (call clip_grad_norm_ first if wanted) and
// gradient averaging. `layer_adaptation = false` sets trust_ratio = 1 (Google's
// exclude_from_layer_adaptation for biases and LayerNorm); exclude those from weight decay
// with a group whose weight_decay is 0, as BERT does.
// Buffers: "exp_avg", "exp_avg_sq". Errors: lr, eps or weight_decay < 0, a beta outside [0, 1).
#pragma once

#include "nn/optim/optimizer.h"

namespace trident::nn::optim {

struct LAMBOptions {
  static constexpr std::string_view kName = "LAMB";
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-6;
  double weight_decay = 1e-2;
  bool layer_adaptation = true;

  template <typename V>
  void visit(V&& v) {
    v("lr", lr);
    v("beta1", beta1);
    v("beta2", beta2);
    v("eps", eps);
    v("weight_decay", weight_decay);
    v("layer_adaptation", layer_adaptation);
  }
  void validate() const;
};

class LAMB final : public OptimizerWith<LAMBOptions> {
 public:
  explicit LAMB(std::vector<Tensor> params, LAMBOptions options = {});
  explicit LAMB(std::vector<ParamGroup<LAMBOptions>> groups);

  std::span<const std::string_view> slot_names() const override;
  // The trust ratio of parameter i's last update (1 before any), for logging and tests. For a
  // CUDA parameter the ratio lives on the device (NOTE [Optimizer kernels]): reading it copies
  // it to the host, which synchronizes.
  double last_trust_ratio(int64_t i) const;

 protected:
  bool slot_used(size_t group, size_t slot) const override;
  void update(size_t group, int64_t index, const Tensor& param, const Tensor& grad, ParamState& state) override;
  void update_group(size_t group, std::span<const ParamUpdate> items) override;

 private:
  // By state-dict index; not state (recomputed every step). A CUDA parameter's ratio is element
  // `pos` of the f64 device tensor `device`, which its batch's launch wrote.
  struct TrustRatio {
    double host = 1.0;
    Tensor device;
    int64_t pos = 0;
  };
  std::vector<TrustRatio> trust_ratio_;
};

}  // namespace trident::nn::optim
