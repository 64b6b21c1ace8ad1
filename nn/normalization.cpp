#include "nn/normalization.h"

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "ops/arith.h"
#include "ops/norm.h"

namespace trident::nn {

LayerNorm::LayerNorm(Shape shape, double e, bool affine, DType dtype)
    : UnaryModule("LayerNorm"), normalized_shape(std::move(shape)), eps(e) {
  if (affine) {
    weight = register_parameter("weight", ones(normalized_shape, dtype));
    bias = register_parameter("bias", zeros(normalized_shape, dtype));
  }
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, normalized_shape, weight, bias, eps); }

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
  if (is_training() && num_batches_tracked.defined()) {
    NoGradGuard no_grad;
    add_(num_batches_tracked, 1.0);
  }
  return batch_norm(x, use_batch_stats && !is_training() ? Tensor() : running_mean,
                    use_batch_stats && !is_training() ? Tensor() : running_var, weight, bias, use_batch_stats, momentum, eps);
}

std::string BatchNorm2d::extra_repr() const {
  return detail::str(num_features, ", eps=", eps, ", momentum=", momentum, ", affine=", weight.defined() ? "true" : "false",
                     ", track_running_stats=", running_mean.defined() ? "true" : "false");
}

}  // namespace trident::nn
