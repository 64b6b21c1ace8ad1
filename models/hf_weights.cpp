#include "models/hf_weights.h"

#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "ops/compare.h"
#include "ops/index.h"
#include "ops/reduce.h"

namespace trident::models {

void load_weights(nn::Module& model, const nn::StateDict& source, const std::map<std::string, int64_t>& vocab_rows,
                  const std::string& source_name) {
  const nn::StateDict target = model.state_dict();
  // Compare shapes with the padded rows cut off, and dtypes as the model's (converted below).
  nn::StateDict view_target, view_source;
  for (const auto& [name, t] : target) {
    auto v = vocab_rows.find(name);
    auto s = source.find(name);
    const bool cut = v != vocab_rows.end() && s != source.end() && s->second.dim() >= 1 && s->second.size(0) == v->second &&
                     t.size(0) >= v->second;
    view_target[name] = cut ? narrow(t, 0, 0, v->second) : t;
  }
  for (const auto& [name, s] : source) {
    auto t = target.find(name);
    view_source[name] = t != target.end() && is_floating(s.dtype()) && is_floating(t->second.dtype()) ? s.to(t->second.dtype()) : s;
  }
  NoGradGuard no_grad;
  nn::LoadResult r;
  try {
    r = nn::load_into(view_target, view_source, /*strict=*/true);
  } catch (const Error& e) {
    TRIDENT_FAIL("loading ", source_name, " into ", model.type_name(), ": ", e.message());
  }
  for (const auto& [name, rows] : vocab_rows) {
    const Tensor& t = target.at(name);
    if (t.size(0) > rows) fill_(narrow(t, 0, rows, t.size(0) - rows), 0.0);
  }
}

nn::StateDict unpadded_state_dict(const nn::Module& model, const std::map<std::string, int64_t>& vocab_rows) {
  nn::StateDict sd = model.state_dict();
  for (const auto& [name, rows] : vocab_rows) {
    auto it = sd.find(name);
    TRIDENT_CHECK(it != sd.end(), model.type_name(), " has no tensor '", name, "'");
    it->second = narrow(it->second, 0, 0, rows);
  }
  return sd;
}

bool same_values(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  const Tensor x = a.to(DType::F64), y = b.to(DType::F64);
  return sum(ne(x, y).to(DType::I64)).item<int64_t>() == 0;
}

}  // namespace trident::models
