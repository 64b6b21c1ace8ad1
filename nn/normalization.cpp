#include "nn/normalization.h"

#include <algorithm>

#include "autograd/checkpoint.h"
#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "core/factory.h"
#include "ops/arith.h"
#include "ops/norm.h"
#include "ops/reduce.h"

namespace trident::nn {

namespace {
// num_batches_tracked += 1. The counter is an i64 buffer, and the CUDA arithmetic ops take
// floating tensors only (add_(counter, 1.0) fails on a GPU), so the one is added by add_into_
// (core/copy.h), which adds integers on either device, without a synchronization.
void count_batch(const Tensor& counter) {
  add_into_(counter, ones({}, TensorOptions(counter.dtype()).device(counter.device())));
}
}  // namespace

LayerNorm::LayerNorm(Shape shape, double e, bool affine, DType dtype)
    : UnaryModule("LayerNorm"), normalized_shape(std::move(shape)), eps(e) {
  if (affine) {
    weight = register_parameter("weight", ones(normalized_shape, dtype));
    bias = register_parameter("bias", zeros(normalized_shape, dtype));
  }
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, normalized_shape, weight, bias, eps); }

AddLayerNorm LayerNorm::forward_add(const Tensor& x, const Tensor& residual) {
  return add_layer_norm(x, residual, normalized_shape, weight, bias, eps);
}

std::string LayerNorm::extra_repr() const {
  return detail::str(normalized_shape, ", eps=", eps, ", elementwise_affine=", weight.defined() ? "true" : "false");
}

BatchNorm2d::BatchNorm2d(int64_t n, double e, double m, bool affine, bool track, DType dtype)
    : UnaryModule("BatchNorm2d"), num_features(n), eps(e), momentum(m) {
  TRIDENT_CHECK(n > 0, "BatchNorm2d: num_features must be positive, got ", n);
  if (affine) {
    weight = register_parameter("weight", ones({n}, dtype));
    bias = register_parameter("bias", zeros({n}, dtype));
  }
  if (track) {
    running_mean = register_buffer("running_mean", zeros({n}, dtype));
    running_var = register_buffer("running_var", ones({n}, dtype));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::I64));
  }
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  TRIDENT_CHECK(x.dim() == 4, "BatchNorm2d: expected a 4-D input [N, C, H, W], got shape ", x.sizes());
  TRIDENT_CHECK(x.size(1) == num_features, "BatchNorm2d: input has ", x.size(1), " channels (shape ", x.sizes(),
                ") but the layer was built for ", num_features);
  // Without running statistics, batch statistics are used in evaluation too (PyTorch's rule).
  const bool use_batch_stats = is_training() || !running_mean.defined();
  // NOTE [Deferred batch norm]: a re-run under re-materialization, or a deferred forward,
  // normalizes by the batch statistics without touching the running ones.
  if (is_training() && (autograd::is_recomputing() || (deferred && running_mean.defined()))) {
    if (!autograd::is_recomputing()) {
      NoGradGuard no_grad;
      const Tensor xd = x.detach().to(DType::F64);
      const Tensor s = sum(xd, {0, 2, 3}), sq = sum(mul(xd, xd), {0, 2, 3});
      deferred_sum_ = deferred_sum_.defined() ? add(deferred_sum_, s) : s;
      deferred_sq_sum_ = deferred_sq_sum_.defined() ? add(deferred_sq_sum_, sq) : sq;
      deferred_count_ += x.numel() / num_features;
    }
    return batch_norm(x, Tensor(), Tensor(), weight, bias, true, momentum, eps);
  }
  if (is_training() && num_batches_tracked.defined()) {
    NoGradGuard no_grad;
    count_batch(num_batches_tracked);
  }
  return batch_norm(x, use_batch_stats && !is_training() ? Tensor() : running_mean,
                    use_batch_stats && !is_training() ? Tensor() : running_var, weight, bias, use_batch_stats, momentum, eps);
}

void BatchNorm2d::commit_deferred() {
  if (deferred_count_ == 0) return;
  TRIDENT_CHECK(deferred_count_ > 1, "BatchNorm2d: deferred statistics of ", deferred_count_,
                " value per channel have no variance");
  NoGradGuard no_grad;
  const auto n = static_cast<double>(deferred_count_);
  const std::vector<double> s = deferred_sum_.to_vector<double>(), sq = deferred_sq_sum_.to_vector<double>();
  std::vector<double> rm = running_mean.to_vector<double>(), rv = running_var.to_vector<double>();
  for (size_t c = 0; c < rm.size(); ++c) {
    const double mu = s[c] / n;
    // The biased variance from the totals, made unbiased as batch_norm does for running_var.
    const double var = std::max(sq[c] / n - mu * mu, 0.0) * n / (n - 1);
    rm[c] = (1 - momentum) * rm[c] + momentum * mu;
    rv[c] = (1 - momentum) * rv[c] + momentum * var;
  }
  const Shape cshape{num_features};
  copy_(running_mean, from_vector<double>(rm, cshape));  // converts to their dtype
  copy_(running_var, from_vector<double>(rv, cshape));
  if (num_batches_tracked.defined()) count_batch(num_batches_tracked);
  deferred_sum_ = deferred_sq_sum_ = Tensor();
  deferred_count_ = 0;
}

std::string BatchNorm2d::extra_repr() const {
  return detail::str(num_features, ", eps=", eps, ", momentum=", momentum, ", affine=", weight.defined() ? "true" : "false",
                     ", track_running_stats=", running_mean.defined() ? "true" : "false");
}

}  // namespace trident::nn
