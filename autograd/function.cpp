#include "autograd/function.h"

#include "core/dtype.h"

namespace trident::autograd {

// ---- FunctionCtx ----

bool FunctionCtx::needs_input_grad(size_t i) const {
  TRIDENT_CHECK(i < needs_input_grad_.size(), name_, ": needs_input_grad(", i, ") but the function has ",
                needs_input_grad_.size(), " tensor inputs");
  return needs_input_grad_[i];
}

void FunctionCtx::save_for_backward(const TensorList& tensors) {
  saved_.clear();
  saved_.reserve(tensors.size());
  for (const Tensor& t : tensors) saved_.emplace_back(t);
}

TensorList FunctionCtx::saved_tensors() const {
  TensorList out;
  out.reserve(saved_.size());
  for (size_t i = 0; i < saved_.size(); ++i) {
    try {
      out.push_back(saved_[i].unpack());
    } catch (const Error& e) {
      throw Error(detail::str("trident error in ", name_, ": saved tensor ", i, ": ", e.what()), e.file(), e.line(),
                  detail::str(name_, ": saved tensor ", i, ": ", e.message()));
    }
  }
  return out;
}

const std::any& FunctionCtx::value(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) {
    std::string known;
    for (const auto& [k, v] : values_) known += (known.empty() ? "" : ", ") + k;
    TRIDENT_FAIL(name_, ": no value saved under \"", key, "\" (saved: ", known.empty() ? "none" : known, ")");
  }
  return it->second;
}

void FunctionCtx::type_mismatch(const std::string& key, const char* wanted, const char* held) const {
  TRIDENT_FAIL(name_, ": the value saved under \"", key, "\" has type ", held, ", not the requested ", wanted);
}

void FunctionCtx::mark_non_differentiable(const TensorList& outputs) {
  for (const Tensor& t : outputs) {
    TRIDENT_CHECK(t.defined(), name_, ": mark_non_differentiable got an undefined tensor");
    non_differentiable_.push_back(t);
  }
}

// ---- FunctionRecorder ----

FunctionRecorder::FunctionRecorder(std::string name, const TensorList& inputs)
    : ctx_(std::make_shared<FunctionCtx>(std::move(name))), inputs_(inputs) {
  const bool grad_on = GradMode::is_enabled();
  for (const Tensor& t : inputs_) ctx_->needs_input_grad_.push_back(grad_on && t.defined() && t.requires_grad());
}

TensorList FunctionRecorder::run_forward(const std::function<TensorList()>& forward) {
  NoGradGuard no_grad;
  try {
    return forward();
  } catch (const Error& e) {
    const std::string& name = ctx_->name();
    throw Error(detail::str("trident error in forward of ", name, ": ", e.what()), e.file(), e.line(),
                detail::str("in forward of ", name, ": ", e.message()));
  }
}

namespace {

struct InputMeta {
  bool defined = false;
  Shape sizes;
  DType dtype = DType::F32;
  Device device;
};

// Checks the gradients a user's backward returned (count, shapes, dtypes, devices), naming the
// function, and drops those no input needs.
void check_input_grads(const FunctionCtx& ctx, const std::vector<InputMeta>& inputs, TensorList& grads) {
  const std::string& name = ctx.name();
  TRIDENT_CHECK(grads.size() == inputs.size(), name, ".backward returned ", grads.size(), " gradient",
                grads.size() == 1 ? "" : "s", ", but ", name, " has ", inputs.size(), " tensor input",
                inputs.size() == 1 ? "" : "s", "; return one per tensor input (an undefined Tensor for none)");
  for (size_t i = 0; i < grads.size(); ++i) {
    Tensor& g = grads[i];
    if (!g.defined()) continue;
    const InputMeta& m = inputs[i];
    TRIDENT_CHECK(m.defined, name, ".backward returned a gradient for input ", i,
                  ", which was an undefined tensor; return an undefined Tensor for it");
    TRIDENT_CHECK(g.sizes() == m.sizes, name, ".backward returned a gradient of shape ", g.sizes(), " for input ", i,
                  ", which has shape ", m.sizes);
    TRIDENT_CHECK(g.dtype() == m.dtype, name, ".backward returned a gradient of dtype ", g.dtype(), " for input ", i,
                  ", which has dtype ", m.dtype);
    TRIDENT_CHECK(g.device() == m.device, name, ".backward returned a gradient on ", g.device(), " for input ", i,
                  ", which is on ", m.device);
    if (!ctx.needs_input_grad(i)) g = Tensor();
  }
}

}  // namespace

TensorList FunctionRecorder::finish(TensorList outputs, FunctionBackwardFn backward) {
  const std::string& name = ctx_->name();
  TRIDENT_CHECK(!outputs.empty(), name, ": forward returned no outputs");
  // Which outputs carry a gradient; each output becomes a fresh handle (an alias), so an input
  // returned unchanged, or one tensor returned twice, still gets its own place in the graph.
  std::vector<size_t> differentiable;
  TensorList diff_outputs;
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor& out = outputs[i];
    if (!out.defined()) continue;
    bool marked = false;
    for (const Tensor& nd : ctx_->non_differentiable_) marked = marked || nd.is_same(out);
    const Tensor original = out;
    out = out.detach();
    // A saved output follows its fresh handle (NOTE [Saved tensors and higher-order gradients]);
    // an input returned unchanged stays an input.
    bool is_input = false;
    for (const Tensor& in : inputs_) is_input = is_input || in.is_same(original);
    if (!is_input) move_saved_identity(original, out);
    if (!marked && is_floating(out.dtype())) {
      differentiable.push_back(i);
      diff_outputs.push_back(out);
    }
  }
  ctx_->non_differentiable_.clear();  // no handles to outputs kept alive by the context

  bool any_needs = false;
  for (size_t i = 0; i < ctx_->num_inputs(); ++i) any_needs = any_needs || ctx_->needs_input_grad(i);
  if (!any_needs || diff_outputs.empty()) return outputs;

  std::vector<InputMeta> metas;
  for (const Tensor& t : inputs_) {
    metas.push_back(t.defined() ? InputMeta{true, t.sizes(), t.dtype(), t.device()} : InputMeta{});
  }
  record(name + "Backward", inputs_, diff_outputs,
         [ctx = ctx_, backward = std::move(backward), differentiable = std::move(differentiable), metas = std::move(metas),
          n_outputs = outputs.size()](const TensorList& grads) {
           TensorList full(n_outputs);  // undefined for the outputs without a gradient
           for (size_t k = 0; k < differentiable.size(); ++k) full[differentiable[k]] = grads[k];
           TensorList input_grads = backward(*ctx, full);
           check_input_grads(*ctx, metas, input_grads);
           return input_grads;
         },
         ctx_->differentiable_backward() ? Backward::Differentiable : Backward::Once);
  inputs_.clear();
  return outputs;
}

// ---- LambdaFunction ----

LambdaFunction::LambdaFunction(std::string name, FunctionForwardFn forward, FunctionBackwardFn backward)
    : name_(std::move(name)), forward_(std::move(forward)), backward_(std::move(backward)) {
  TRIDENT_CHECK(!name_.empty(), "LambdaFunction: the name is empty (it names the node and the errors)");
  TRIDENT_CHECK(forward_ != nullptr && backward_ != nullptr, "LambdaFunction ", name_, ": forward and backward must both be set");
}

TensorList LambdaFunction::operator()(const TensorList& inputs) const {
  FunctionRecorder rec(name_, inputs);
  TensorList outputs = rec.run_forward([&] { return forward_(rec.ctx(), inputs); });
  return rec.finish(std::move(outputs), backward_);
}

}  // namespace trident::autograd
