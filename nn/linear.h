// Linear: y = x W^T + b with W [out_features, in_features] (PyTorch's layout and init:
// W and b uniform in +-1/sqrt(in_features)).
#pragma once

#include "core/rng.h"
#include "nn/module.h"

namespace trident::nn {

class Linear : public UnaryModule {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, DType dtype = DType::F32, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  int64_t in_features, out_features;
  Tensor weight, bias;  // bias undefined when disabled

 protected:
  std::string extra_repr() const override;
};

}  // namespace trident::nn
