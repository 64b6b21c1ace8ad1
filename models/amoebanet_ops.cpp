#include "models/amoebanet_ops.h"

#include "nn/basic.h"
#include "ops/arith.h"
#include "ops/autocast.h"
#include "ops/index.h"
#include "ops/pool.h"
#include "ops/unary.h"

namespace trident::models::amoebanet {

namespace {

// NOTE [AmoebaNet dry build]: a counting-built module has no layers and must not run.
void check_built(const void* layer, const char* module) {
  TRIDENT_CHECK(layer != nullptr, "AmoebaNet: this ", module,
                " was built by a counting LayerBuilder (parameter and memory estimates only) and cannot run");
}

}  // namespace

// ---- ConvBn ----

ConvBn::ConvBn(LayerBuilder& b, Chw in, int64_t out_channels, Int2 kernel, Int2 stride, Int2 padding, bool relu)
    : UnaryModule("ConvBn"), pre_relu(relu) {
  conv = b.conv(*this, "conv", in, out_channels, kernel, stride, padding);
  bn = b.batch_norm(*this, "bn", out_channels);
  out = {out_channels, (in.h + 2 * padding[0] - kernel[0]) / stride[0] + 1,
         (in.w + 2 * padding[1] - kernel[1]) / stride[1] + 1};
  TRIDENT_CHECK(out.h >= 1 && out.w >= 1, "AmoebaNet: a ", kernel[0], "x", kernel[1], " convolution of stride ", stride[0],
                " does not fit a ", in.h, "x", in.w, " feature map; the input image is too small");
  // NOTE [AmoebaNet activation memory]: the conv keeps its input (the relu's output, or the
  // tensor given), batch norm keeps the conv's output.
  b.keep(in.numel());
  b.keep(out.numel());
}

Tensor ConvBn::forward(const Tensor& x) {
  check_built(conv.get(), "ConvBn");
  return bn->forward(conv->forward(pre_relu ? autocast::lower_relu(x) : x));
}

std::string ConvBn::extra_repr() const { return pre_relu ? "relu" : ""; }

// ---- FactorizedReduction ----

FactorizedReduction::FactorizedReduction(LayerBuilder& b, Chw in, int64_t out_channels, bool relu)
    : UnaryModule("FactorizedReduction"), pre_relu(relu) {
  TRIDENT_CHECK(out_channels % 2 == 0, "AmoebaNet: a factorized reduction needs an even number of filters, got ",
                out_channels, " (choose filters D divisible by 8)");
  path1_conv = b.conv(*this, "path1_conv", in, out_channels / 2, {1, 1}, {2, 2});
  // NOTE [Factorized reduction's second path]: path 2's stride-2 samples of the shifted map are
  // taken before its conv (a view of every second pixel, copied at a quarter of the map), so the
  // conv itself has stride 1; the same products as a 1x1 stride-2 conv of a shifted full-size
  // copy, which cost AmoebaNet-D(6, 32)'s f32 step two full-map copies per reduction.
  const Chw sampled{in.c, ceil_div(in.h, 2), ceil_div(in.w, 2)};
  path2_conv = b.conv(*this, "path2_conv", sampled, out_channels / 2, {1, 1}, {1, 1});
  bn = b.batch_norm(*this, "bn", out_channels);
  out = {out_channels, sampled.h, sampled.w};
  // Kept: path 1's conv input (the relu output or x), path 2's samples, batch norm's input.
  b.keep(in.numel() + sampled.numel());
  b.keep(out.numel());
}

Tensor FactorizedReduction::forward(const Tensor& x) {
  check_built(path1_conv.get(), "FactorizedReduction");
  // Lowered once for both convolutions under autocast (each would cast its own input).
  Tensor h = pre_relu ? autocast::lower_relu(x) : (autocast::is_enabled() ? autocast::lower(x) : x);
  // Path 2 sees x shifted up and left by one pixel, zero-filled at the bottom and right, so
  // the stride-2 samples of the two paths interleave: h's odd rows and columns, and a zero row
  // (column) after them where the height (width) is odd (NOTE [Factorized reduction's second path]).
  Tensor sampled = slice(slice(h, -2, 1, std::nullopt, 2), -1, 1, std::nullopt, 2);
  const int64_t bottom = h.size(-2) % 2, right = h.size(-1) % 2;
  if (bottom != 0 || right != 0) sampled = pad(sampled, {0, right, 0, bottom});
  return bn->forward(cat({path1_conv->forward(h), path2_conv->forward(sampled)}, 1));
}

// ---- BottleneckConv ----

BottleneckConv::BottleneckConv(LayerBuilder& b, Chw in, int64_t filters, const CellOpSpec& op, int64_t stride)
    : UnaryModule("BottleneckConv") {
  TRIDENT_ASSERT(op.kind == CellOpSpec::Kind::Bottleneck, "BottleneckConv built for ", op.name);
  const int64_t reduced = filters / 4;  // the reference's int(filter_size / 4)
  const int64_t width = reduced >= 1 ? reduced : filters;
  Chw h = in;
  if (reduced >= 1) {
    pre = register_module("pre", std::make_shared<ConvBn>(b, h, width, Int2{1, 1}, Int2{1, 1}, Int2{0, 0}, true));
    h = pre->out;
  }
  const int64_t k = op.kernel, p = k / 2;
  if (op.factorized) {
    conv_a = register_module("conv_1x" + std::to_string(k),
                             std::make_shared<ConvBn>(b, h, width, Int2{1, k}, Int2{1, stride}, Int2{0, p}, true));
    conv_b = register_module("conv_" + std::to_string(k) + "x1",
                             std::make_shared<ConvBn>(b, conv_a->out, width, Int2{k, 1}, Int2{stride, 1}, Int2{p, 0}, true));
    h = conv_b->out;
  } else {
    conv_a = register_module("conv_" + std::to_string(k) + "x" + std::to_string(k),
                             std::make_shared<ConvBn>(b, h, width, Int2{k, k}, Int2{stride, stride}, Int2{p, p}, true));
    h = conv_a->out;
  }
  if (reduced >= 1) {
    post = register_module("post", std::make_shared<ConvBn>(b, h, filters, Int2{1, 1}, Int2{1, 1}, Int2{0, 0}, true));
    h = post->out;
  }
  out = h;
}

Tensor BottleneckConv::forward(const Tensor& x) {
  Tensor h = pre ? pre->forward(x) : x;
  h = conv_a->forward(h);
  if (conv_b) h = conv_b->forward(h);
  return post ? post->forward(h) : h;
}

// ---- SeparableConv ----

SeparableConv::SeparableConv(LayerBuilder& b, Chw in, int64_t filters, int64_t kernel, int64_t repeats, int64_t stride)
    : UnaryModule("SeparableConv") {
  Chw h = in;
  for (int64_t i = 0; i < repeats; ++i) {
    const int64_t s = i == 0 ? stride : 1;
    auto block = register_module("separable_" + std::to_string(i + 1), std::make_shared<Block>());
    const Chw mid{h.c, (h.h - 1) / s + 1, (h.w - 1) / s + 1};
    block->depthwise = b.conv(*block, "depthwise", h, h.c, {kernel, kernel}, {s, s}, {kernel / 2, kernel / 2}, h.c);
    block->pointwise = b.conv(*block, "pointwise", mid, filters, {1, 1});
    block->bn = b.batch_norm(*block, "bn", filters);
    // Kept: the relu output (depthwise input), the depthwise output, the pointwise output.
    b.keep(h.numel() + mid.numel() + filters * mid.h * mid.w);
    h = {filters, mid.h, mid.w};
    blocks.push_back(block);
  }
  out = h;
}

Tensor SeparableConv::forward(const Tensor& x) {
  Tensor h = x;
  for (const auto& block : blocks) {
    check_built(block->depthwise.get(), "SeparableConv");
    h = block->bn->forward(block->pointwise->forward(block->depthwise->forward(autocast::lower_relu(h))));
  }
  return h;
}

// ---- PoolOp ----

PoolOp::PoolOp(LayerBuilder& b, Chw in, int64_t filters, const CellOpSpec& op, int64_t s)
    : UnaryModule("PoolOp"), max(op.kind == CellOpSpec::Kind::MaxPool), kernel(op.kernel), stride(s) {
  TRIDENT_CHECK(kernel % 2 == 1 || stride == kernel, "AmoebaNet: ", op.name, " at stride ", stride,
                " is not supported (an even pool needs stride equal to its kernel)");
  // Odd kernels: k / 2 on each side maps n to ceil(n / s). 2x2 at stride 2: ceil mode.
  padding = kernel % 2 == 1 ? kernel / 2 : 0;
  out = {in.c, ceil_div(in.h, stride), ceil_div(in.w, stride)};
  if (max) b.keep_indices(out.numel());
  if (in.c != filters) {
    proj = register_module("proj", std::make_shared<ConvBn>(b, out, filters, Int2{1, 1}, Int2{1, 1}, Int2{0, 0}, false));
    out = proj->out;
  }
}

Tensor PoolOp::forward(const Tensor& x) {
  const bool ceil = kernel % 2 == 0;
  Tensor h = max ? max_pool2d(x, {kernel, kernel}, Int2{stride, stride}, {padding, padding}, {1, 1}, ceil)
                 : avg_pool2d(x, {kernel, kernel}, Int2{stride, stride}, {padding, padding}, ceil, false);
  return proj ? proj->forward(h) : h;
}

std::string PoolOp::extra_repr() const {
  return detail::str(max ? "max" : "avg", ", kernel=", kernel, ", stride=", stride, ", padding=", padding);
}

// ---- the factory ----

std::shared_ptr<nn::UnaryModule> make_cell_op(LayerBuilder& b, Chw in, int64_t filters, const CellOpSpec& op,
                                              int64_t stride, Chw& out) {
  using Kind = CellOpSpec::Kind;
  switch (op.kind) {
    case Kind::Identity:
      if (stride == 1 && in.c == filters) {
        out = in;
        return std::make_shared<nn::Identity>();
      }
      [[fallthrough]];  // the reference: "none" becomes a strided (or widening) relu-1x1-bn
    case Kind::Conv1x1: {
      auto m = std::make_shared<ConvBn>(b, in, filters, Int2{1, 1}, Int2{stride, stride}, Int2{0, 0}, true);
      out = m->out;
      return m;
    }
    case Kind::Bottleneck: {
      auto m = std::make_shared<BottleneckConv>(b, in, filters, op, stride);
      out = m->out;
      return m;
    }
    case Kind::Separable: {
      auto m = std::make_shared<SeparableConv>(b, in, filters, op.kernel, op.repeats, stride);
      out = m->out;
      return m;
    }
    case Kind::MaxPool:
    case Kind::AvgPool: {
      auto m = std::make_shared<PoolOp>(b, in, filters, op, stride);
      out = m->out;
      return m;
    }
  }
  TRIDENT_ASSERT(false, "unhandled cell operation ", op.name);
  return nullptr;
}

}  // namespace trident::models::amoebanet
