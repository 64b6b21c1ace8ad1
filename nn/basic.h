// Identity, Flatten and Dropout.
#pragma once

#include "core/rng.h"
#include "nn/module.h"
#include "ops/dropout.h"
#include "ops/shape.h"

namespace trident::nn {

class Identity : public UnaryModule {
 public:
  Identity() : UnaryModule("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
};

class Flatten : public UnaryModule {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : UnaryModule("Flatten"), start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return flatten(x, start_dim, end_dim); }
  int64_t start_dim, end_dim;
};

// Dropout in training mode, the identity in evaluation. Draws from `generator` (the default
// generator when null): restoring its state replays the same mask (NOTE [Philox streams]).
class Dropout : public UnaryModule {
 public:
  explicit Dropout(double p = 0.5, Generator* generator = nullptr) : UnaryModule("Dropout"), p(p), generator(generator) {
    TRIDENT_CHECK(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got ", p);
  }
  Tensor forward(const Tensor& x) override { return dropout(x, p, is_training(), generator); }
  double p;
  Generator* generator;

 protected:
  std::string extra_repr() const override { return detail::str("p=", p); }
};

}  // namespace trident::nn
