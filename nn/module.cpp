#include "nn/module.h"

#include <algorithm>
#include <sstream>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "core/factory.h"
#include "nn/state_dict.h"

namespace trident::nn {

void Module::check_name(const std::string& name, const char* what) const {
  TRIDENT_CHECK(!name.empty() && name.find('.') == std::string::npos, type_name_, ": ", what, " name '", name,
                "' must be non-empty and contain no '.'");
  auto taken = [&](const std::string& n) {
    for (const Slot& s : params_)
      if (s.name == n) return true;
    for (const Slot& s : buffers_)
      if (s.name == n) return true;
    for (const auto& c : children_)
      if (c.first == n) return true;
    return false;
  };
  TRIDENT_CHECK(!taken(name), type_name_, ": the name '", name, "' is already registered");
}

Tensor Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_name(name, "parameter");
  TRIDENT_CHECK(t.defined(), type_name_, ": parameter '", name, "' is undefined");
  TRIDENT_CHECK(t.is_leaf(), type_name_, ": parameter '", name, "' was computed by an op; pass a leaf (detach() it)");
  if (requires_grad) TRIDENT_CHECK(is_floating(t.dtype()), type_name_, ": parameter '", name, "' has dtype ", t.dtype(),
                                   "; trainable parameters must be floating point");
  t.set_requires_grad(requires_grad);
  params_.push_back({name, t, true});
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t, bool persistent) {
  check_name(name, "buffer");
  TRIDENT_CHECK(t.defined(), type_name_, ": buffer '", name, "' is undefined");
  buffers_.push_back({name, t.detach(), persistent});
  return buffers_.back().tensor;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_name(name, "submodule");
  TRIDENT_CHECK(m != nullptr, type_name_, ": submodule '", name, "' is null");
  TRIDENT_CHECK(m.get() != this, type_name_, ": a module cannot be its own child");
  children_.emplace_back(name, std::move(m));
}

std::shared_ptr<Module> Module::child(const std::string& name) const {
  for (const auto& c : children_)
    if (c.first == name) return c.second;
  std::vector<std::string> names;
  for (const auto& c : children_) names.push_back(c.first);
  TRIDENT_FAIL(type_name_, " has no submodule '", name, "' (it has ", names, ")");
}

void Module::collect(const std::string& prefix, bool params, bool persistent_only, bool recurse,
                     std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const Slot& s : params ? params_ : buffers_)
    if (!persistent_only || s.persistent) out.emplace_back(prefix + s.name, s.tensor);
  if (!recurse) return;
  for (const auto& [name, m] : children_) m->collect(prefix + name + ".", params, persistent_only, true, out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> all, out;
  collect("", true, false, recurse, all);
  // A tensor shared by two modules (tied embeddings) is listed once, under its first name.
  std::unordered_set<const TensorImpl*> seen;
  for (auto& p : all)
    if (seen.insert(p.second.impl()).second) out.push_back(std::move(p));
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& p : named_parameters(recurse)) out.push_back(p.second);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", false, false, recurse, out);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& b : named_buffers(recurse)) out.push_back(b.second);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> stack;
  // shared_from_this needs an owning shared_ptr; a module on the stack lists its descendants.
  std::shared_ptr<Module> self = weak_from_this().lock();
  if (self) out.emplace_back("", self);
  std::function<void(const std::string&, const Module&)> walk = [&](const std::string& prefix, const Module& m) {
    for (const auto& [name, c] : m.children_) {
      out.emplace_back(prefix + name, c);
      walk(prefix + name + ".", *c);
    }
  };
  walk("", *this);
  return out;
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (const auto& [name, p] : named_parameters())
    if (!trainable_only || p.requires_grad()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  on_train(on);
  for (auto& [name, c] : children_) c->train(on);
}

namespace {
// A tensor that broadcasts one element (is_broadcast_scalar: a pipeline's placeholder for another
// stage's tensor, NOTE [Stage-only model]) is converted as that one element and broadcast again,
// so that moving or casting a model does not materialize it.
template <typename F>
Tensor converted(const Tensor& t, F&& convert) {
  if (!is_broadcast_scalar(t)) return convert(t);
  const Tensor one = convert(t.as_strided({}, {}, t.storage_offset()));
  return one.as_strided(t.sizes(), Shape(t.sizes().size(), 0), 0);
}
}  // namespace

Module& Module::to(DType dtype) {
  TRIDENT_CHECK(is_floating(dtype), type_name_, ".to(", dtype, "): modules convert to floating dtypes only");
  NoGradGuard no_grad;
  apply([&](Module& m) {
    for (Slot& s : m.params_)
      if (is_floating(s.tensor.dtype()) && s.tensor.dtype() != dtype)
        s.tensor.set_data(converted(s.tensor.detach(), [&](const Tensor& t) { return t.to(dtype); }));
    for (Slot& s : m.buffers_)
      if (is_floating(s.tensor.dtype()) && s.tensor.dtype() != dtype)
        s.tensor.set_data(converted(s.tensor, [&](const Tensor& t) { return t.to(dtype); }));
  });
  return *this;
}

Module& Module::to(Device device) {
  NoGradGuard no_grad;
  apply([&](Module& m) {
    for (Slot& s : m.params_)
      if (s.tensor.device() != device)
        s.tensor.set_data(converted(s.tensor.detach(), [&](const Tensor& t) { return t.to(device); }));
    for (Slot& s : m.buffers_)
      if (s.tensor.device() != device) s.tensor.set_data(converted(s.tensor, [&](const Tensor& t) { return t.to(device); }));
  });
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  for (Tensor& p : parameters()) p.zero_grad(set_to_none);
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [name, c] : children_) c->apply(fn);
  fn(*this);
}

std::map<std::string, Tensor> Module::state_dict() const {
  std::vector<std::pair<std::string, Tensor>> all;
  collect("", true, false, true, all);
  collect("", false, true, true, all);
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : all) out.emplace(name, t.detach());
  return out;
}

std::vector<std::string> Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  NoGradGuard no_grad;
  LoadResult r;
  try {
    r = load_into(state_dict(), state, strict);  // checks everything before copying anything
  } catch (const Error& e) {
    TRIDENT_FAIL("load_state_dict into ", type_name_, ": ", e.message());
  }
  std::vector<std::string> skipped = r.missing;
  skipped.insert(skipped.end(), r.unexpected.begin(), r.unexpected.end());
  for (const StateDictMismatch& m : r.mismatched) skipped.push_back(m.name);
  return skipped;
}

void Module::str_into(std::ostream& os, int indent) const {
  os << type_name_ << "(" << extra_repr();
  if (!children_.empty()) {
    os << "\n";
    for (const auto& [name, c] : children_) {
      os << std::string(static_cast<size_t>(indent + 2), ' ') << "(" << name << "): ";
      c->str_into(os, indent + 2);
      os << "\n";
    }
    os << std::string(static_cast<size_t>(indent), ' ');
  }
  os << ")";
}

std::string Module::str() const {
  std::ostringstream os;
  str_into(os, 0);
  return os.str();
}

}  // namespace trident::nn
