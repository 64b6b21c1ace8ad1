// The optimizer base: parameter groups, step(), zero_grad(), and a state dict that round-trips
// exactly. The concrete optimizers are in sgd.h, rmsprop.h, adam.h (Adam, AdamW) and lamb.h.
//
// Parameters are leaf tensors (a Module's parameters(), or any std::vector<Tensor>), f32 or f64,
// contiguous, each in at most one group. f16/bf16 parameters are refused: mixed precision keeps
// f32 master weights and updates those. Each group carries its own hyperparameters (the
// optimizer's Options struct), so biases and norm weights can go in a group without weight
// decay:
//
//   AdamWOptions decay{.lr = 6e-4, .weight_decay = 0.1}, no_decay = decay;
//   no_decay.weight_decay = 0;
//   AdamW opt({{matrices, decay}, {biases_and_norms, no_decay}});
//   ... loss.backward(); opt.step(); opt.zero_grad();
//
// step() runs under NoGradGuard, skips parameters whose .grad is undefined (their state and
// step count do not move, as in PyTorch), and updates each parameter in one fused pass over its
// elements (nn/optim/math.h, nn/optim/cpu_kernels.h); CUDA parameters of one group, device,
// dtype and step count are updated together by a few multi-tensor launches, with no host
// synchronization (NOTE [Optimizer kernels] in nn/optim/cuda_kernels.h). Per-parameter state
// (moment buffers, the step count) is created on the parameter's first update.
//
// NOTE [Optimizer state dict]: state_dict() returns an OptimizerState:
//   optimizer  the optimizer's name ("SGD", "RMSProp", "Adam", "AdamW", "LAMB");
//   tensors    "state.<i>.<slot>" -> the buffer of parameter i (i counts the parameters of all
//              groups in order: group 0's first, then group 1's, ..., as PyTorch numbers them),
//              e.g. "state.0.exp_avg", "state.3.momentum_buffer"; only parameters that have
//              been updated have entries. The tensors alias the live buffers (no copy): write or
//              clone them before the next step();
//   scalars    "num_groups"; per group "group.<g>.num_params", "group.<g>.initial_lr" and every
//              hyperparameter of the Options struct ("group.<g>.lr", "group.<g>.beta1", ...,
//              booleans as 0 or 1); per updated parameter "state.<i>.step".
// Every value is a double (step counts are exact up to 2^53), so the scalars are a flat JSON
// object: to_json() writes {"format":1,"optimizer":"AdamW","scalars":{...}} with the shortest
// decimal that reads back to the same double, and from_json() reads it back; a checkpoint can
// store that string in a safetensors file's __metadata__ next to the tensors.
// load_state_dict() checks everything before changing anything: the optimizer name, the group
// and parameter counts, every hyperparameter present and valid, every tensor's parameter index,
// slot name, shape and dtype, and that each updated parameter has all the buffers its group's
// hyperparameters need; an error names the offending key and both values. It then copies the
// tensors into fresh buffers (the state dict's tensors are not shared) and restores the groups'
// hyperparameters, so training resumes bit-exactly.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace trident::nn::optim {

struct OptimizerState {
  std::string optimizer;
  std::map<std::string, Tensor> tensors;
  std::map<std::string, double> scalars;

  // The optimizer name and the scalars as JSON (NOTE [Optimizer state dict]); throws on a
  // non-finite scalar, which JSON cannot hold.
  std::string to_json() const;
  // The inverse of to_json(): the optimizer name and the scalars; the tensors are given
  // separately (as read from the checkpoint file). Throws on malformed text, naming the offset.
  static OptimizerState from_json(std::string_view json, std::map<std::string, Tensor> tensors = {});
};

// One parameter's state: its update count and its buffers, indexed like slot_names().
struct ParamState {
  int64_t step = 0;
  std::vector<Tensor> slots;
};

// A group of parameters with its own hyperparameters.
template <typename Options>
struct ParamGroup {
  std::vector<Tensor> params;
  Options options{};
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // "SGD", "Adam", ...
  virtual std::string_view name() const = 0;
  // The names of the per-parameter buffers, in slot order ("exp_avg", "exp_avg_sq", ...).
  virtual std::span<const std::string_view> slot_names() const = 0;

  // One update of every parameter that has a gradient.
  void step();
  // Drops every parameter's gradient (set_to_none, PyTorch's default) or fills it with zeros.
  void zero_grad(bool set_to_none = true);

  size_t num_groups() const { return groups_.size(); }
  const std::vector<Tensor>& params(size_t group) const;
  // All parameters, in state-dict order.
  std::vector<Tensor> parameters() const;
  int64_t num_params() const { return static_cast<int64_t>(state_.size()); }

  // The group's current learning rate, which schedules set (nn/optim/schedule.h), and the one
  // it was created with, which they scale.
  double lr(size_t group) const;
  void set_lr(size_t group, double lr);
  double initial_lr(size_t group) const;

  // The state of parameter i (state-dict numbering).
  const ParamState& state(int64_t i) const;

  OptimizerState state_dict() const;
  void load_state_dict(const OptimizerState& state);

 protected:
  Optimizer() = default;

  // ---- what a concrete optimizer provides ----
  // Its group's hyperparameters by key ("group.<g>.<name>", for the state dict), and setting
  // them back from such a map (validated first: on error the group is unchanged).
  virtual std::map<std::string, double> hyperparameters(size_t group) const = 0;
  virtual void set_hyperparameters(size_t group, const std::map<std::string, double>& values) = 0;
  virtual double group_lr(size_t group) const = 0;
  virtual void set_group_lr(size_t group, double lr) = 0;
  // Throws if the group's hyperparameters are invalid (negative lr, beta outside [0, 1), ...).
  virtual void validate(size_t group) const = 0;
  // Whether the group's hyperparameters need buffer `slot` (momentum_buffer only with momentum).
  virtual bool slot_used(size_t group, size_t slot) const = 0;
  // Updates parameter `index` (state-dict numbering) of `group`, whose gradient `grad` (same
  // shape and dtype, contiguous) is defined; state.step has already been incremented. Called
  // for CPU parameters (the CPU loops of nn/optim/cpu_kernels.h).
  virtual void update(size_t group, int64_t index, const Tensor& param, const Tensor& grad, ParamState& state) = 0;

  // One parameter's share of a step, as update_group() receives it.
  struct ParamUpdate {
    int64_t index = 0;  // state-dict numbering
    Tensor param;
    Tensor grad;                   // defined, contiguous, with param's shape, dtype and device
    ParamState* state = nullptr;   // its step already incremented
  };
  // Updates every parameter of `group` that has a gradient, in one call so that CUDA parameters
  // can be updated by a few multi-tensor launches (NOTE [Optimizer kernels] in
  // nn/optim/cuda_kernels.h). The default calls update() for each; it refuses CUDA parameters,
  // which need an optimizer that overrides it.
  virtual void update_group(size_t group, std::span<const ParamUpdate> items);

  // Parameters that one multi-tensor call can update together: same device, same dtype, and
  // the same `key` (whatever else changes the per-element functor: the step count, SGD's
  // first-step flag).
  struct Batch {
    Device device;
    DType dtype = DType::F32;
    int64_t key = 0;
    std::vector<const ParamUpdate*> items;

    std::vector<Tensor> params() const;
    std::vector<Tensor> grads() const;
    // Buffer `slot` of every item's state (each must exist).
    std::vector<Tensor> slots(size_t slot) const;
  };
  // Splits items into batches, in order of first appearance; key may be empty (all keys 0).
  static std::vector<Batch> batches(std::span<const ParamUpdate> items,
                                    const std::function<int64_t(const ParamUpdate&)>& key = {});

  // Creates buffer `slot` (zeros like param) when it does not exist; returns true if it did not.
  static bool ensure_slot(ParamState& state, size_t slot, const Tensor& param);

  // Registers a group (checks its parameters: defined leaves, f32/f64, contiguous, not in
  // another group). The concrete optimizer stores the group's options first.
  void add_group_params(std::vector<Tensor> params, double lr);

 private:
  struct Group {
    std::vector<Tensor> params;
    int64_t first = 0;  // state-dict index of params[0]
    double initial_lr = 0;
  };
  std::vector<Group> groups_;
  std::vector<ParamState> state_;  // by state-dict index
};

// NOTE [Optimizer options]: each optimizer's Options struct has its name (kName), an `lr` field,
// lists its hyperparameters once, in visit(v), which calls v(name, field) for every double and
// bool field (the state dict and the loader are built from it), and checks them in
// validate(), whose errors name the optimizer, the field and its value.
namespace detail {
std::string group_key(size_t group, std::string_view name);
// "state.<index>.<name>": a parameter's step or buffer in the state dict.
std::string state_key(size_t index, std::string_view name);
// A state dict's scalars shared by its parameters (the hyperparameters, "num_groups"), each
// group's "num_params" set to `group_sizes` and the per-parameter "state." entries dropped: the
// start of the state dict of the same optimizer over other parameters (another partition of
// them: ZeRO's shards, pipeline stages, the whole model).
std::map<std::string, double> shared_scalars(const std::map<std::string, double>& scalars,
                                             const std::vector<size_t>& group_sizes);
// Reads a bool stored as 0 or 1; the error names the key.
bool bool_from_double(double v, std::string_view key);
}  // namespace detail

// The part every optimizer shares given its Options type.
template <typename Options>
class OptimizerWith : public Optimizer {
 public:
  std::string_view name() const final { return Options::kName; }

  // The group's hyperparameters, to read or change between steps (changes are validated at
  // the next step()).
  Options& options(size_t group) { return options_.at(group); }
  const Options& options(size_t group) const { return options_.at(group); }

  void add_param_group(std::vector<Tensor> params, Options options) {
    options.validate();
    const double lr = options.lr;
    options_.push_back(options);
    try {
      add_group_params(std::move(params), lr);
    } catch (...) {
      options_.pop_back();
      throw;
    }
  }

 protected:
  explicit OptimizerWith(std::vector<ParamGroup<Options>> groups) {
    TRIDENT_CHECK(!groups.empty(), Options::kName, ": no parameter groups");
    for (auto& g : groups) add_param_group(std::move(g.params), g.options);
    TRIDENT_CHECK(num_params() > 0, Options::kName, ": got an empty parameter list");
  }

  std::map<std::string, double> hyperparameters(size_t group) const override {
    std::map<std::string, double> out;
    Options o = options_.at(group);
    o.visit([&](std::string_view name, const auto& field) { out[detail::group_key(group, name)] = double(field); });
    return out;
  }
  void set_hyperparameters(size_t group, const std::map<std::string, double>& values) override {
    Options o = options_.at(group);
    o.visit([&](std::string_view name, auto& field) {
      const std::string key = detail::group_key(group, name);
      const auto it = values.find(key);
      TRIDENT_CHECK(it != values.end(), "load_state_dict: ", this->name(), " state has no hyperparameter \"", key, "\"");
      if constexpr (std::is_same_v<std::decay_t<decltype(field)>, bool>) {
        field = detail::bool_from_double(it->second, key);
      } else {
        field = it->second;
      }
    });
    o.validate();
    options_.at(group) = o;
  }
  double group_lr(size_t group) const override { return options_.at(group).lr; }
  void set_group_lr(size_t group, double lr) override { options_.at(group).lr = lr; }
  void validate(size_t group) const override { options_.at(group).validate(); }

  std::vector<Options> options_;
};

}  // namespace trident::nn::optim
