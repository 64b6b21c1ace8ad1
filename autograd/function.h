// User-defined differentiable functions: a forward and a backward written by hand, plugged into
// the autograd engine exactly like a built-in op (see docs/extending.md for a worked example).
//
// Two forms, the same machinery underneath:
//
// * The class form (PyTorch's torch.autograd.Function), for a reusable op:
//     struct SquarePlus : autograd::Function<SquarePlus> {
//       static constexpr const char* name = "SquarePlus";   // names the node and every error
//       static Tensor forward(FunctionCtx& ctx, const Tensor& x, double c) {
//         ctx.save_for_backward({x});
//         return add(mul(x, x), c);
//       }
//       static TensorList backward(FunctionCtx& ctx, const TensorList& grads) {
//         Tensor x = ctx.saved_tensors()[0];
//         return {mul(mul(grads[0], x), 2.0)};   // one gradient per Tensor argument of forward
//       }
//     };
//     Tensor y = SquarePlus::apply(x, 1.0);
//   forward takes the context and any arguments; its Tensor arguments (in order) are the node's
//   inputs, the others are passed through. It returns a Tensor or a TensorList, and apply
//   returns the same.
//
// * The lambda form, for a one-off or a function built at run time:
//     autograd::LambdaFunction square("Square",
//         [](FunctionCtx& ctx, const TensorList& in) { ctx.save_for_backward({in[0]}); return TensorList{mul(in[0], in[0])}; },
//         [](FunctionCtx& ctx, const TensorList& g) { return TensorList{mul(mul(g[0], ctx.saved_tensors()[0]), 2.0)}; });
//     Tensor y = square({x})[0];
//
// NOTE [User functions]: the contract, which both forms share.
// - forward runs with grad recording off (NoGradGuard): the ops it calls record nothing, and the
//   outputs it returns become outputs of one node named "<name>Backward", recorded with
//   autograd::record like a built-in op's. Outputs are returned as fresh handles (aliases of what
//   forward returned), so returning an input unchanged is allowed. forward must not modify its
//   inputs in place.
// - When grad mode is off (NoGradGuard) or no input requires grad, forward still runs, with
//   needs_input_grad all false, and nothing is recorded: backward is never called.
// - backward runs during the engine's pass (grad mode off) with one gradient per forward output:
//   outputs that received no gradient get zeros (the engine's rule), outputs marked
//   non-differentiable, undefined outputs and non-floating outputs (indices, masks) get an
//   undefined Tensor. It returns exactly one gradient per tensor input (non-tensor arguments of
//   the class form get none); an undefined Tensor means "no gradient" (zero). A gradient for an
//   input that does not need one is dropped. Each defined gradient must have its input's shape,
//   dtype and device; otherwise the error names the function, the input and both shapes.
// - Tensors saved with ctx.save_for_backward are version-checked like built-in ops' SavedTensor:
//   modifying one in place between forward and backward is an error naming the function. The
//   context (saved tensors and values) is freed after backward unless retain_graph.
// - Higher-order gradients: opt in with ctx.set_differentiable_backward() (see there).
// - Hooks on the outputs and on the inputs, retain_grad, autograd::grad and
//   autograd::checkpoint (which re-runs forward during backward) work as for built-in ops.
// - Errors thrown by forward are re-thrown prefixed with "in forward of <name>"; errors from
//   backward are prefixed by the engine with "in backward of <name>Backward".
#pragma once

#include <any>
#include <concepts>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "autograd/node.h"

namespace trident::autograd {

// What forward hands to backward: saved tensors, saved values, which inputs need a gradient,
// and which outputs are not differentiable.
class FunctionCtx {
 public:
  explicit FunctionCtx(std::string name) : name_(std::move(name)) {}
  FunctionCtx(const FunctionCtx&) = delete;
  FunctionCtx& operator=(const FunctionCtx&) = delete;

  // The function's name (as given to Function::name or LambdaFunction).
  const std::string& name() const { return name_; }

  // Number of tensor inputs, and whether input i will receive a gradient (grad mode on and the
  // input requires grad). Valid in forward and backward; backward may skip work for inputs
  // that do not need a gradient (returning an undefined Tensor for them).
  size_t num_inputs() const { return needs_input_grad_.size(); }
  bool needs_input_grad(size_t i) const;

  // Tensors backward needs (inputs, outputs or intermediates). Replaces what was saved before.
  void save_for_backward(const TensorList& tensors);
  // The saved tensors, in the order saved. Throws, naming the function and the tensor, if one
  // was modified in place since it was saved.
  TensorList saved_tensors() const;

  // Any other value backward needs (a scalar, a shape, a flag), by key.
  template <typename T>
  void save(const std::string& key, T value) {
    values_[key] = std::move(value);
  }
  bool has(const std::string& key) const { return values_.count(key) != 0; }
  // The value saved under key; throws naming the function and the key if there is none or it
  // has another type.
  template <typename T>
  const T& get(const std::string& key) const {
    const std::any& v = value(key);
    const T* p = std::any_cast<T>(&v);
    if (!p) type_mismatch(key, typeid(T).name(), v.type().name());
    return *p;
  }

  // Declares backward differentiable (NOTE [Higher-order gradients] in autograd/engine.h): it
  // computes with differentiable ops from its gradients and saved_tensors() only (values kept with
  // save() are constants), so a create_graph backward records it and the gradients it returns can
  // be differentiated again; saved inputs and outputs rejoin the graph. Without it, a
  // create_graph backward still runs backward, and a second derivative through the function is an
  // error naming it.
  void set_differentiable_backward(bool on = true) { differentiable_backward_ = on; }
  bool differentiable_backward() const { return differentiable_backward_; }

  // Outputs (among those forward returns) that have no gradient: they come back not requiring
  // grad, and backward receives an undefined gradient in their place. Non-floating outputs are
  // marked automatically.
  void mark_non_differentiable(const TensorList& outputs);

 private:
  friend struct FunctionRecorder;
  const std::any& value(const std::string& key) const;
  [[noreturn]] void type_mismatch(const std::string& key, const char* wanted, const char* held) const;

  std::string name_;
  std::vector<bool> needs_input_grad_;
  std::vector<SavedTensor> saved_;
  std::map<std::string, std::any> values_;
  TensorList non_differentiable_;
  bool differentiable_backward_ = false;
};

using FunctionBackwardFn = std::function<TensorList(FunctionCtx& ctx, const TensorList& grad_outputs)>;

// The shared machinery of both forms (autograd/function.cpp): sets up the context before
// forward and records the node after it.
struct FunctionRecorder {
  // Creates the context; inputs are the function's tensor inputs (undefined ones allowed).
  FunctionRecorder(std::string name, const TensorList& inputs);
  FunctionCtx& ctx() { return *ctx_; }
  // Runs forward under NoGradGuard, re-throwing its errors prefixed with the function's name.
  TensorList run_forward(const std::function<TensorList()>& forward);
  // Turns forward's outputs into the function's outputs (fresh handles) and, when any input
  // needs a gradient, records the node whose backward calls `backward`.
  TensorList finish(TensorList outputs, FunctionBackwardFn backward);

 private:
  std::shared_ptr<FunctionCtx> ctx_;
  TensorList inputs_;
};

// ---- the lambda form ----

using FunctionForwardFn = std::function<TensorList(FunctionCtx& ctx, const TensorList& inputs)>;

class LambdaFunction {
 public:
  LambdaFunction(std::string name, FunctionForwardFn forward, FunctionBackwardFn backward);
  TensorList operator()(const TensorList& inputs) const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  FunctionForwardFn forward_;
  FunctionBackwardFn backward_;
};

// ---- the class form ----

namespace function_detail {
template <typename T>
inline constexpr bool is_tensor_arg = std::is_same_v<std::remove_cvref_t<T>, Tensor>;

template <typename T>
void collect_input(TensorList& inputs, const T& arg) {
  if constexpr (is_tensor_arg<T>) inputs.push_back(arg);
}

inline TensorList to_list(Tensor t) { return TensorList{std::move(t)}; }
inline TensorList to_list(TensorList ts) { return ts; }
}  // namespace function_detail

template <typename F>
concept NamedFunction = requires { std::string_view(F::name); };

// CRTP base: Derived declares `static constexpr const char* name`, `static R forward(FunctionCtx&,
// Args...)` with R = Tensor or TensorList, and `static TensorList backward(FunctionCtx&, const
// TensorList&)`. Derived::apply(args...) runs it (NOTE [User functions]).
template <typename Derived>
struct Function {
  template <typename... Args>
  static auto apply(Args&&... args) {
    static_assert(NamedFunction<Derived>,
                  "an autograd::Function needs `static constexpr const char* name = \"...\";` (the node and errors use it)");
    using Result = decltype(Derived::forward(std::declval<FunctionCtx&>(), std::forward<Args>(args)...));
    static_assert(std::is_same_v<Result, Tensor> || std::is_same_v<Result, TensorList>,
                  "an autograd::Function's forward must return a Tensor or a TensorList");
    TensorList inputs;
    (function_detail::collect_input(inputs, args), ...);
    FunctionRecorder rec{std::string(Derived::name), inputs};
    TensorList outputs = rec.run_forward(
        [&] { return function_detail::to_list(Derived::forward(rec.ctx(), std::forward<Args>(args)...)); });
    outputs = rec.finish(std::move(outputs), [](FunctionCtx& ctx, const TensorList& grads) {
      return Derived::backward(ctx, grads);
    });
    if constexpr (std::is_same_v<Result, Tensor>) {
      return outputs.at(0);
    } else {
      return outputs;
    }
  }
};

}  // namespace trident::autograd

namespace trident {
using autograd::FunctionCtx;
}  // namespace trident
