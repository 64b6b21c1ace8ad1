// LayerNorm and BatchNorm2d (PyTorch's defaults: weight 1, bias 0; batch norm keeps running
// mean and variance as buffers, updated in training with `momentum`, used in evaluation).
#pragma once

#include "nn/module.h"

namespace trident::nn {

class LayerNorm : public UnaryModule {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true, DType dtype = DType::F32);
  Tensor forward(const Tensor& x) override;
  Shape normalized_shape;
  double eps;
  Tensor weight, bias;

 protected:
  std::string extra_repr() const override;
};

class BatchNorm2d : public UnaryModule {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true, DType dtype = DType::F32);
  Tensor forward(const Tensor& x) override;
  int64_t num_features;
  double eps, momentum;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 protected:
  std::string extra_repr() const override;
};

}  // namespace trident::nn
