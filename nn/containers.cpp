#include "nn/containers.h"

namespace trident::nn {

Sequential::Sequential(std::initializer_list<std::shared_ptr<UnaryModule>> modules) : UnaryModule("Sequential") {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<UnaryModule> m) {
  register_module(std::to_string(layers_.size()), m);
  layers_.push_back(std::move(m));
}

const std::shared_ptr<UnaryModule>& Sequential::operator[](size_t i) const {
  TRIDENT_CHECK(i < layers_.size(), "Sequential: index ", i, " out of range for ", layers_.size(), " layers");
  return layers_[i];
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (const auto& m : layers_) h = m->forward(h);
  return h;
}

}  // namespace trident::nn
