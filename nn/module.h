// Module: the unit models are built from. A module owns named parameters (leaf tensors that
// require grad), named buffers (state that is not trained: batch norm's running statistics)
// and named submodules, so every tensor of a model has a hierarchical name like
// "h.0.attn.c_attn.weight" — the names state dicts and checkpoints use.
//
// Subclasses keep their tensors and submodules as members (Tensor and shared_ptr handles) and
// register them once in the constructor:
//   struct Mlp : Module {
//     std::shared_ptr<Linear> fc1, fc2;
//     Mlp() : Module("Mlp") { fc1 = register_module("fc1", std::make_shared<Linear>(4, 8)); ... }
//     Tensor forward(const Tensor& x) { return fc2->forward(relu(fc1->forward(x))); }
//   };
// A Tensor is a handle to shared state, so the member and the registry refer to the same
// tensor; to(dtype) and to(device) replace the data under every handle (Tensor::set_data), so
// an optimizer built before the move still updates the module's parameters.
//
// forward() is not virtual here: modules take and return different things. UnaryModule is
// the common case (one tensor in, one out), which Sequential chains.
#pragma once

#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace trident::nn {

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string type_name = "Module") : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& type_name() const { return type_name_; }

  // ---- registration (names are unique within a module and may not contain '.') ----
  // Marks t as a trainable leaf (requires_grad = requires_grad) and returns the handle.
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  // Non-trainable state; `persistent` buffers are part of the state dict.
  Tensor register_buffer(const std::string& name, Tensor t, bool persistent = true);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

  // ---- traversal (depth first, in registration order) ----
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  // This module (name "") and every descendant.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules();
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }
  // A direct child by name; throws naming the known children if there is none.
  std::shared_ptr<Module> child(const std::string& name) const;

  // Total number of parameter elements (shared tensors counted once).
  int64_t num_parameters(bool trainable_only = false) const;

  // ---- modes and conversions ----
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Floating-point parameters and buffers are cast (integer buffers are left alone). A tensor
  // that broadcasts one element (every stride 0: a pipeline stage's placeholder for another
  // stage's tensor, NOTE [Stage-only model]) is converted as one element and stays one.
  Module& to(DType dtype);
  Module& to(Device device);
  void zero_grad(bool set_to_none = true);
  // fn(module) on every descendant, then on this module (PyTorch's order).
  void apply(const std::function<void(Module&)>& fn);

  // ---- state ----
  // Parameters and persistent buffers by full name, sharing storage with the module.
  std::map<std::string, Tensor> state_dict() const;
  // Copies values into the module's tensors. strict: names, shapes and dtypes must match
  // exactly; the error lists everything missing, unexpected and mismatched at once.
  // Not strict: loads what matches and returns the names it skipped.
  std::vector<std::string> load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

  // A PyTorch-like tree: "Mlp(\n  (fc1): Linear(in=4, out=8, bias=true)\n ...)".
  std::string str() const;

 protected:
  // One line of this module's own settings for str(), e.g. "in=4, out=8" (empty by default).
  virtual std::string extra_repr() const { return {}; }
  // Called by train(); most modules need nothing.
  virtual void on_train(bool) {}

 private:
  struct Slot {
    std::string name;
    Tensor tensor;
    bool persistent = true;
  };
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void check_name(const std::string& name, const char* what) const;
  void collect(const std::string& prefix, bool params, bool persistent_only, bool recurse,
               std::vector<std::pair<std::string, Tensor>>& out) const;
  void str_into(std::ostream& os, int indent) const;

  std::string type_name_;
  bool training_ = true;
  std::vector<Slot> params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

// One tensor in, one tensor out: what Sequential chains.
class UnaryModule : public Module {
 public:
  using Module::Module;
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
};

inline std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.str(); }

}  // namespace trident::nn
