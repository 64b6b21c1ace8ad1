// Sequential and ModuleList. Children are named "0", "1", ... as in PyTorch, so a model built
// from a ModuleList of blocks has parameter names like "h.3.mlp.c_fc.weight".
#pragma once

#include <initializer_list>
#include <memory>
#include <vector>

#include "nn/module.h"

namespace trident::nn {

// Applies its children in order, each to the previous one's output.
class Sequential : public UnaryModule {
 public:
  Sequential() : UnaryModule("Sequential") {}
  Sequential(std::initializer_list<std::shared_ptr<UnaryModule>> modules);
  void push_back(std::shared_ptr<UnaryModule> m);
  size_t size() const { return layers_.size(); }
  const std::shared_ptr<UnaryModule>& operator[](size_t i) const;
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<std::shared_ptr<UnaryModule>> layers_;
};

// Holds modules in order (its own forward is the owner's business).
template <typename M = Module>
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  void push_back(std::shared_ptr<M> m) {
    register_module(std::to_string(items_.size()), m);
    items_.push_back(std::move(m));
  }
  size_t size() const { return items_.size(); }
  const std::shared_ptr<M>& operator[](size_t i) const {
    TRIDENT_CHECK(i < items_.size(), "ModuleList: index ", i, " out of range for ", items_.size(), " modules");
    return items_[i];
  }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

}  // namespace trident::nn
