// Conv2d over NCHW input, weight [out, in / groups, kH, kW] (PyTorch's layout and init).
#pragma once

#include "core/rng.h"
#include "nn/module.h"
#include "ops/conv.h"

namespace trident::nn {

struct Conv2dOptions {
  Int2 stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
};

class Conv2d : public UnaryModule {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Int2 kernel, Conv2dOptions options = {}, DType dtype = DType::F32,
         Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  int64_t in_channels, out_channels;
  Int2 kernel;
  Conv2dOptions options;
  Tensor weight, bias;

 protected:
  std::string extra_repr() const override;
};

}  // namespace trident::nn
