#include "nn/optim/clip_grad.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "core/factory.h"
#include "core/profiler.h"
#include "ops/index.h"
#include "ops/shape.h"
#include "trident_config.h"
#if TRIDENT_HAVE_CUDA
#include "nn/optim/cuda_kernels.h"
#endif
#include "ops/arith.h"
#include "ops/reduce.h"
#include "ops/unary.h"

namespace trident::nn {

namespace {
std::vector<Tensor> defined_grads(const std::vector<Tensor>& params, const char* what) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < params.size(); ++i) {
    TRIDENT_CHECK(params[i].defined(), what, ": parameter ", i, " is undefined");
    const Tensor& g = params[i].grad();
    if (!g.defined()) continue;
    TRIDENT_CHECK(is_floating(g.dtype()), what, ": gradient of parameter ", i, " has dtype ", g.dtype());
    out.push_back(g.detach());
  }
  return out;
}
void scale_by_norm(const std::vector<Tensor>& grads, double max_norm, double total) {
  const double coef = max_norm / (total + 1e-6);
  // PyTorch multiplies by clamp(coef, max=1); multiplying by 1 changes nothing, so skip it.
  // A NaN coefficient (NaN or inf total) still multiplies, as there.
  if (coef < 1.0 || std::isnan(coef))
    for (const Tensor& g : grads) mul_(g, coef);
}

#if TRIDENT_HAVE_CUDA
// The gradients with elements, when the multi-tensor CUDA path takes them (all contiguous f32 or
// f64 on one CUDA device, at least one with elements); else empty.
std::vector<Tensor> multi_tensor_grads(const std::vector<Tensor>& grads) {
  std::vector<Tensor> out;
  for (const Tensor& g : grads) {
    if (!g.device().is_cuda() || !(g.device() == grads[0].device()) || !g.is_contiguous() ||
        (g.dtype() != DType::F32 && g.dtype() != DType::F64))
      return {};
    if (g.numel() > 0) out.push_back(g);
  }
  return out;
}
#endif
}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  TRIDENT_CHECK(norm_type > 0, "clip_grad_norm_: norm_type must be > 0 or inf, got ", norm_type);
  TRIDENT_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = defined_grads(params, "clip_grad_norm_");
  if (grads.empty()) return 0.0;
#if TRIDENT_HAVE_CUDA
  if (norm_type == 2.0) {
    const std::vector<Tensor> mt = multi_tensor_grads(grads);
    if (!mt.empty()) {
      profiler::Scope scope("clip_grad_norm_", mt[0].device().index);
      const Tensor norm_and_coef = optim::cuda::grad_norm_and_clip_coef(mt, max_norm);
      // The caller wants the norm as a double: the one synchronization.
      const double total = norm_and_coef.to(Device::cpu()).to_vector<double>()[0];
      TRIDENT_CHECK(!error_if_nonfinite || std::isfinite(total), "clip_grad_norm_: the total norm of order ", norm_type,
                    " of the gradients is ", total, "; set error_if_nonfinite = false to scale them anyway");
      optim::cuda::scale_by_clip_coef(mt, norm_and_coef);
      for (const Tensor& g : mt) g.bump_version();
      return total;
    }
  }
#endif
  const bool inf = std::isinf(norm_type);
  double total = 0;
  for (const Tensor& g : grads) {
    if (g.numel() == 0) continue;
    // Each gradient's norm accumulates in f64 and is rounded once to its dtype (as PyTorch's);
    // the norms are combined in f64.
    const double n = norm(g, norm_type).item<double>();
    if (inf) {
      total = (n > total || std::isnan(n)) ? n : total;
    } else {
      total += std::pow(n, norm_type);
    }
  }
  if (!inf) total = std::pow(total, 1.0 / norm_type);
  TRIDENT_CHECK(!error_if_nonfinite || std::isfinite(total), "clip_grad_norm_: the total norm of order ", norm_type,
                " of the gradients is ", total, "; set error_if_nonfinite = false to scale them anyway");
  scale_by_norm(grads, max_norm, total);
  return total;
}

Tensor clip_grad_norm_on_device_(const std::vector<Tensor>& params, double max_norm) {
  TRIDENT_CHECK(max_norm >= 0, "clip_grad_norm_on_device_: max_norm must be >= 0, got ", max_norm);
#if TRIDENT_HAVE_CUDA
  {
    NoGradGuard no_grad;
    const std::vector<Tensor> mt = multi_tensor_grads(defined_grads(params, "clip_grad_norm_on_device_"));
    if (!mt.empty()) {
      profiler::Scope scope("clip_grad_norm_", mt[0].device().index);
      const Tensor norm_and_coef = optim::cuda::grad_norm_and_clip_coef(mt, max_norm);
      optim::cuda::scale_by_clip_coef(mt, norm_and_coef);
      for (const Tensor& g : mt) g.bump_version();
      return reshape(narrow(norm_and_coef, 0, 0, 1), {});
    }
  }
#endif
  return full({}, clip_grad_norm_(params, max_norm, 2.0), TensorOptions(DType::F64));
}

void clip_grads_with_norm_(const std::vector<Tensor>& params, double max_norm, double total_norm) {
  TRIDENT_CHECK(max_norm >= 0, "clip_grads_with_norm_: max_norm must be >= 0, got ", max_norm);
  NoGradGuard no_grad;
  scale_by_norm(defined_grads(params, "clip_grads_with_norm_"), max_norm, total_norm);
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  TRIDENT_CHECK(clip_value >= 0, "clip_grad_value_: clip_value must be >= 0, got ", clip_value);
  NoGradGuard no_grad;
  for (const Tensor& g : defined_grads(params, "clip_grad_value_")) copy_(g, clamp(g, -clip_value, clip_value));
}

}  // namespace trident::nn
