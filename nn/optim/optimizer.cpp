#include "nn/optim/optimizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "trident_config.h"
#include "core/copy.h"
#include "core/factory.h"
#include "core/profiler.h"

namespace trident::nn::optim {

// ---------------------------------------------------------------------------
// Keys and JSON
// ---------------------------------------------------------------------------

namespace detail {

std::string group_key(size_t group, std::string_view name) {
  return "group." + std::to_string(group) + "." + std::string(name);
}

bool bool_from_double(double v, std::string_view key) {
  TRIDENT_CHECK(v == 0.0 || v == 1.0, "load_state_dict: \"", key, "\" is a boolean and must be 0 or 1, got ", v);
  return v == 1.0;
}

std::string state_key(size_t index, std::string_view name) {
  return "state." + std::to_string(index) + "." + std::string(name);
}

std::map<std::string, double> shared_scalars(const std::map<std::string, double>& scalars,
                                             const std::vector<size_t>& group_sizes) {
  std::map<std::string, double> out;
  for (const auto& [k, v] : scalars)
    if (k.rfind("state.", 0) != 0) out[k] = v;
  for (size_t g = 0; g < group_sizes.size(); ++g) out[group_key(g, "num_params")] = static_cast<double>(group_sizes[g]);
  return out;
}

}  // namespace detail

namespace {

std::string state_key(int64_t index, std::string_view name) { return detail::state_key(static_cast<size_t>(index), name); }

// Splits "state.<i>.<rest>" into i and rest; false for any other shape of key.
bool parse_state_key(std::string_view key, int64_t& index, std::string_view& rest) {
  constexpr std::string_view prefix = "state.";
  if (key.substr(0, prefix.size()) != prefix) return false;
  key.remove_prefix(prefix.size());
  const size_t dot = key.find('.');
  if (dot == std::string_view::npos || dot == 0) return false;
  const std::string_view digits = key.substr(0, dot);
  if (digits.size() > 1 && digits[0] == '0') return false;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (ec != std::errc() || ptr != digits.data() + digits.size() || index < 0) return false;
  rest = key.substr(dot + 1);
  return !rest.empty();
}

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

void append_json_number(std::string& out, double v, std::string_view key) {
  TRIDENT_CHECK(std::isfinite(v), "OptimizerState::to_json: scalar \"", key, "\" is ", v, ", which JSON cannot hold");
  char buf[64];
  // Shortest representation that reads back to the same double.
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  TRIDENT_ASSERT(ec == std::errc(), "to_chars failed");
  out.append(buf, ptr);
}

// A reader for the JSON that to_json writes (objects, strings, numbers; whitespace anywhere).
class JsonReader {
 public:
  explicit JsonReader(std::string_view s) : s_(s) {}

  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  bool at_end() {
    skip_ws();
    return i_ == s_.size();
  }
  char peek() {
    skip_ws();
    if (i_ >= s_.size()) fail("unexpected end of text");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  bool consume(char c) {
    if (peek() != c) return false;
    ++i_;
    return true;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("unterminated string");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) fail("unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned code = 0;
          const std::string_view hex = s_.substr(i_, 4);
          const auto [ptr, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), code, 16);
          if (hex.size() != 4 || ec != std::errc() || ptr != hex.data() + 4) fail("bad \\u escape");
          if (code >= 0x80) fail("non-ASCII \\u escape (optimizer state keys are ASCII)");
          out += static_cast<char>(code);
          i_ += 4;
          break;
        }
        default: fail(std::string("bad escape \\") + e);
      }
    }
  }
  double number() {
    skip_ws();
    const char* b = s_.data() + i_;
    const char* e = s_.data() + s_.size();
    if (b < e && *b == '+') fail("a JSON number cannot start with '+'");
    double v = 0;
    const auto [ptr, ec] = std::from_chars(b, e, v);
    if (ec != std::errc() || ptr == b) fail("expected a number");
    i_ += static_cast<size_t>(ptr - b);
    return v;
  }
  [[noreturn]] void fail(const std::string& what) const {
    TRIDENT_FAIL("OptimizerState::from_json: ", what, " at offset ", i_);
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
};

constexpr double kJsonFormat = 1;

}  // namespace

std::string OptimizerState::to_json() const {
  std::string out = "{\"format\":1,\"optimizer\":";
  append_json_string(out, optimizer);
  out += ",\"scalars\":{";
  bool first = true;
  for (const auto& [key, value] : scalars) {
    if (!first) out += ',';
    first = false;
    append_json_string(out, key);
    out += ':';
    append_json_number(out, value, key);
  }
  out += "}}";
  return out;
}

OptimizerState OptimizerState::from_json(std::string_view json, std::map<std::string, Tensor> tensors) {
  OptimizerState st;
  st.tensors = std::move(tensors);
  JsonReader r(json);
  r.expect('{');
  bool have_format = false, have_optimizer = false, have_scalars = false;
  if (!r.consume('}')) {
    do {
      const std::string key = r.string();
      r.expect(':');
      if (key == "format") {
        const double f = r.number();
        TRIDENT_CHECK(f == kJsonFormat, "OptimizerState::from_json: format ", f, " is not supported (this build reads 1)");
        have_format = true;
      } else if (key == "optimizer") {
        st.optimizer = r.string();
        have_optimizer = true;
      } else if (key == "scalars") {
        r.expect('{');
        if (!r.consume('}')) {
          do {
            const std::string name = r.string();
            r.expect(':');
            const double v = r.number();
            TRIDENT_CHECK(st.scalars.emplace(name, v).second, "OptimizerState::from_json: scalar \"", name, "\" repeated");
          } while (r.consume(','));
          r.expect('}');
        }
        have_scalars = true;
      } else {
        r.fail("unexpected key \"" + key + "\"");
      }
    } while (r.consume(','));
    r.expect('}');
  }
  if (!r.at_end()) r.fail("text after the object");
  TRIDENT_CHECK(have_format && have_optimizer && have_scalars,
                "OptimizerState::from_json: the object needs \"format\", \"optimizer\" and \"scalars\"");
  return st;
}

// ---------------------------------------------------------------------------
// Optimizer
// ---------------------------------------------------------------------------

void Optimizer::add_group_params(std::vector<Tensor> params, double lr) {
  std::unordered_set<const TensorImpl*> seen;
  for (const Group& g : groups_)
    for (const Tensor& p : g.params) seen.insert(p.impl());
  const int64_t first = num_params();
  for (size_t j = 0; j < params.size(); ++j) {
    const Tensor& p = params[j];
    const int64_t i = first + static_cast<int64_t>(j);
    TRIDENT_CHECK(p.defined(), name(), ": parameter ", i, " is undefined");
    TRIDENT_CHECK(p.is_leaf(), name(), ": parameter ", i, " (shape ", p.sizes(),
                  ") is not a leaf tensor; optimize the leaves the graph starts from");
    TRIDENT_CHECK(p.dtype() == DType::F32 || p.dtype() == DType::F64, name(), ": parameter ", i, " has dtype ",
                  p.dtype(), "; optimizers update f32 or f64 parameters (mixed precision keeps f32 master weights)");
    TRIDENT_CHECK(p.is_contiguous(), name(), ": parameter ", i, " (shape ", p.sizes(), ", strides ", p.strides(),
                  ") is not contiguous");
    TRIDENT_CHECK(seen.insert(p.impl()).second, name(), ": parameter ", i, " (shape ", p.sizes(),
                  ") appears more than once in the parameter groups");
  }
  groups_.push_back(Group{std::move(params), first, lr});
  state_.resize(static_cast<size_t>(first) + groups_.back().params.size());
}

const std::vector<Tensor>& Optimizer::params(size_t group) const {
  TRIDENT_CHECK(group < groups_.size(), name(), ": group ", group, " out of range (", groups_.size(), " groups)");
  return groups_[group].params;
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  out.reserve(state_.size());
  for (const Group& g : groups_) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

double Optimizer::lr(size_t group) const {
  params(group);  // range check
  return group_lr(group);
}

void Optimizer::set_lr(size_t group, double lr) {
  params(group);
  TRIDENT_CHECK(lr >= 0.0, name(), ": learning rate must be >= 0, got ", lr, " for group ", group);
  set_group_lr(group, lr);
}

double Optimizer::initial_lr(size_t group) const {
  params(group);
  return groups_[group].initial_lr;
}

const ParamState& Optimizer::state(int64_t i) const {
  TRIDENT_CHECK(i >= 0 && i < num_params(), name(), ": parameter index ", i, " out of range (", num_params(),
                " parameters)");
  return state_[static_cast<size_t>(i)];
}

bool Optimizer::ensure_slot(ParamState& state, size_t slot, const Tensor& param) {
  if (state.slots.size() <= slot) state.slots.resize(slot + 1);
  if (state.slots[slot].defined()) return false;
  state.slots[slot] = zeros(param.sizes(), TensorOptions(param.dtype()).device(param.device()));
  return true;
}

void Optimizer::step() {
  NoGradGuard no_grad;
  // NOTE [Op profiler]: the whole update is one op, on the device of the first parameter.
  int device = -1;
  if (!groups_.empty() && !groups_[0].params.empty() && groups_[0].params[0].device().is_cuda())
    device = groups_[0].params[0].device().index;
  profiler::Scope scope("optimizer.step", device);
  for (size_t g = 0; g < groups_.size(); ++g) validate(g);
  std::vector<ParamUpdate> items;
  std::vector<Tensor> keep;  // contiguous copies of non-contiguous gradients, alive until the update ran
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Group& group = groups_[g];
    items.clear();
    for (size_t j = 0; j < group.params.size(); ++j) {
      const Tensor& p = group.params[j];
      const Tensor& grad = p.grad();
      if (!grad.defined()) continue;
      const int64_t i = group.first + static_cast<int64_t>(j);
#if !TRIDENT_HAVE_CUDA
      TRIDENT_CHECK(p.device().is_cpu(), name(), ": parameter ", i, " is on ", p.device(),
                    "; this build has only CPU optimizer kernels");
#endif
      TRIDENT_CHECK(grad.device() == p.device(), name(), ": parameter ", i, " is on ", p.device(), " but its gradient on ",
                    grad.device());
      // set_grad keeps shape and dtype equal to the parameter's; the kernels need contiguity.
      items.push_back(ParamUpdate{i, p, grad.is_contiguous() ? grad : grad.contiguous(), &state_[static_cast<size_t>(i)]});
    }
    if (items.empty()) continue;
    for (const ParamUpdate& u : items) ++u.state->step;
    update_group(g, items);
    for (const ParamUpdate& u : items) u.param.bump_version();
  }
}

void Optimizer::update_group(size_t group, std::span<const ParamUpdate> items) {
  for (const ParamUpdate& u : items) {
    TRIDENT_CHECK(u.param.device().is_cpu(), name(), ": parameter ", u.index, " is on ", u.param.device(),
                  "; this optimizer has only CPU kernels");
    update(group, u.index, u.param, u.grad, *u.state);
  }
}

std::vector<Tensor> Optimizer::Batch::params() const {
  std::vector<Tensor> out;
  out.reserve(items.size());
  for (const ParamUpdate* u : items) out.push_back(u->param);
  return out;
}

std::vector<Tensor> Optimizer::Batch::grads() const {
  std::vector<Tensor> out;
  out.reserve(items.size());
  for (const ParamUpdate* u : items) out.push_back(u->grad);
  return out;
}

std::vector<Tensor> Optimizer::Batch::slots(size_t slot) const {
  std::vector<Tensor> out;
  out.reserve(items.size());
  for (const ParamUpdate* u : items) {
    TRIDENT_ASSERT(slot < u->state->slots.size() && u->state->slots[slot].defined(), "parameter ", u->index,
                   " has no buffer ", slot);
    out.push_back(u->state->slots[slot]);
  }
  return out;
}

std::vector<Optimizer::Batch> Optimizer::batches(std::span<const ParamUpdate> items,
                                                 const std::function<int64_t(const ParamUpdate&)>& key) {
  std::vector<Batch> out;
  for (const ParamUpdate& u : items) {
    const int64_t k = key ? key(u) : 0;
    const Device d = u.param.device();
    const DType dt = u.param.dtype();
    auto it = std::find_if(out.begin(), out.end(), [&](const Batch& b) { return b.device == d && b.dtype == dt && b.key == k; });
    if (it == out.end()) it = out.insert(out.end(), Batch{d, dt, k, {}});
    it->items.push_back(&u);
  }
  return out;
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const Group& g : groups_)
    for (Tensor p : g.params) p.zero_grad(set_to_none);
}

OptimizerState Optimizer::state_dict() const {
  OptimizerState out;
  out.optimizer = std::string(name());
  out.scalars["num_groups"] = static_cast<double>(groups_.size());
  const auto slots = slot_names();
  for (size_t g = 0; g < groups_.size(); ++g) {
    out.scalars[detail::group_key(g, "num_params")] = static_cast<double>(groups_[g].params.size());
    out.scalars[detail::group_key(g, "initial_lr")] = groups_[g].initial_lr;
    for (const auto& [key, value] : hyperparameters(g)) out.scalars[key] = value;
  }
  for (size_t i = 0; i < state_.size(); ++i) {
    const ParamState& s = state_[i];
    if (s.step == 0) continue;
    out.scalars[state_key(static_cast<int64_t>(i), "step")] = static_cast<double>(s.step);
    for (size_t k = 0; k < s.slots.size(); ++k)
      if (s.slots[k].defined()) out.tensors[state_key(static_cast<int64_t>(i), slots[k])] = s.slots[k].detach();
  }
  return out;
}

void Optimizer::load_state_dict(const OptimizerState& in) {
  const std::string_view opt = name();
  TRIDENT_CHECK(in.optimizer == opt, "load_state_dict: the state was saved by ", in.optimizer, ", this optimizer is ", opt);
  auto scalar = [&](const std::string& key) -> double {
    const auto it = in.scalars.find(key);
    TRIDENT_CHECK(it != in.scalars.end(), "load_state_dict: ", opt, " state has no \"", key, "\"");
    return it->second;
  };
  const double ngroups = scalar("num_groups");
  TRIDENT_CHECK(ngroups == static_cast<double>(groups_.size()), "load_state_dict: the state has ", ngroups,
                " parameter groups, this ", opt, " has ", groups_.size());
  std::set<std::string> known = {"num_groups"};
  std::vector<double> initial_lr(groups_.size());
  std::vector<std::map<std::string, double>> hparams(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string np = detail::group_key(g, "num_params");
    const double n = scalar(np);
    TRIDENT_CHECK(n == static_cast<double>(groups_[g].params.size()), "load_state_dict: group ", g, " of the state has ",
                  n, " parameters, this ", opt, "'s group ", g, " has ", groups_[g].params.size());
    const std::string il = detail::group_key(g, "initial_lr");
    initial_lr[g] = scalar(il);
    TRIDENT_CHECK(initial_lr[g] >= 0.0, "load_state_dict: \"", il, "\" must be >= 0, got ", initial_lr[g]);
    known.insert(np);
    known.insert(il);
    for (const auto& kv : hyperparameters(g)) {
      known.insert(kv.first);
      hparams[g][kv.first] = scalar(kv.first);
    }
  }

  // Steps and buffers, checked against the parameters, into fresh state.
  const auto slots = slot_names();
  const std::vector<Tensor> params = parameters();
  std::vector<ParamState> fresh(state_.size());
  for (const auto& [key, value] : in.scalars) {
    if (known.count(key)) continue;
    int64_t i = 0;
    std::string_view rest;
    TRIDENT_CHECK(parse_state_key(key, i, rest) && rest == "step", "load_state_dict: unexpected scalar \"", key,
                  "\" in a ", opt, " state");
    TRIDENT_CHECK(i < num_params(), "load_state_dict: \"", key, "\" names parameter ", i, ", but this ", opt, " has ",
                  num_params(), " parameters");
    TRIDENT_CHECK(value >= 1 && value <= 9007199254740992.0 && value == std::floor(value), "load_state_dict: \"", key,
                  "\" must be a positive integer, got ", value);
    fresh[static_cast<size_t>(i)].step = static_cast<int64_t>(value);
  }
  for (const auto& [key, t] : in.tensors) {
    int64_t i = 0;
    std::string_view rest;
    TRIDENT_CHECK(parse_state_key(key, i, rest), "load_state_dict: unexpected tensor \"", key, "\" in a ", opt,
                  " state");
    size_t k = 0;
    while (k < slots.size() && slots[k] != rest) ++k;
    TRIDENT_CHECK(k < slots.size(), "load_state_dict: tensor \"", key, "\": ", opt, " has no buffer named \"", rest,
                  "\"");
    TRIDENT_CHECK(i < num_params(), "load_state_dict: tensor \"", key, "\" names parameter ", i, ", but this ", opt,
                  " has ", num_params(), " parameters");
    const Tensor& p = params[static_cast<size_t>(i)];
    TRIDENT_CHECK(t.defined(), "load_state_dict: tensor \"", key, "\" is undefined");
    TRIDENT_CHECK(t.sizes() == p.sizes(), "load_state_dict: tensor \"", key, "\" has shape ", t.sizes(), ", parameter ",
                  i, " has shape ", p.sizes());
    TRIDENT_CHECK(t.dtype() == p.dtype(), "load_state_dict: tensor \"", key, "\" has dtype ", t.dtype(),
                  ", parameter ", i, " has dtype ", p.dtype());
    ParamState& s = fresh[static_cast<size_t>(i)];
    TRIDENT_CHECK(s.step > 0, "load_state_dict: tensor \"", key, "\" is given but \"", state_key(i, "step"),
                  "\" is not");
    if (s.slots.size() <= k) s.slots.resize(k + 1);
    s.slots[k] = t;  // copied below, once everything is checked
  }

  // Hyperparameters: validated per group; on any failure the old ones come back.
  std::vector<std::map<std::string, double>> old(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) old[g] = hyperparameters(g);
  try {
    for (size_t g = 0; g < groups_.size(); ++g) set_hyperparameters(g, hparams[g]);
    for (size_t g = 0; g < groups_.size(); ++g) {
      for (size_t j = 0; j < groups_[g].params.size(); ++j) {
        const size_t i = static_cast<size_t>(groups_[g].first) + j;
        const ParamState& s = fresh[i];
        if (s.step == 0) continue;
        for (size_t k = 0; k < slots.size(); ++k)
          TRIDENT_CHECK(!slot_used(g, k) || (k < s.slots.size() && s.slots[k].defined()), "load_state_dict: ",
                        opt, " state has \"", state_key(static_cast<int64_t>(i), "step"), "\" but no \"",
                        state_key(static_cast<int64_t>(i), slots[k]), "\", which group ", g,
                        "'s hyperparameters need");
      }
    }
  } catch (...) {
    for (size_t g = 0; g < groups_.size(); ++g) set_hyperparameters(g, old[g]);
    throw;
  }

  for (size_t i = 0; i < fresh.size(); ++i) {
    for (Tensor& t : fresh[i].slots) {
      if (!t.defined()) continue;
      const Tensor& p = params[i];
      Tensor copy = empty(p.sizes(), TensorOptions(p.dtype()).device(p.device()));
      copy_(copy, t);
      t = copy;
    }
  }
  state_ = std::move(fresh);
  for (size_t g = 0; g < groups_.size(); ++g) groups_[g].initial_lr = initial_lr[g];
}

}  // namespace trident::nn::optim
