#include "nn/normalization.h"

#include <algorithm>

#include "autograd/checkpoint.h"
#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "core/factory.h"
#include "ops/arith.h"
#include "ops/index.h"
#include "ops/unary.h"
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

namespace {
// NOTE [Deferred batch norm]: the totals' dtype. f64 on the CPU; f32 on a GPU, whose reductions
// accumulate in f32 and have no f64 kernels (the running statistics are f32 there anyway).
DType deferred_dtype(Device d) { return d.is_cpu() ? DType::F64 : DType::F32; }
}  // namespace

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
  if (is_training() && autograd::is_recomputing()) return batch_norm(x, Tensor(), Tensor(), weight, bias, true, momentum, eps);
  if (is_training() && deferred && running_mean.defined()) {
    // The op's own batch statistics, from the pass it makes anyway: "running" statistics of
    // momentum 1 are the batch's mean and unbiased variance (f32; f64 for f64 inputs). Their sum
    // and sum of squares go to the totals: s = m mean, sq = (m - 1) var + m mean^2.
    const TensorOptions so = TensorOptions(x.dtype() == DType::F64 ? DType::F64 : DType::F32).device(x.device());
    Tensor mean = zeros({num_features}, so), var = zeros({num_features}, so);
    Tensor y = batch_norm(x, mean, var, weight, bias, true, 1.0, eps);
    const int64_t m = x.numel() / num_features;
    if (m > 0) {
      NoGradGuard no_grad;
      const DType acc = deferred_dtype(x.device());
      mean = mean.to(acc);
      var = var.to(acc);
      const auto md = static_cast<double>(m);
      const Tensor s = mul(mean, md), sq = add(mul(var, md - 1), mul(mul(mean, mean), md));
      deferred_sum_ = deferred_sum_.defined() ? add(deferred_sum_, s) : s;
      deferred_sq_sum_ = deferred_sq_sum_.defined() ? add(deferred_sq_sum_, sq) : sq;
      deferred_count_ += m;
    }
    return y;
  }
  if (is_training() && num_batches_tracked.defined()) {
    NoGradGuard no_grad;
    count_batch(num_batches_tracked);
  }
  return batch_norm(x, use_batch_stats && !is_training() ? Tensor() : running_mean,
                    use_batch_stats && !is_training() ? Tensor() : running_var, weight, bias, use_batch_stats, momentum, eps);
}

void BatchNorm2d::commit_deferred() { commit_deferred(deferred_sums(), deferred_count_); }

Tensor BatchNorm2d::deferred_sums() const {
  if (deferred_count_ == 0)
    return zeros({2 * num_features}, TensorOptions(deferred_dtype(running_mean.device())).device(running_mean.device()));
  return cat({deferred_sum_, deferred_sq_sum_});
}

void BatchNorm2d::commit_deferred(const Tensor& sums, int64_t count) {
  TRIDENT_CHECK(sums.dim() == 1 && sums.size(0) == 2 * num_features, "BatchNorm2d: deferred totals of shape ", sums.sizes(),
                " for ", num_features, " channels (expected [2C] = [", 2 * num_features, "])");
  deferred_sum_ = deferred_sq_sum_ = Tensor();
  deferred_count_ = 0;
  if (count == 0) return;
  TRIDENT_CHECK(count > 1, "BatchNorm2d: deferred statistics of ", count, " value per channel have no variance");
  NoGradGuard no_grad;
  const auto n = static_cast<double>(count);
  const DType acc = deferred_dtype(running_mean.device());
  const Tensor t = sums.to(acc).to(running_mean.device());  // converted where it is (the host, from commit_deferred_batch_norms)
  const Tensor mu = div(narrow(t, 0, 0, num_features), n);
  // The biased variance from the totals, made unbiased as batch_norm does for running_var.
  const Tensor var = mul(clamp(sub(div(narrow(t, 0, num_features, num_features), n), mul(mu, mu)), 0.0, std::nullopt),
                         n / (n - 1));
  copy_(running_mean, add(mul(running_mean.to(acc), 1 - momentum), mul(mu, momentum)));  // converts to their dtype
  copy_(running_var, add(mul(running_var.to(acc), 1 - momentum), mul(var, momentum)));
  if (num_batches_tracked.defined()) count_batch(num_batches_tracked);
}

std::vector<BatchNorm2d*> defer_batch_norms(Module& module) {
  std::vector<BatchNorm2d*> out;
  module.apply([&out](Module& m) {
    auto* bn = dynamic_cast<BatchNorm2d*>(&m);
    if (bn == nullptr || !bn->running_mean.defined() || std::find(out.begin(), out.end(), bn) != out.end()) return;
    bn->deferred = true;
    out.push_back(bn);
  });
  return out;
}

void commit_deferred_batch_norms(const std::vector<BatchNorm2d*>& bns, const std::function<void(Tensor& totals)>& all_reduce_sum) {
  if (!all_reduce_sum) {
    for (BatchNorm2d* bn : bns) bn->commit_deferred();
    return;
  }
  if (bns.empty()) return;  // the same on every rank: they hold the same modules
  // One host tensor: every module's sums (one copy from the device), then the counts.
  std::vector<Tensor> parts;
  for (const BatchNorm2d* bn : bns) parts.push_back(bn->deferred_sums());
  std::vector<double> counts;
  for (const BatchNorm2d* bn : bns) counts.push_back(static_cast<double>(bn->deferred_count()));
  const Device dev = parts.front().device();
  Tensor packed = cat({cat(parts).to(kCPU).to(DType::F64), from_vector<double>(counts, {static_cast<int64_t>(counts.size())})});
  all_reduce_sum(packed);
  const int64_t n_sums = packed.numel() - static_cast<int64_t>(bns.size());
  const std::vector<double> summed_counts = narrow(packed, 0, n_sums, static_cast<int64_t>(bns.size())).to_vector<double>();
  const Tensor sums = narrow(packed, 0, 0, n_sums).to(deferred_dtype(dev)).to(dev);  // one copy back
  int64_t at = 0;
  for (size_t i = 0; i < bns.size(); ++i) {
    const int64_t len = 2 * bns[i]->num_features;
    bns[i]->commit_deferred(narrow(sums, 0, at, len), static_cast<int64_t>(summed_counts[i]));
    at += len;
  }
}

std::string BatchNorm2d::extra_repr() const {
  return detail::str(num_features, ", eps=", eps, ", momentum=", momentum, ", affine=", weight.defined() ? "true" : "false",
                     ", track_running_stats=", running_mean.defined() ? "true" : "false");
}

}  // namespace trident::nn
