#include "ops/conv.h"

#include "ops/autocast.h"
#include "ops/common.h"
#include "ops/reduce.h"
#include "ops/cpu/conv.h"
#include "ops/shape.h"
#if TRIDENT_HAVE_CUDA
#include "ops/cuda/conv.h"
#endif

namespace trident {

using namespace ops_detail;

namespace {

Shape pair(Int2 v) { return {v[0], v[1]}; }

// Validates a 4-D input against the weight, bias and parameters; every message names the
// shapes involved and the parameter at fault.
cpu::Conv2dGeometry conv2d_geometry(const Tensor& x, const Tensor& w, const Tensor& b, Int2 stride, Int2 padding,
                                    Int2 dilation, int64_t groups) {
  TRIDENT_CHECK(w.dim() == 4, "conv2d: expected a 4-D weight [out_channels, in_channels / groups, kH, kW], got weight of shape ",
                w.sizes(), " (input shape ", x.sizes(), ")");
  TRIDENT_CHECK(stride[0] >= 1 && stride[1] >= 1, "conv2d: stride must be positive, got stride ", pair(stride),
                " (input shape ", x.sizes(), ", weight shape ", w.sizes(), ")");
  TRIDENT_CHECK(dilation[0] >= 1 && dilation[1] >= 1, "conv2d: dilation must be positive, got dilation ",
                pair(dilation), " (input shape ", x.sizes(), ", weight shape ", w.sizes(), ")");
  TRIDENT_CHECK(padding[0] >= 0 && padding[1] >= 0, "conv2d: padding must be non-negative, got padding ",
                pair(padding), " (input shape ", x.sizes(), ", weight shape ", w.sizes(), ")");
  TRIDENT_CHECK(groups >= 1, "conv2d: groups must be positive, got groups = ", groups, " (input shape ", x.sizes(),
                ", weight shape ", w.sizes(), ")");
  cpu::Conv2dGeometry g;
  g.N = x.size(0), g.C = x.size(1), g.H = x.size(2), g.W = x.size(3);
  g.O = w.size(0), g.kH = w.size(2), g.kW = w.size(3);
  g.sh = stride[0], g.sw = stride[1], g.ph = padding[0], g.pw = padding[1], g.dh = dilation[0], g.dw = dilation[1];
  g.groups = groups;
  TRIDENT_CHECK(g.C % groups == 0, "conv2d: groups = ", groups, " does not divide the input's ", g.C, " channels (input shape ",
                x.sizes(), ", weight shape ", w.sizes(), ")");
  TRIDENT_CHECK(g.O % groups == 0, "conv2d: groups = ", groups, " does not divide the weight's ", g.O,
                " output channels (weight shape ", w.sizes(), ", input shape ", x.sizes(), ")");
  TRIDENT_CHECK(g.C == w.size(1) * groups, "conv2d: input of shape ", x.sizes(), " has ", g.C,
                " channels, but weight of shape ", w.sizes(), " with groups = ", groups, " expects weight.size(1) * groups = ",
                w.size(1) * groups);
  if (b.defined())
    TRIDENT_CHECK(b.dim() == 1 && b.size(0) == g.O, "conv2d: expected bias of shape [", g.O, "] (weight shape ", w.sizes(),
                  "), got bias of shape ", b.sizes());
  TRIDENT_CHECK(g.kH >= 1 && g.kW >= 1, "conv2d: weight of shape ", w.sizes(), " has an empty kernel");
  const int64_t ekh = g.dh * (g.kH - 1) + 1, ekw = g.dw * (g.kW - 1) + 1;
  const int64_t hp = g.H + 2 * g.ph, wp = g.W + 2 * g.pw;
  TRIDENT_CHECK(ekh <= hp && ekw <= wp, "conv2d: kernel size ", Shape{ekh, ekw}, " (weight shape ", w.sizes(), ", dilation ",
                pair(dilation), ") is larger than the padded input size ", Shape{hp, wp},
                " (input shape ", x.sizes(), ", padding ", pair(padding), ")");
  g.OH = (hp - ekh) / g.sh + 1;
  g.OW = (wp - ekw) / g.sw + 1;
  return g;
}

Tensor conv2d_4d(const Tensor& x, const Tensor& w, const Tensor& b, Int2 stride, Int2 padding, Int2 dilation, int64_t groups);

// NOTE [Higher-order gradients]: convolution's two gradients as recorded ops. With y = conv(x, w)
// and Ix(g, w), Iw(g, x) its gradients for the input and the weight, both bilinear:
//   <Ix(g, w), a> = <g, conv(a, w)>,  so Ix's gradients are conv(a, w) for g and Iw(g, a) for w;
//   <Iw(g, x), b> = <g, conv(x, b)>,  so Iw's gradients are conv(x, b) for g and Ix(g, b) for x.
// Each is recorded with the others, so every order is available.
Tensor conv_input_grad(const Tensor& g, const Tensor& w, const cpu::Conv2dGeometry& geo);
Tensor conv_weight_grad(const Tensor& g, const Tensor& x, const cpu::Conv2dGeometry& geo);

Tensor conv_same_geometry(const Tensor& x, const Tensor& w, const cpu::Conv2dGeometry& geo) {
  return conv2d_4d(x, w, Tensor(), {geo.sh, geo.sw}, {geo.ph, geo.pw}, {geo.dh, geo.dw}, geo.groups);
}

Tensor conv_input_grad(const Tensor& g, const Tensor& w, const cpu::Conv2dGeometry& geo) {
  Tensor out = TRIDENT_KERNEL(conv2d_backward_input)(g.detach(), w.detach(), geo);
  if (autograd::any_requires_grad({g, w})) {
    autograd::record("Conv2dInputGradBackward", {g, w}, out,
                     [sg = w.requires_grad() ? SavedTensor(g) : SavedTensor(), sw = g.requires_grad() ? SavedTensor(w) : SavedTensor(),
                      geo](const TensorList& a) {
                       TensorList r(2);
                       if (sw.defined()) r[0] = conv_same_geometry(a[0], sw.unpack(), geo);
                       if (sg.defined()) r[1] = conv_weight_grad(sg.unpack(), a[0], geo);
                       return r;
                     }, kDifferentiable);
  }
  return out;
}

Tensor conv_weight_grad(const Tensor& g, const Tensor& x, const cpu::Conv2dGeometry& geo) {
  Tensor out = TRIDENT_KERNEL(conv2d_backward_weight)(g.detach(), x.detach(), geo);
  if (autograd::any_requires_grad({g, x})) {
    autograd::record("Conv2dWeightGradBackward", {g, x}, out,
                     [sg = x.requires_grad() ? SavedTensor(g) : SavedTensor(), sx = g.requires_grad() ? SavedTensor(x) : SavedTensor(),
                      geo](const TensorList& b) {
                       TensorList r(2);
                       if (sx.defined()) r[0] = conv_same_geometry(sx.unpack(), b[0], geo);
                       if (sg.defined()) r[1] = conv_input_grad(sg.unpack(), b[0], geo);
                       return r;
                     }, kDifferentiable);
  }
  return out;
}

Tensor conv2d_4d(const Tensor& x, const Tensor& w, const Tensor& b, Int2 stride, Int2 padding, Int2 dilation, int64_t groups) {
  const cpu::Conv2dGeometry geo = conv2d_geometry(x, w, b, stride, padding, dilation, groups);
  Tensor out = TRIDENT_KERNEL(conv2d_forward)(x.detach(), w.detach(), b.defined() ? b.detach() : Tensor(), geo);
  if (autograd::any_requires_grad({x, w, b})) {
    const bool need_x = x.requires_grad(), need_w = w.requires_grad(), need_b = b.defined() && b.requires_grad();
    // d input needs the weight, d weight needs the input: save only what is needed.
    autograd::record("Conv2dBackward", {x, w, b}, out,
                     [geo, need_b, sx = need_w ? SavedTensor(x) : SavedTensor(),
                      sw = need_x ? SavedTensor(w) : SavedTensor()](const TensorList& g) {
                       TensorList r(3);
                       if (recording_backward()) {
                         if (sw.defined()) r[0] = conv_input_grad(g[0], sw.unpack(), geo);
                         if (sx.defined()) r[1] = conv_weight_grad(g[0], sx.unpack(), geo);
                         if (need_b) r[2] = sum(g[0], {0, 2, 3});
                         return r;
                       }
                       if (sw.defined()) r[0] = TRIDENT_KERNEL(conv2d_backward_input)(g[0], sw.unpack(), geo);
                       if (sx.defined()) r[1] = TRIDENT_KERNEL(conv2d_backward_weight)(g[0], sx.unpack(), geo);
                       if (need_b) r[2] = TRIDENT_KERNEL(conv2d_backward_bias)(g[0]);
                       return r;
                     }, kDifferentiable);
  }
  return out;
}

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, Int2 stride, Int2 padding, Int2 dilation,
              int64_t groups) {
  if (autocast::is_enabled()) {  // NOTE [Autocast]
    autocast::Suspend off;
    return conv2d(autocast::lower(input), autocast::lower(weight), autocast::lower(bias), stride, padding, dilation, groups);
  }
  check_defined("conv2d", input, "input");
  check_defined("conv2d", weight, "weight");
  check_same_dtype("conv2d", input, weight);
  check_same_device("conv2d", input, weight);
  if (bias.defined()) {
    check_same_dtype("conv2d", input, bias);
    check_same_device("conv2d", input, bias);
  }
  check_device("conv2d", input);
  check_floating("conv2d", input);
  TRIDENT_CHECK(input.dim() == 3 || input.dim() == 4, "conv2d: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got input of shape ",
                input.sizes(), " (weight shape ", weight.sizes(), ")");
  if (input.dim() == 3) return squeeze(conv2d_4d(unsqueeze(input, 0), weight, bias, stride, padding, dilation, groups), 0);
  return conv2d_4d(input, weight, bias, stride, padding, dilation, groups);
}

}  // namespace trident
