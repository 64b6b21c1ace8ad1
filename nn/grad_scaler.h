// Dynamic loss scaling for f16 training (with f32 master weights, NOTE [Autocast]).
//
// f16 gradients underflow below 6e-8; scaling the loss by S (2^16 to start) scales every
// gradient by S and keeps them representable. Each step the gradients are unscaled (divided by
// S) before the optimizer sees them; if any is inf or NaN the step is skipped and S halved;
// after `growth_interval` (2000) clean steps in a row S doubles. The usual loop, as PyTorch's:
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);             // optional: before clipping gradients
//   scaler.step(opt);                 // skipped when a gradient overflowed
//   scaler.update();
// bf16 has f32's exponent range and needs no scaling: construct with enabled = false and every
// call passes through. The scale and the count of clean steps are the state a checkpoint keeps.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <unordered_set>

#include "core/tensor.h"
#include "nn/optim/optimizer.h"

namespace trident::nn {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (differentiable); the loss itself when disabled.
  Tensor scale(const Tensor& loss) const;
  // Divides the optimizer's gradients by the scale, in place, once per step, and records
  // whether any is inf or NaN. Returns true when all are finite. CUDA gradients (contiguous f32
  // or f64) are multiplied and checked by one multi-tensor pass per device and dtype that sets a
  // device flag (nn/optim/cuda_kernels.h); the return value is a host value, so reading the flag
  // synchronizes once per device per step.
  bool unscale_(optim::Optimizer& opt);
  // As unscale_(opt), for an optimizer that holds one part of the model (a pipeline stage, a
  // tensor-parallel shard): `all_finite` is given whether this part's gradients are all finite
  // and returns whether every part's are (an all-reduce over the parts), so that every part skips
  // an overflowing step, and moves its scale, together. Returns all_finite's answer.
  bool unscale_(optim::Optimizer& opt, const std::function<bool(bool)>& all_finite);
  // Unscales if not done yet, then steps the optimizer unless a gradient overflowed. Returns
  // whether it stepped.
  bool step(optim::Optimizer& opt);
  // Backs off after an overflow, grows after growth_interval clean steps; ends the step.
  void update();

  double get_scale() const { return scale_; }
  // Whether unscale_ ran since the last update() (an enabled scaler only).
  bool unscaled() const { return unscaled_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  bool is_enabled() const { return options_.enabled; }
  // Whether the last step() was skipped for an overflow.
  bool last_step_skipped() const { return skipped_; }

  std::map<std::string, double> state_dict() const;
  void load_state_dict(const std::map<std::string, double>& state);

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  bool unscaled_ = false, found_inf_ = false, stepped_ = false, skipped_ = false;
};

}  // namespace trident::nn
