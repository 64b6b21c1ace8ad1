#include "ops/pool.h"

#include "ops/common.h"
#include "ops/index.h"
#include "ops/shape.h"
#include "ops/cpu/pool.h"
#include "ops/math/pool.h"
#if TRIDENT_HAVE_CUDA
#include "ops/cuda/pool.h"
#endif

namespace trident {

using namespace ops_detail;

namespace {

Shape pair(Int2 v) { return {v[0], v[1]}; }

void check_pool_input(const char* op, const Tensor& x) {
  check_defined(op, x);
  check_device(op, x);
  check_floating(op, x);
  TRIDENT_CHECK(x.dim() == 3 || x.dim() == 4, op, ": expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got input of shape ",
                x.sizes());
  TRIDENT_CHECK(x.size(-3) > 0 && x.size(-2) > 0 && x.size(-1) > 0, op,
                ": expected non-empty C, H and W dims (only the batch dim may be 0), got input of shape ", x.sizes());
}

// Validates the window parameters against the input (PyTorch's rules) and sizes the output.
cpu::Pool2dGeometry pool_geometry(const char* op, const Tensor& x, Int2 kernel, std::optional<Int2> stride_in, Int2 padding,
                                  Int2 dilation, bool ceil_mode) {
  check_pool_input(op, x);
  const Int2 stride = stride_in.value_or(kernel);
  TRIDENT_CHECK(kernel[0] >= 1 && kernel[1] >= 1, op, ": kernel size must be positive, got kernel ", pair(kernel),
                " (input shape ", x.sizes(), ")");
  TRIDENT_CHECK(stride[0] >= 1 && stride[1] >= 1, op, ": stride must be positive, got stride ", pair(stride),
                " (input shape ", x.sizes(), ", kernel ", pair(kernel), ")");
  TRIDENT_CHECK(dilation[0] >= 1 && dilation[1] >= 1, op, ": dilation must be positive, got dilation ", pair(dilation),
                " (input shape ", x.sizes(), ", kernel ", pair(kernel), ")");
  TRIDENT_CHECK(padding[0] >= 0 && padding[1] >= 0, op, ": padding must be non-negative, got padding ", pair(padding),
                " (input shape ", x.sizes(), ", kernel ", pair(kernel), ")");
  TRIDENT_CHECK(padding[0] <= kernel[0] / 2 && padding[1] <= kernel[1] / 2, op, ": padding ", pair(padding),
                " must be at most half the kernel size ", pair(kernel), " (input shape ", x.sizes(), ")");
  cpu::Pool2dGeometry g;
  g.H = x.size(-2), g.W = x.size(-1);
  g.kH = kernel[0], g.kW = kernel[1], g.sh = stride[0], g.sw = stride[1];
  g.ph = padding[0], g.pw = padding[1], g.dh = dilation[0], g.dw = dilation[1];
  g.OH = math::pool_output_size(g.H, g.kH, g.ph, g.sh, g.dh, ceil_mode);
  g.OW = math::pool_output_size(g.W, g.kW, g.pw, g.sw, g.dw, ceil_mode);
  TRIDENT_CHECK(g.OH >= 1 && g.OW >= 1, op, ": input of shape ", x.sizes(), " is too small for kernel ", pair(kernel),
                " with stride ", pair(stride), ", padding ", pair(padding), " and dilation ", pair(dilation),
                ": the output size would be ", Shape{g.OH, g.OW});
  return g;
}

// NOTE [Higher-order gradients]: a pooling's backward is a linear map, the adjoint of a linear
// map (the average pools themselves; max pooling's gather at the recorded indices). Recorded as
// such, each one's gradient is the other, to any order.
struct LinearPair {
  std::function<Tensor(const Tensor&)> apply, adjoint;
  std::string name, adjoint_name;
};

Tensor apply_linear(const std::shared_ptr<const LinearPair>& m, const Tensor& x, bool adjoint) {
  Tensor out = adjoint ? m->adjoint(x.detach()) : m->apply(x.detach());
  if (autograd::any_requires_grad({x}))
    autograd::record(adjoint ? m->adjoint_name : m->name, {x}, out,
                     [m, adjoint](const TensorList& g) { return TensorList{apply_linear(m, g[0], !adjoint)}; }, kDifferentiable);
  return out;
}

// The create_graph backward of max pooling from its i64 indices: the adjoint of gathering each
// window's maximum (planes [N C, H W], indices into H W), recorded.
Tensor max_pool2d_backward_recorded(const Tensor& g, const Tensor& idx, const Shape& in, const cpu::Pool2dGeometry& geo) {
  const int64_t hw = in[in.size() - 2] * in[in.size() - 1], ohw = geo.OH * geo.OW;
  const int64_t planes = ohw == 0 ? 0 : idx.numel() / ohw;
  auto m = std::make_shared<const LinearPair>(LinearPair{
      [idx, planes, hw, ohw, os = idx.sizes()](const Tensor& a) {
        return reshape(gather(reshape(a, {planes, hw}), 1, reshape(idx, {planes, ohw})), os);
      },
      [idx, in, geo](const Tensor& gy) { return TRIDENT_KERNEL(max_pool2d_backward)(gy, idx, in, geo); },
      "MaxPool2dGatherBackward", "MaxPool2dBackwardBackward"});
  return apply_linear(m, g, /*adjoint=*/true);
}

}  // namespace

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, Int2 kernel, std::optional<Int2> stride, Int2 padding,
                                                  Int2 dilation, bool ceil_mode) {
  const cpu::Pool2dGeometry geo = pool_geometry("max_pool2d", x, kernel, stride, padding, dilation, ceil_mode);
  auto [out, indices] = TRIDENT_KERNEL(max_pool2d_forward)(x.detach(), geo);
  if (autograd::any_requires_grad({x})) {
    autograd::record("MaxPool2dBackward", {x}, out,
                     [geo, in = x.sizes(), si = SavedTensor(indices)](const TensorList& g) {
                       if (recording_backward()) return TensorList{max_pool2d_backward_recorded(g[0], si.unpack(), in, geo)};
                       return TensorList{TRIDENT_KERNEL(max_pool2d_backward)(g[0], si.unpack(), in, geo)};
                     }, kDifferentiable);
  }
  return {out, indices};
}

Tensor max_pool2d(const Tensor& x, Int2 kernel, std::optional<Int2> stride, Int2 padding, Int2 dilation, bool ceil_mode) {
  const cpu::Pool2dGeometry geo = pool_geometry("max_pool2d", x, kernel, stride, padding, dilation, ceil_mode);
  if (!x.device().is_cpu() || !cpu::max_pool2d_taps_apply(geo))
    return max_pool2d_with_indices(x, kernel, stride, padding, dilation, ceil_mode).first;
  // NOTE [Max pooling by taps] (ops/cpu/pool.cpp): no one sees the indices, so the backward keeps
  // byte tap numbers instead.
  auto [out, taps] = [&] {
    profiler::Scope scope("max_pool2d_forward");
    return cpu::max_pool2d_forward_taps(x.detach(), geo);
  }();
  if (autograd::any_requires_grad({x})) {
    autograd::record("MaxPool2dBackward", {x}, out, [geo, in = x.sizes(), st = SavedTensor(taps)](const TensorList& g) {
      if (recording_backward())
        return TensorList{max_pool2d_backward_recorded(g[0], cpu::max_pool2d_taps_to_indices(st.unpack(), geo), in, geo)};
      profiler::Scope scope("max_pool2d_backward");
      return TensorList{cpu::max_pool2d_backward_taps(g[0], st.unpack(), in, geo)};
    }, kDifferentiable);
  }
  return out;
}


Tensor avg_pool2d(const Tensor& x, Int2 kernel, std::optional<Int2> stride, Int2 padding, bool ceil_mode,
                  bool count_include_pad) {
  cpu::Pool2dGeometry geo = pool_geometry("avg_pool2d", x, kernel, stride, padding, {1, 1}, ceil_mode);
  geo.count_include_pad = count_include_pad;
  Tensor out = TRIDENT_KERNEL(avg_pool2d_forward)(x.detach(), geo);
  if (autograd::any_requires_grad({x})) {
    autograd::record("AvgPool2dBackward", {x}, out, [geo, in = x.sizes()](const TensorList& g) {
      if (recording_backward()) {
        auto m = std::make_shared<const LinearPair>(LinearPair{
            [geo](const Tensor& a) { return TRIDENT_KERNEL(avg_pool2d_forward)(a, geo); },
            [geo, in](const Tensor& gy) { return TRIDENT_KERNEL(avg_pool2d_backward)(gy, in, geo); }, "AvgPool2dBackward",
            "AvgPool2dBackwardBackward"});
        return TensorList{apply_linear(m, g[0], /*adjoint=*/true)};
      }
      return TensorList{TRIDENT_KERNEL(avg_pool2d_backward)(g[0], in, geo)};
    }, kDifferentiable);
  }
  return out;
}

Tensor adaptive_avg_pool2d(const Tensor& x, Int2 output_size) {
  check_pool_input("adaptive_avg_pool2d", x);
  TRIDENT_CHECK(output_size[0] >= 0 && output_size[1] >= 0, "adaptive_avg_pool2d: output_size must be non-negative, got ",
                pair(output_size), " (input shape ", x.sizes(), ")");
  Tensor out = TRIDENT_KERNEL(adaptive_avg_pool2d_forward)(x.detach(), output_size[0], output_size[1]);
  if (autograd::any_requires_grad({x})) {
    autograd::record("AdaptiveAvgPool2dBackward", {x}, out, [in = x.sizes(), os = output_size](const TensorList& g) {
      if (recording_backward()) {
        auto m = std::make_shared<const LinearPair>(LinearPair{
            [os](const Tensor& a) { return TRIDENT_KERNEL(adaptive_avg_pool2d_forward)(a, os[0], os[1]); },
            [in](const Tensor& gy) { return TRIDENT_KERNEL(adaptive_avg_pool2d_backward)(gy, in); },
            "AdaptiveAvgPool2dBackward", "AdaptiveAvgPool2dBackwardBackward"});
        return TensorList{apply_linear(m, g[0], /*adjoint=*/true)};
      }
      return TensorList{TRIDENT_KERNEL(adaptive_avg_pool2d_backward)(g[0], in)};
    }, kDifferentiable);
  }
  return out;
}

}  // namespace trident
