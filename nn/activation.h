// Stateless element-wise modules.
#pragma once

#include "nn/module.h"
#include "ops/unary.h"

namespace trident::nn {

class ReLU : public UnaryModule {
 public:
  ReLU() : UnaryModule("ReLU") {}
  Tensor forward(const Tensor& x) override { return relu(x); }
};

class GELU : public UnaryModule {
 public:
  explicit GELU(GeluApproximation approximate = GeluApproximation::None) : UnaryModule("GELU"), approximate(approximate) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximate); }
  GeluApproximation approximate;

 protected:
  std::string extra_repr() const override { return approximate == GeluApproximation::Tanh ? "approximate=tanh" : ""; }
};

class Tanh : public UnaryModule {
 public:
  Tanh() : UnaryModule("Tanh") {}
  Tensor forward(const Tensor& x) override { return tanh(x); }
};

class Sigmoid : public UnaryModule {
 public:
  Sigmoid() : UnaryModule("Sigmoid") {}
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
};

}  // namespace trident::nn
