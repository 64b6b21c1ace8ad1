#include "nn/conv2d.h"

#include <cmath>

#include "core/factory.h"
#include "nn/init.h"

namespace trident::nn {

Conv2d::Conv2d(int64_t in, int64_t out, Int2 k, Conv2dOptions opt, DType dtype, Generator* gen)
    : UnaryModule("Conv2d"), in_channels(in), out_channels(out), kernel(k), options(opt) {
  TRIDENT_CHECK(opt.groups > 0 && in % opt.groups == 0 && out % opt.groups == 0, "Conv2d: groups ", opt.groups,
                " must divide in_channels ", in, " and out_channels ", out);
  TRIDENT_CHECK(k[0] > 0 && k[1] > 0, "Conv2d: kernel size must be positive, got [", k[0], ", ", k[1], "]");
  weight = register_parameter("weight", empty({out, in / opt.groups, k[0], k[1]}, dtype));
  // kaiming_uniform(a = sqrt(5)) as PyTorch: bound = 1 / sqrt(fan_in).
  const double fan_in = static_cast<double>(in / opt.groups * k[0] * k[1]);
  const double bound = 1.0 / std::sqrt(fan_in);
  init::uniform_(weight, -bound, bound, gen);
  if (opt.bias) {
    bias = register_parameter("bias", empty({out}, dtype));
    init::uniform_(bias, -bound, bound, gen);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  return conv2d(x, weight, bias, options.stride, options.padding, options.dilation, options.groups);
}

std::string Conv2d::extra_repr() const {
  return detail::str(in_channels, ", ", out_channels, ", kernel_size=[", kernel[0], ", ", kernel[1], "], stride=[",
                     options.stride[0], ", ", options.stride[1], "], padding=[", options.padding[0], ", ", options.padding[1],
                     "]", options.groups != 1 ? detail::str(", groups=", options.groups) : "",
                     options.bias ? "" : ", bias=false");
}

}  // namespace trident::nn
