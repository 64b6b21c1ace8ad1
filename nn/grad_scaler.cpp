#include "nn/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/grad_mode.h"
#include "ops/arith.h"
#include "core/factory.h"
#include "core/profiler.h"
#include "ops/reduce.h"
#include "trident_config.h"
#if TRIDENT_HAVE_CUDA
#include "nn/optim/cuda_kernels.h"
#endif

namespace trident::nn {

GradScaler::GradScaler(GradScalerOptions o) : options_(o), scale_(o.init_scale) {
  TRIDENT_CHECK(o.init_scale > 0 && std::isfinite(o.init_scale), "GradScaler: init_scale must be positive and finite, got ",
                o.init_scale);
  TRIDENT_CHECK(o.growth_factor > 1, "GradScaler: growth_factor must be > 1, got ", o.growth_factor);
  TRIDENT_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1, "GradScaler: backoff_factor must be in (0, 1), got ",
                o.backoff_factor);
  TRIDENT_CHECK(o.growth_interval > 0, "GradScaler: growth_interval must be positive, got ", o.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const { return options_.enabled ? mul(loss, scale_) : loss; }

bool GradScaler::unscale_(optim::Optimizer& opt) {
  if (!options_.enabled) return true;
  TRIDENT_CHECK(!unscaled_, "GradScaler::unscale_ was already called since the last update()");
  NoGradGuard no_grad;
  const double inv = 1.0 / scale_;
  bool finite = true;
#if TRIDENT_HAVE_CUDA
  // CUDA gradients: one multi-tensor pass per device and dtype multiplies and checks them all
  // and raises a per-device flag (NOTE [Multi-tensor launches]).
  struct DeviceGrads {
    Device device;
    Tensor found_inf;
    std::vector<Tensor> by_dtype[2];  // f32, f64
  };
  std::vector<DeviceGrads> cuda_grads;
#endif
  for (const Tensor& p : opt.parameters()) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
#if TRIDENT_HAVE_CUDA
    if (g.device().is_cuda() && g.is_contiguous() && (g.dtype() == DType::F32 || g.dtype() == DType::F64)) {
      if (g.numel() == 0) continue;
      auto it = std::find_if(cuda_grads.begin(), cuda_grads.end(), [&](const DeviceGrads& d) { return d.device == g.device(); });
      if (it == cuda_grads.end()) {
        it = cuda_grads.insert(cuda_grads.end(), DeviceGrads{g.device(), zeros({}, TensorOptions(DType::F32).device(g.device())), {}});
      }
      it->by_dtype[g.dtype() == DType::F64].push_back(g);
      g.bump_version();  // as mul_ would
      continue;
    }
#endif
    mul_(g, inv);
    // A sum accumulated in f64 cannot overflow on finite f32 values, and any inf or NaN
    // reaches it: one pass tells whether the whole gradient is finite.
    if (finite && !std::isfinite(sum(g).item<double>())) finite = false;
  }
#if TRIDENT_HAVE_CUDA
  for (const DeviceGrads& d : cuda_grads) {
    profiler::Scope scope("GradScaler.unscale_", d.device.index);
    for (const std::vector<Tensor>& list : d.by_dtype)
      if (!list.empty()) optim::cuda::unscale(list, inv, d.found_inf);
  }
  // Whether to skip the step is a host decision (the contract returns it): one copy back, which
  // synchronizes, per device.
  for (const DeviceGrads& d : cuda_grads)
    if (d.found_inf.item<float>() != 0.0f) finite = false;
#endif
  unscaled_ = true;
  found_inf_ = !finite;
  return finite;
}

bool GradScaler::unscale_(optim::Optimizer& opt, const std::function<bool(bool)>& all_finite) {
  if (!options_.enabled) return true;
  const bool finite = all_finite(unscale_(opt));
  found_inf_ = !finite;
  return finite;
}

bool GradScaler::step(optim::Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  TRIDENT_CHECK(!stepped_, "GradScaler::step was already called since the last update()");
  if (!unscaled_) unscale_(opt);
  stepped_ = true;
  skipped_ = found_inf_;
  if (!found_inf_) opt.step();
  return !found_inf_;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  if (found_inf_) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  unscaled_ = stepped_ = found_inf_ = false;
}

std::map<std::string, double> GradScaler::state_dict() const {
  return {{"scale", scale_}, {"growth_tracker", static_cast<double>(growth_tracker_)}};
}

void GradScaler::load_state_dict(const std::map<std::string, double>& s) {
  auto get = [&](const char* k) {
    auto it = s.find(k);
    TRIDENT_CHECK(it != s.end(), "GradScaler::load_state_dict: missing '", k, "'");
    return it->second;
  };
  const double sc = get("scale"), gt = get("growth_tracker");
  TRIDENT_CHECK(sc > 0 && std::isfinite(sc), "GradScaler::load_state_dict: bad scale ", sc);
  TRIDENT_CHECK(gt >= 0 && gt == std::floor(gt), "GradScaler::load_state_dict: bad growth_tracker ", gt);
  scale_ = sc;
  growth_tracker_ = static_cast<int64_t>(gt);
}

}  // namespace trident::nn
