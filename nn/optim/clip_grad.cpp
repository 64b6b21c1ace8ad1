#include "nn/optim/clip_grad.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "core/copy.h"
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
}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  TRIDENT_CHECK(norm_type > 0, "clip_grad_norm_: norm_type must be > 0 or inf, got ", norm_type);
  TRIDENT_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = defined_grads(params, "clip_grad_norm_");
  if (grads.empty()) return 0.0;
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
