#include "models/amoebanet_builder.h"

#include "nn/init.h"

namespace trident::models::amoebanet {

std::shared_ptr<nn::Conv2d> LayerBuilder::conv(nn::Module& owner, const std::string& name, Chw input, int64_t out,
                                               Int2 kernel, Int2 stride, Int2 padding, int64_t groups) {
  const int64_t in = input.c;
  TRIDENT_CHECK(in > 0 && out > 0 && groups > 0 && in % groups == 0 && out % groups == 0, "AmoebaNet: ", owner.type_name(),
                ".", name, ": a convolution from ", in, " to ", out, " channels in ", groups, " groups is impossible");
  parameters_ += out * (in / groups) * kernel[0] * kernel[1];
  // NOTE [AmoebaNet multiply-adds]: every output element sums (in / groups) x kh x kw products.
  const int64_t oh = (input.h + 2 * padding[0] - kernel[0]) / stride[0] + 1, ow = (input.w + 2 * padding[1] - kernel[1]) / stride[1] + 1;
  if (oh > 0 && ow > 0) multiply_adds_ += oh * ow * out * (in / groups) * kernel[0] * kernel[1];
  if (!opt_.materialize) return nullptr;
  nn::Conv2dOptions o;
  o.stride = stride;
  o.padding = padding;
  o.groups = groups;
  o.bias = false;
  auto c = std::make_shared<nn::Conv2d>(in, out, kernel, o, opt_.dtype, opt_.gen);
  nn::init::kaiming_normal_(c->weight, 0.0, nn::init::FanMode::FanOut, "relu", opt_.gen);
  return owner.register_module(name, c);
}

std::shared_ptr<nn::BatchNorm2d> LayerBuilder::batch_norm(nn::Module& owner, const std::string& name, int64_t channels) {
  parameters_ += 2 * channels;
  if (!opt_.materialize) return nullptr;
  return owner.register_module(name,
                               std::make_shared<nn::BatchNorm2d>(channels, opt_.bn_eps, opt_.bn_momentum, true, true, opt_.dtype));
}

std::shared_ptr<nn::Linear> LayerBuilder::linear(nn::Module& owner, const std::string& name, int64_t in, int64_t out) {
  parameters_ += in * out + out;
  multiply_adds_ += in * out;
  if (!opt_.materialize) return nullptr;
  return owner.register_module(name, std::make_shared<nn::Linear>(in, out, true, opt_.dtype, opt_.gen));
}

}  // namespace trident::models::amoebanet
