#include "ops/norm.h"

#include <optional>

#include "core/copy.h"
#include "core/factory.h"
#include "ops/arith.h"
#include "ops/autocast.h"
#include "ops/common.h"
#include "ops/reduce.h"
#include "ops/unary.h"
#include "ops/cpu/norm.h"
#include "ops/shape.h"
#if TRIDENT_HAVE_CUDA
#include "ops/cuda/norm.h"
#endif

namespace trident {

using namespace ops_detail;

namespace {

void check_param(const char* op, const char* what, const Tensor& p, const Shape& shape, const Tensor& x,
                 const char* what_shape, std::optional<DType> dtype = std::nullopt) {
  if (!p.defined()) return;
  TRIDENT_CHECK(p.device() == x.device(), op, ": ", what, " is on ", p.device(), " but the input is on ", x.device());
  TRIDENT_CHECK(p.sizes() == shape, op, ": ", what, " of shape ", p.sizes(), " does not match ", what_shape, " ", shape,
                " (input of shape ", x.sizes(), ")");
  TRIDENT_CHECK(p.dtype() == dtype.value_or(x.dtype()), op, ": ", what, " has dtype ", p.dtype(), " but the input has ", x.dtype());
}

// The gradient of a parameter, or undefined when it was not given or needs none.
Tensor param_grad(const Tensor& g, bool need, const Shape& shape, DType dtype) {
  return need ? reshape(g, shape).to(dtype) : Tensor();
}

}  // namespace

namespace {

// The rows and columns layer_norm(x, normalized_shape, weight, bias) normalizes, after checking
// them.
std::pair<int64_t, int64_t> layer_norm_rows_cols(const char* op, const Tensor& x, const Shape& normalized_shape,
                                                 const Tensor& weight, const Tensor& bias) {
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  TRIDENT_CHECK(k >= 1, op, ": normalized_shape must have at least one dim, got ", normalized_shape);
  bool fits = x.dim() >= k;
  for (int64_t d = 1; fits && d <= k; ++d) fits = x.size(-d) == normalized_shape[static_cast<size_t>(k - d)];
  TRIDENT_CHECK(fits, op, ": normalized_shape ", normalized_shape, " does not match the last dims of the input of shape ",
                x.sizes(), " (expected an input of shape [*, ", detail::str(normalized_shape).substr(1), ")");
  check_param(op, "weight", weight, normalized_shape, x, "normalized_shape");
  check_param(op, "bias", bias, normalized_shape, x, "normalized_shape");
  const int64_t cols = shape_numel(normalized_shape);
  const int64_t rows = cols == 0 ? shape_numel(Shape(x.sizes().begin(), x.sizes().end() - k)) : x.numel() / cols;
  return {rows, cols};
}

// The backward of layer norm from its saved row statistics: (dx, dweight, dbias), each undefined
// where not needed.
// NOTE [Higher-order gradients]: layer norm's gradients recomputed with recorded ops from x and
// the weight (their row statistics too), for a create_graph backward.
TensorList layer_norm_grads_recorded(const Tensor& g, const Tensor& x, const Tensor& w, int64_t rows, int64_t cols,
                                     double eps, bool need_dx, bool need_dw, bool need_db, const Shape& ns) {
  const Tensor x2 = reshape(x, {rows, cols}), g2 = reshape(g, {rows, cols});
  const Tensor xm = sub(x2, mean(x2, {1}, /*keepdim=*/true));
  const Tensor rstd = rsqrt(add(mean(mul(xm, xm), {1}, /*keepdim=*/true), eps));
  const Tensor xhat = mul(xm, rstd);
  TensorList r(3);
  if (need_dx) {
    const Tensor gx = w.defined() ? mul(g2, reshape(w, {1, cols})) : g2;
    const Tensor inner = sub(sub(gx, mean(gx, {1}, true)), mul(xhat, mean(mul(gx, xhat), {1}, true)));
    r[0] = reshape(mul(rstd, inner), x.sizes());
  }
  if (need_dw) r[1] = reshape(sum(mul(g2, xhat), {0}), ns);
  if (need_db) r[2] = reshape(sum(g2, {0}), ns);
  return r;
}

// NOTE [Higher-order gradients]: batch norm's gradients with recorded ops, per channel over
// (N, spatial). Training recomputes the batch statistics from x; evaluation's are constants.
TensorList batch_norm_grads_recorded(const Tensor& g, const Tensor& x, const Tensor& w, const Tensor& mean_c,
                                     const Tensor& rstd_c, int64_t n, int64_t channels, int64_t spatial, bool training,
                                     double eps, bool need_dx, bool need_dw, bool need_db) {
  const Tensor x3 = reshape(x, {n, channels, spatial}), g3 = reshape(g, {n, channels, spatial});
  Tensor xm, rstd;
  if (training) {
    xm = sub(x3, mean(x3, {0, 2}, /*keepdim=*/true));
    rstd = rsqrt(add(mean(mul(xm, xm), {0, 2}, true), eps));
  } else {
    xm = sub(x3, reshape(mean_c.to(x.dtype()), {1, channels, 1}));
    rstd = reshape(rstd_c.to(x.dtype()), {1, channels, 1});
  }
  const Tensor xhat = mul(xm, rstd);
  TensorList r(3);
  if (need_dx) {
    const Tensor gx = w.defined() ? mul(g3, reshape(w, {1, channels, 1})) : g3;
    const Tensor dx = training ? mul(rstd, sub(sub(gx, mean(gx, {0, 2}, true)), mul(xhat, mean(mul(gx, xhat), {0, 2}, true))))
                               : mul(gx, rstd);
    r[0] = reshape(dx, x.sizes());
  }
  if (need_dw) r[1] = sum(mul(g3, xhat), {0, 2});
  if (need_db) r[2] = sum(g3, {0, 2});
  return r;
}

autograd::BackwardFn layer_norm_backward_fn(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor mean,
                                            Tensor rstd, int64_t rows, int64_t cols, bool need_dx,
                                            const Shape& normalized_shape, double eps) {
  return [sx = SavedTensor(x), sw = SavedTensor(weight), mean = std::move(mean), rstd = std::move(rstd), rows, cols, need_dx,
          need_dw = weight.defined() && weight.requires_grad(), need_db = bias.defined() && bias.requires_grad(),
          ns = normalized_shape, dt = x.dtype(), eps](const TensorList& g) {
    if (recording_backward())
      return layer_norm_grads_recorded(g.back(), sx.unpack(), sw.unpack(), rows, cols, eps, need_dx, need_dw, need_db, ns);
    cpu::NormGrads r = TRIDENT_KERNEL(layer_norm_backward)(g.back(), sx.unpack(), mean, rstd,
                                                           sw.defined() ? sw.unpack() : Tensor(), rows, cols, need_dx,
                                                           need_dw, need_db);
    return TensorList{need_dx ? r.dx.to(dt) : Tensor(), param_grad(r.dw, need_dw, ns, dt), param_grad(r.db, need_db, ns, dt)};
  };
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias, double eps) {
  if (autocast::is_enabled()) {  // NOTE [Autocast]
    autocast::Suspend off;
    return layer_norm(autocast::widen(x), normalized_shape, autocast::widen(weight), autocast::widen(bias), eps);
  }
  const char* op = "layer_norm";
  check_defined(op, x);
  check_device(op, x);
  check_floating(op, x);
  const auto [rows, cols] = layer_norm_rows_cols(op, x, normalized_shape, weight, bias);
  const Tensor w = weight.defined() ? weight.detach() : Tensor(), b = bias.defined() ? bias.detach() : Tensor();
  cpu::LayerNormForward f = TRIDENT_KERNEL(layer_norm)(x.detach(), rows, cols, w, b, eps);
  Tensor out = f.y.to(x.dtype());
  if (autograd::any_requires_grad({x, weight, bias})) {
    // Saved: x, weight, and the mean and rstd of each row (two numbers per row).
    autograd::record("LayerNormBackward", {x, weight, bias}, out,
                     layer_norm_backward_fn(x, weight, bias, f.mean, f.rstd, rows, cols, x.requires_grad(),
                                            normalized_shape, eps),
                     kDifferentiable);
  }
  return out;
}

AddLayerNorm add_layer_norm(const Tensor& x, const Tensor& residual, const Shape& normalized_shape, const Tensor& weight,
                            const Tensor& bias, double eps) {
  if (autocast::is_enabled()) {  // NOTE [Autocast]: as layer_norm, in f32
    autocast::Suspend off;
    return add_layer_norm(autocast::widen(x), autocast::widen(residual), normalized_shape, autocast::widen(weight),
                          autocast::widen(bias), eps);
  }
  const char* op = "add_layer_norm";
  check_floating_pair(op, x, "input", residual, "residual");
  TRIDENT_CHECK(x.sizes() == residual.sizes(), op, ": the input of shape ", x.sizes(), " and the residual of shape ",
                residual.sizes(), " must have the same shape (no broadcasting)");
  const auto [rows, cols] = layer_norm_rows_cols(op, x, normalized_shape, weight, bias);
  const Tensor w = weight.defined() ? weight.detach() : Tensor(), b = bias.defined() ? bias.detach() : Tensor();
  cpu::AddLayerNormForward f = TRIDENT_KERNEL(add_layer_norm)(x.detach(), residual.detach(), rows, cols, w, b, eps);
  AddLayerNorm out{reshape(f.sum, x.sizes()), f.y.to(x.dtype())};
  if (autograd::any_requires_grad({x, residual, weight, bias})) {
    // d sum = g_sum + layer norm's dx of g_out; x and residual both get d sum. Saved: the sum
    // (layer norm's input), weight, and two numbers per row.
    autograd::BackwardFn ln = layer_norm_backward_fn(out.sum, weight, bias, f.mean, f.rstd, rows, cols, true,
                                                     normalized_shape, eps);
    autograd::record("AddLayerNormBackward", {x, residual, weight, bias}, {out.sum, out.out},
                     [ln = std::move(ln), need_x = x.requires_grad(), need_r = residual.requires_grad()](const TensorList& g) {
                       TensorList r = ln(g);  // uses g.back(), the gradient of the normalized output
                       const Tensor d = add(g[0], r[0]);
                       return TensorList{need_x ? d : Tensor(), need_r ? d : Tensor(), r[1], r[2]};
                     }, kDifferentiable);
  }
  return out;
}

namespace {
// f32_out: x is a bf16 CPU tensor under autocast, read as it is (NOTE [bf16 batch norm]); the
// parameters are f32 and the output is f32, as with x widened first, without the copies.
Tensor batch_norm_impl(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, bool training, double momentum, double eps, bool f32_out) {
  const char* op = "batch_norm";
  check_defined(op, x);
  check_device(op, x);
  check_floating(op, x);
  TRIDENT_CHECK(x.dim() >= 2, op, ": expected an input of at least 2 dims [N, C, *], got shape ", x.sizes());
  const int64_t n = x.size(0), channels = x.size(1);
  const int64_t spatial = channels == 0 || n == 0 ? shape_numel(Shape(x.sizes().begin() + 2, x.sizes().end()))
                                                  : x.numel() / (n * channels);
  const Shape cshape = {channels};
  const DType param_dtype = f32_out ? DType::F32 : x.dtype();
  check_param(op, "weight", weight, cshape, x, "the channels", param_dtype);
  check_param(op, "bias", bias, cshape, x, "the channels", param_dtype);
  TRIDENT_CHECK(running_mean.defined() == running_var.defined(), op,
                ": running_mean and running_var must be given together (got only ",
                running_mean.defined() ? "running_mean" : "running_var", ")");
  const bool has_running = running_mean.defined();
  for (const Tensor* r : {&running_mean, &running_var}) {
    if (!r->defined()) continue;
    const char* name = r == &running_mean ? "running_mean" : "running_var";
    TRIDENT_CHECK(r->device() == x.device(), op, ": ", name, " is on ", r->device(), " but the input is on ", x.device());
    TRIDENT_CHECK(r->sizes() == cshape, op, ": ", name, " of shape ", r->sizes(), " does not match the channels ", cshape,
                  " (input of shape ", x.sizes(), ")");
    TRIDENT_CHECK(r->dtype() == x.dtype() || r->dtype() == DType::F32, op, ": ", name, " has dtype ", r->dtype(),
                  "; expected the input's ", x.dtype(), " or f32");
    TRIDENT_CHECK(!r->requires_grad(), op, ": ", name, " requires grad; running statistics are buffers, not parameters");
  }
  TRIDENT_CHECK(training || has_running, op,
                ": running_mean and running_var are required in eval mode (training = false)");
  const int64_t m = n * spatial;
  TRIDENT_CHECK(!training || m != 1, op, ": expected more than 1 value per channel when training, got input of shape ",
                x.sizes());
  const Tensor w = weight.defined() ? weight.detach() : Tensor(), b = bias.defined() ? bias.detach() : Tensor();
  cpu::BatchNormForward f =
      TRIDENT_KERNEL(batch_norm)(x.detach(), n, channels, spatial, running_mean, running_var, w, b, training, eps);
  if (training && has_running && m > 0) {
    // The running estimates move toward the batch statistics (unbiased variance), in place and
    // outside autograd; copy_ converts to their dtype and bumps their version.
    NoGradGuard no_grad;
    TRIDENT_KERNEL(batch_norm_update_running)(running_mean, running_var, f.mean, f.var, m, momentum);
  }
  Tensor out = f32_out ? f.y : f.y.to(x.dtype());
  if (autograd::any_requires_grad({x, weight, bias})) {
    // Saved: x, weight, and the mean and rstd used per channel (copies: the running statistics
    // may change in place before backward runs).
    autograd::record("BatchNormBackward", {x, weight, bias}, out,
                     [sx = SavedTensor(x), sw = SavedTensor(weight), mean = f.mean, rstd = f.rstd, n, channels, spatial,
                      training, need_dx = x.requires_grad(), need_dw = weight.defined() && weight.requires_grad(),
                      need_db = bias.defined() && bias.requires_grad(), dt = x.dtype(), param_dtype,
                      eps](const TensorList& g) {
                       if (recording_backward()) {  // (the bf16 input of f32_out widened: the composite needs one dtype)
                         TensorList r = batch_norm_grads_recorded(g[0], sx.unpack().to(param_dtype), sw.unpack(), mean, rstd, n,
                                                                  channels, spatial, training, eps, need_dx, need_dw, need_db);
                         if (r[0].defined()) r[0] = r[0].to(dt);
                         return r;
                       }
                       cpu::NormGrads r = TRIDENT_KERNEL(batch_norm_backward)(g[0], sx.unpack(), mean, rstd,
                                                                   sw.defined() ? sw.unpack() : Tensor(), n, channels,
                                                                   spatial, training, need_dx, need_dw, need_db);
                       const Shape cs = {channels};
                       return TensorList{need_dx ? r.dx.to(dt) : Tensor(), param_grad(r.dw, need_dw, cs, param_dtype),
                                         param_grad(r.db, need_db, cs, param_dtype)};
                     }, kDifferentiable);
  }
  return out;
}
}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  if (autocast::is_enabled()) {  // NOTE [Autocast]
    autocast::Suspend off;
    // A bf16 input on the CPU is read as it is (NOTE [bf16 batch norm]): the f32 result of
    // widening it first, without the copy (or the gradient's copy back).
    if (x.defined() && x.dtype() == DType::BF16 && x.device().is_cpu())
      return batch_norm_impl(x, running_mean, running_var, autocast::widen(weight), autocast::widen(bias), training, momentum,
                             eps, true);
    return batch_norm_impl(autocast::widen(x), running_mean, running_var, autocast::widen(weight), autocast::widen(bias),
                           training, momentum, eps, false);
  }
  return batch_norm_impl(x, running_mean, running_var, weight, bias, training, momentum, eps, false);
}

}  // namespace trident
