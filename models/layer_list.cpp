#include "models/layer_list.h"

#include <unordered_map>

#include "autograd/grad_mode.h"
#include "core/allocator.h"
#include "core/factory.h"
#include "nn/init.h"
#include "ops/index.h"

namespace trident::models {

void check_keep(const LayerSelection& keep, size_t layers, const char* model) {
  if (keep.ranges().size() == 1 && keep.ranges().front() == kAllLayers) return;
  TRIDENT_CHECK(!keep.ranges().empty(), model, ": no layers to keep");
  size_t after = 0;  // the previous range's end
  for (const auto& [first, second] : keep.ranges()) {
    TRIDENT_CHECK(first < second && second <= layers && first >= after, model, ": layers [", first, ", ", second,
                  ") to keep are not a non-empty range of the ", layers, " layers",
                  keep.ranges().size() > 1 ? " after the ranges before it" : "");
    after = second;
  }
}

std::vector<int64_t> layer_parameters_from_one_block(const std::function<std::unique_ptr<LayeredModel>()>& build_one,
                                                     int64_t blocks) {
  const nn::init::SkipDrawsGuard skip;  // counts only: no values needed
  // Modules that draw from the default generator (nn::Embedding's own init) would move it:
  // counting leaves it where it was (dropout draws from it).
  const PhiloxState default_state = default_generator().state();
  const std::unique_ptr<LayeredModel> m = build_one();
  default_generator().set_state(default_state);
  const LayerList& l = m->layers();
  TRIDENT_CHECK(l.size() == 3, "layer_parameters_from_one_block: the model built with one block has ", l.size(),
                " layers, not 3");
  std::vector<int64_t> counts(static_cast<size_t>(blocks), l.num_parameters(1, 2));
  counts.insert(counts.begin(), l.num_parameters(0, 1));
  counts.push_back(l.num_parameters(2, 3));
  return counts;
}

void release_module(nn::Module& m) {
  NoGradGuard no_grad;
  for (Tensor t : m.parameters()) release_to_placeholder(t);
  for (Tensor t : m.buffers()) release_to_placeholder(t);
  empty_cache(kCPU);
}

// ---- Batch ----

Batch::Batch(std::initializer_list<std::pair<const std::string, Tensor>> tensors) {
  for (const auto& [name, t] : tensors) set(name, t);
}

Batch& Batch::set(const std::string& name, const Tensor& t) {
  if (t.defined())
    tensors_[name] = t;
  else
    tensors_.erase(name);
  return *this;
}

Tensor Batch::get(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? Tensor() : it->second;
}

const Tensor& Batch::at(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    std::vector<std::string> names;
    for (const auto& [n, t] : tensors_) names.push_back(n);
    TRIDENT_FAIL("batch has no tensor '", name, "' (it has ", names, ")");
  }
  return it->second;
}

int64_t Batch::size() const {
  int64_t n = -1;
  std::string first;
  for (const auto& [name, t] : tensors_) {
    TRIDENT_CHECK(t.dim() >= 1, "batch tensor '", name, "' has no batch dim (shape ", t.sizes(), ")");
    if (n < 0) {
      n = t.size(0);
      first = name;
    }
    TRIDENT_CHECK(t.size(0) == n, "batch tensors disagree on the batch size: '", first, "' has ", n, ", '", name,
                  "' has shape ", t.sizes());
  }
  return n < 0 ? 0 : n;
}

Batch Batch::slice(int64_t begin, int64_t end) const {
  const int64_t n = size();
  TRIDENT_CHECK(0 <= begin && begin <= end && end <= n, "Batch::slice: rows [", begin, ", ", end,
                ") out of range for a batch of ", n);
  Batch out;
  for (const auto& [name, t] : tensors_) out.set(name, narrow(t, 0, begin, end - begin));
  return out;
}

std::vector<Batch> Batch::split(int64_t parts) const {
  const int64_t n = size();
  TRIDENT_CHECK(parts > 0 && n % parts == 0, "Batch::split: ", parts, " micro-batches do not divide the batch of ", n);
  std::vector<Batch> out;
  const int64_t m = n / parts;
  for (int64_t i = 0; i < parts; ++i) out.push_back(slice(i * m, (i + 1) * m));
  return out;
}

Batch Batch::to(Device d) const {
  Batch out;
  for (const auto& [name, t] : tensors_) out.set(name, t.device() == d ? t : t.to(d));
  return out;
}

// ---- LayerList ----

LayerList::LayerList(std::vector<std::pair<std::string, std::shared_ptr<Layer>>> layers, const nn::Module& model) {
  for (auto& [name, layer] : layers) {
    names_.push_back(name);
    layers_.push_back(std::move(layer));
  }
  std::unordered_map<const TensorImpl*, std::string> model_names;
  for (const auto& [name, t] : model.named_parameters()) model_names.emplace(t.impl(), name);
  std::unordered_map<const TensorImpl*, size_t> tied_index;
  std::unordered_map<const TensorImpl*, size_t> first_layer;
  for (size_t i = 0; i < layers_.size(); ++i) {
    TRIDENT_CHECK(layers_[i] != nullptr, "LayerList: layer ", i, " is null");
    std::vector<std::pair<std::string, Tensor>> ps;
    for (const auto& [local, t] : layers_[i]->named_parameters()) {
      auto it = model_names.find(t.impl());
      TRIDENT_CHECK(it != model_names.end(), "LayerList: parameter '", local, "' of layer ", i, " (", names_[i],
                    ") is not a parameter of the model ", model.type_name());
      ps.emplace_back(it->second, t);
      auto [pos, fresh] = first_layer.emplace(t.impl(), i);
      if (fresh) continue;
      auto [ti, new_tie] = tied_index.emplace(t.impl(), tied_.size());
      if (new_tie) tied_.push_back({it->second, t, {pos->second}});
      tied_[ti->second].layers.push_back(i);
    }
    params_.push_back(std::move(ps));
  }
}

const std::shared_ptr<Layer>& LayerList::operator[](size_t i) const {
  TRIDENT_CHECK(i < layers_.size(), "LayerList: layer ", i, " out of range for ", layers_.size(), " layers");
  return layers_[i];
}

const std::string& LayerList::name(size_t i) const {
  TRIDENT_CHECK(i < names_.size(), "LayerList: layer ", i, " out of range for ", names_.size(), " layers");
  return names_[i];
}

void LayerList::check_range(size_t begin, size_t& end) const {
  if (end == npos) end = layers_.size();
  TRIDENT_CHECK(begin <= end && end <= layers_.size(), "LayerList: range [", begin, ", ", end,
                ") out of range for ", layers_.size(), " layers");
}

Activations LayerList::run(const Batch& batch, Activations x, size_t begin, size_t end) const {
  check_range(begin, end);
  for (size_t i = begin; i < end; ++i) {
    try {
      x = layers_[i]->forward(x, batch);
    } catch (const Error& e) {
      TRIDENT_FAIL("layer ", i, " (", names_[i], "): ", e.message());
    }
  }
  return x;
}

std::vector<std::pair<std::string, Tensor>> LayerList::named_parameters(size_t begin, size_t end) const {
  check_range(begin, end);
  std::vector<std::pair<std::string, Tensor>> out;
  std::unordered_map<const TensorImpl*, bool> seen;
  for (size_t i = begin; i < end; ++i)
    for (const auto& p : params_[i])
      if (seen.emplace(p.second.impl(), true).second) out.push_back(p);
  return out;
}

int64_t LayerList::num_parameters(size_t begin, size_t end) const {
  int64_t n = 0;
  for (const auto& [name, t] : named_parameters(begin, end)) n += t.numel();
  return n;
}

}  // namespace trident::models
