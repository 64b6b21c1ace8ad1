#include "models/amoebanet.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <regex>

#include "autograd/grad_mode.h"
#include "core/allocator.h"
#include "core/factory.h"
#include "models/layer_list.h"
#include "nn/init.h"
#include "ops/arith.h"
#include "ops/loss.h"

namespace trident::models {

using amoebanet::Chw;
using amoebanet::LayerBuilder;

// ---- AmoebaNetConfig ----

AmoebaNetConfig AmoebaNetConfig::from_name(const std::string& name, int64_t num_classes, int64_t image_size,
                                           int64_t in_channels) {
  static const std::regex form(R"(\s*amoebanet-([a-z])\s*\(\s*(\d{1,6})\s*,\s*(\d{1,6})\s*\)\s*)", std::regex::icase);
  std::smatch m;
  TRIDENT_CHECK(std::regex_match(name, m, form), "unknown model '", name,
                "': expected amoebanet-d(L,D) or amoebanet-b(L,D), e.g. amoebanet-d(18,256)");
  AmoebaNetConfig c;
  c.genotype = m[1].str();
  std::transform(c.genotype.begin(), c.genotype.end(), c.genotype.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
  c.num_cells = std::stoll(m[2]);
  c.filters = std::stoll(m[3]);
  c.num_classes = num_classes;
  c.image_size = image_size;
  c.in_channels = in_channels;
  c.stem = image_size < 64 ? Stem::Small : Stem::ImageNet;
  c.validate();
  return c;
}

std::string AmoebaNetConfig::name() const {
  std::string g = genotype;
  std::transform(g.begin(), g.end(), g.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return detail::str("amoebanet-", g, "(", num_cells, ",", filters, ")");
}

std::vector<int64_t> AmoebaNetConfig::reduction_indices() const {
  std::vector<int64_t> r;
  for (int64_t k = 1; k <= num_reduction_layers; ++k) r.push_back(k * num_cells / (num_reduction_layers + 1));
  return r;
}

void AmoebaNetConfig::validate() const {
  amoebanet_genotype(genotype);  // throws for an unknown one
  TRIDENT_CHECK(num_cells >= 1, "AmoebaNet: num_cells (L) must be positive, got ", num_cells);
  TRIDENT_CHECK(filters >= 1, "AmoebaNet: filters (D) must be positive, got ", filters);
  TRIDENT_CHECK(num_classes >= 1, "AmoebaNet: num_classes must be positive, got ", num_classes);
  TRIDENT_CHECK(in_channels >= 1, "AmoebaNet: in_channels must be positive, got ", in_channels);
  TRIDENT_CHECK(image_size >= 3, "AmoebaNet: image_size must be at least 3, got ", image_size);
  TRIDENT_CHECK(stem_filters >= 1, "AmoebaNet: stem_filters must be positive, got ", stem_filters);
  TRIDENT_CHECK(stem_stride >= 0, "AmoebaNet: stem_stride must be >= 0 (0: the stem's default), got ", stem_stride);
  TRIDENT_CHECK(num_reduction_layers >= 0, "AmoebaNet: num_reduction_layers must be >= 0, got ", num_reduction_layers);
  const std::vector<int64_t> r = reduction_indices();
  for (size_t i = 1; i < r.size(); ++i)
    TRIDENT_CHECK(r[i] > r[i - 1], "AmoebaNet: ", num_cells, " normal cells are too few for ", num_reduction_layers,
                  " reduction cells between them (reduction cells would go before cells ", std::vector<int64_t>(r), ")");
  TRIDENT_CHECK(!aux_head || num_reduction_layers >= 2, "AmoebaNet: the auxiliary head sits before the second reduction ",
                "cell, but num_reduction_layers is ", num_reduction_layers);
  TRIDENT_CHECK(!aux_head || aux_scaling > 0, "AmoebaNet: aux_scaling must be positive, got ", aux_scaling);
  TRIDENT_CHECK(dropout >= 0 && dropout < 1, "AmoebaNet: dropout must be in [0, 1), got ", dropout);
  TRIDENT_CHECK(bn_eps > 0 && bn_momentum >= 0 && bn_momentum <= 1, "AmoebaNet: batch norm eps must be positive and ",
                "momentum in [0, 1], got eps ", bn_eps, ", momentum ", bn_momentum);
  TRIDENT_CHECK(is_floating(dtype), "AmoebaNet: dtype must be floating point, got ", dtype);
}

// ---- AmoebaNet ----

AmoebaNet::AmoebaNet(const AmoebaNetConfig& config, Generator* gen) : AmoebaNet(config, gen, true) {}

AmoebaNet::AmoebaNet(const AmoebaNetConfig& config, Generator* gen, const LayerSelection& keep)
    : AmoebaNet(config, gen, true, keep) {
  check_keep(keep, layers_.size(), "AmoebaNet");
}

AmoebaNet::AmoebaNet(const AmoebaNetConfig& c, Generator* gen, bool materialize, const LayerSelection& keep)
    : nn::Module("AmoebaNet"), config_(c), materialized_(materialize) {
  c.validate();
  const Genotype& g = amoebanet_genotype(c.genotype);
  LayerBuilder b({materialize, c.dtype, c.bn_eps, c.bn_momentum, gen});
  // Builds one layer, registers it in order and records what the builder tallied for it.
  auto add = [&](const std::string& name, const std::function<std::shared_ptr<AmoebaLayer>()>& make) {
    const int64_t p0 = b.parameters(), k0 = b.kept(), i0 = b.kept_indices(), m0 = b.multiply_adds();
    // NOTE [Skipped draws]: a layer released at once is built without computing its values.
    const bool kept = !materialize || keeps(keep, layers_.size());
    std::shared_ptr<AmoebaLayer> layer;
    {
      const nn::init::SkipDrawsGuard skip(!kept);
      layer = make();
    }
    layer->layer_name = name;
    register_module(name, layer);
    layers_.push_back(layer);
    info_.push_back({name, layer->type_name(), layer->out, b.parameters() - p0, b.kept() - k0, b.kept_indices() - i0,
                     b.multiply_adds() - m0});
    // NOTE [AmoebaNet stage-only build]: a layer outside the kept range is released at once.
    if (!kept) release_module(*layer);
    return layer;
  };

  const bool imagenet = c.stem == AmoebaNetConfig::Stem::ImageNet;
  Chw cur = add("stem", [&] {
              return std::make_shared<amoebanet::Stem>(b, Chw{c.in_channels, c.image_size, c.image_size}, c.stem_filters,
                                                       c.stem_stride > 0 ? c.stem_stride : (imagenet ? 2 : 1));
            })->out;
  std::optional<Chw> prev;
  auto cell = [&](const std::string& name, bool reduction, int64_t filters) {
    auto layer = add(name, [&] {
      return std::make_shared<amoebanet::Cell>(b, reduction ? g.reduction : g.normal, reduction, filters, cur, prev);
    });
    prev = cur;
    cur = layer->out;
  };
  // The reference's ImageNet stem: two reduction cells at 1/4 and 1/2 of the filters.
  if (imagenet) {
    cell("stem_cell_0", true, c.filters / 4);
    cell("stem_cell_1", true, c.filters / 2);
  }
  const std::vector<int64_t> reductions = c.reduction_indices();
  int64_t filters = c.filters;
  for (int64_t n = 0; n < c.num_cells; ++n) {
    const auto r = std::find(reductions.begin(), reductions.end(), n);
    if (r != reductions.end()) {
      filters *= 2;
      cell("reduction_cell_" + std::to_string(r - reductions.begin()), true, filters);
    }
    cell("cell_" + std::to_string(n), false, filters);
    if (c.aux_head && n == reductions[1] - 1)
      add("aux_head", [&] { return std::make_shared<amoebanet::AuxHead>(b, cur, c.num_classes, c.aux_scaling); });
  }
  add("classifier", [&] { return std::make_shared<amoebanet::Classifier>(b, cur, c.num_classes, c.dropout); });
}

Tensor AmoebaNet::forward(const Tensor& images) { return forward_state(images).cur; }

AmoebaState AmoebaNet::forward(const AmoebaState& state, size_t begin, size_t end) {
  TRIDENT_CHECK(materialized_, "AmoebaNet: this network was built for counting only (amoebanet_plan) and cannot run");
  TRIDENT_CHECK(begin <= end && end <= layers_.size(), "AmoebaNet: layer range [", begin, ", ", end,
                ") is not within the ", layers_.size(), " layers");
  AmoebaState s = state;
  for (size_t i = begin; i < end; ++i) s = layers_[i]->forward(s);
  return s;
}

// ---- plans, memory, names, loss ----

AmoebaNetPlan amoebanet_plan(const AmoebaNetConfig& config) {
  AmoebaNet counted(config, nullptr, false);
  AmoebaNetPlan plan{config, counted.layer_info(), 0, 0};
  for (const AmoebaLayerInfo& l : plan.layers) {
    plan.parameters += l.parameters;
    plan.multiply_adds += l.multiply_adds;
  }
  return plan;
}

AmoebaNetMemory amoebanet_memory(const AmoebaNetConfig& config, int optimizer_slots, DType activation_dtype, bool on_cpu) {
  TRIDENT_CHECK(optimizer_slots >= 0, "amoebanet_memory: optimizer_slots must be >= 0, got ", optimizer_slots);
  const AmoebaNetPlan plan = amoebanet_plan(config);
  const auto param_size = static_cast<int64_t>(itemsize(config.dtype));
  AmoebaNetMemory m;
  m.parameters = plan.parameters;
  m.parameter_bytes = m.gradient_bytes = plan.parameters * param_size;
  m.optimizer_bytes = optimizer_slots * m.parameter_bytes;
  for (const AmoebaLayerInfo& l : plan.layers)
    m.activation_bytes_per_image +=
        l.activation_elements * static_cast<int64_t>(itemsize(activation_dtype)) + l.index_elements * (on_cpu ? 1 : 8);
  return m;
}

namespace {
std::string bytes_str(int64_t b) {
  char buf[32];
  const double d = static_cast<double>(b);
  if (d >= 1024.0 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f GiB", d / (1024.0 * 1024 * 1024));
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", d / (1024.0 * 1024));
  return buf;
}
}  // namespace

std::string AmoebaNetMemory::str(int64_t batch) const {
  return detail::str("parameters ", parameters, ": ", bytes_str(parameter_bytes), "\ngradients: ", bytes_str(gradient_bytes),
                     "\noptimizer state: ", bytes_str(optimizer_bytes), "\nactivations: ",
                     bytes_str(activation_bytes_per_image), " per image, ", bytes_str(batch * activation_bytes_per_image),
                     " for a batch of ", batch, "\ntotal: ", bytes_str(total_bytes(batch)));
}

std::shared_ptr<AmoebaNet> build_amoebanet(const std::string& name, int64_t num_classes, int64_t image_size,
                                           int64_t in_channels, Generator* gen) {
  return std::make_shared<AmoebaNet>(AmoebaNetConfig::from_name(name, num_classes, image_size, in_channels), gen);
}

Tensor amoebanet_loss(const AmoebaState& output, const Tensor& labels, double aux_weight, double label_smoothing) {
  CrossEntropyOptions o;
  o.label_smoothing = label_smoothing;
  Tensor loss = cross_entropy(output.cur, labels, o);
  if (output.aux.defined() && aux_weight != 0) loss = add(loss, mul(cross_entropy(output.aux, labels, o), aux_weight));
  return loss;
}

}  // namespace trident::models
