#include "models/amoebanet_layers.h"

#include "models/amoebanet_ops.h"
#include "ops/arith.h"
#include "ops/dropout.h"
#include "ops/index.h"
#include "ops/pool.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/unary.h"

namespace trident::models {

AmoebaState AmoebaState::from_tensors(const std::vector<Tensor>& t) {
  TRIDENT_CHECK(t.size() == 3, "AmoebaState::from_tensors: expected 3 tensors {cur, prev, aux}, got ", t.size());
  return {t[0], t[1], t[2]};
}

namespace amoebanet {

namespace {

void check_map(const Tensor& x, Chw expected, const std::string& layer, const char* what) {
  TRIDENT_CHECK(x.defined(), "AmoebaNet ", layer, ": the state's ", what, " is undefined");
  TRIDENT_CHECK(x.dim() == 4 && x.size(1) == expected.c && x.size(2) == expected.h && x.size(3) == expected.w,
                "AmoebaNet ", layer, ": expected ", what, " of shape [N, ", expected.c, ", ", expected.h, ", ", expected.w,
                "], got ", x.sizes());
}

void check_built(const void* layer, const std::string& name) {
  TRIDENT_CHECK(layer != nullptr, "AmoebaNet ", name,
                ": built by a counting LayerBuilder (parameter and memory estimates only); it cannot run");
}

}  // namespace

// ---- Stem ----

Stem::Stem(LayerBuilder& b, Chw img, int64_t filters, int64_t stride) : AmoebaLayer("Stem"), image(img) {
  conv = b.conv(*this, "conv", img, filters, {3, 3}, {stride, stride});
  bn = b.batch_norm(*this, "bn", filters);
  out = {filters, (img.h - 3) / stride + 1, (img.w - 3) / stride + 1};
  TRIDENT_CHECK(img.h >= 3 && img.w >= 3, "AmoebaNet: images of ", img.h, "x", img.w, " are too small for the stem");
  b.keep(img.numel() + out.numel());  // the conv's input, batch norm's input
}

AmoebaState Stem::forward(const AmoebaState& s) {
  check_built(conv.get(), layer_name);
  TRIDENT_CHECK(s.cur.defined() && s.cur.dim() == 4 && s.cur.size(1) == image.c && s.cur.size(2) == image.h &&
                    s.cur.size(3) == image.w,
                "AmoebaNet: expected images of shape [N, ", image.c, ", ", image.h, ", ", image.w, "] (the configured ",
                "in_channels and image_size), got ", s.cur.defined() ? shape_str(s.cur.sizes()) : "an undefined tensor");
  return {bn->forward(conv->forward(s.cur)), Tensor(), s.aux};
}

// ---- Cell ----

Cell::Cell(LayerBuilder& b, const CellGenotype& g, bool red, int64_t f, Chw cur, std::optional<Chw> prev)
    : AmoebaLayer(red ? "ReductionCell" : "NormalCell"), reduction(red), filters(f), cur_in(cur), prev_in(prev),
      concat(g.concat) {
  const int64_t stride = reduction ? 2 : 1;
  // State 1: the previous hidden state brought to the current one's size and width (the
  // reference's _reduce_prev_layer), or cur itself for the first cell.
  Chw p = prev ? *prev : cur;
  if (prev && (prev->h != cur.h || prev->w != cur.w)) {
    TRIDENT_CHECK(ceil_div(prev->h, 2) == cur.h && ceil_div(prev->w, 2) == cur.w, "AmoebaNet: a cell's previous state (",
                  prev->h, "x", prev->w, ") must be the current one's size (", cur.h, "x", cur.w, ") or twice it");
    auto fr = register_module("prev_reduce", std::make_shared<FactorizedReduction>(b, *prev, filters, true));
    p = fr->out;
    prev_reduce = fr;
  } else if (prev && prev->c != filters) {
    auto cb = register_module("prev_reduce",
                              std::make_shared<ConvBn>(b, *prev, filters, Int2{1, 1}, Int2{1, 1}, Int2{0, 0}, true));
    p = cb->out;
    prev_reduce = cb;
  }
  auto base_op = register_module("base", std::make_shared<ConvBn>(b, cur, filters, Int2{1, 1}, Int2{1, 1}, Int2{0, 0}, true));
  base = base_op;
  std::vector<Chw> states{base_op->out, p};
  for (size_t i = 0; i < g.ops.size() / 2; ++i) {
    auto comb = register_module("comb_" + std::to_string(i), std::make_shared<Combination>());
    Chw outs[2];
    for (int side = 0; side < 2; ++side) {
      const size_t j = 2 * i + static_cast<size_t>(side);
      const int in = g.inputs[j];
      // Only the cell's inputs (states 0 and 1) are strided in a reduction cell.
      auto op = make_cell_op(b, states[static_cast<size_t>(in)], filters, g.ops[j], in < 2 ? stride : 1, outs[side]);
      comb->register_module(side == 0 ? "left" : "right", op);
      (side == 0 ? comb->left : comb->right) = op;
      (side == 0 ? comb->left_input : comb->right_input) = in;
    }
    TRIDENT_CHECK(outs[0] == outs[1], "AmoebaNet: combination ", i, " of a ", type_name(), " adds ", g.ops[2 * i].name,
                  " of shape [", outs[0].c, ", ", outs[0].h, ", ", outs[0].w, "] to ", g.ops[2 * i + 1].name, " of shape [",
                  outs[1].c, ", ", outs[1].h, ", ", outs[1].w, "]");
    states.push_back(outs[0]);
    combinations.push_back(comb);
  }
  // The reference's _combine_unused_states: a concatenated state of another shape than the
  // last one is brought to it (a factorized reduction without relu, or a 1x1 conv + bn).
  const Chw last = states.back();
  concat_reduce.resize(concat.size());
  for (size_t j = 0; j < concat.size(); ++j) {
    const Chw s = states[static_cast<size_t>(concat[j])];
    if (s == last) continue;
    const std::string name = "reduce_" + std::to_string(concat[j]);
    if (s.h != last.h || s.w != last.w)
      concat_reduce[j] = register_module(name, std::make_shared<FactorizedReduction>(b, s, last.c, false));
    else
      concat_reduce[j] =
          register_module(name, std::make_shared<ConvBn>(b, s, last.c, Int2{1, 1}, Int2{1, 1}, Int2{0, 0}, false));
  }
  out = {last.c * static_cast<int64_t>(concat.size()), last.h, last.w};
}

AmoebaState Cell::forward(const AmoebaState& s) {
  check_map(s.cur, cur_in, layer_name, "cur");
  TRIDENT_CHECK(s.prev.defined() == prev_in.has_value(), "AmoebaNet ", layer_name, ": built ",
                prev_in ? "with" : "without", " a previous hidden state, but the state ", s.prev.defined() ? "has" : "has none");
  if (prev_in) check_map(s.prev, *prev_in, layer_name, "prev");
  Tensor p = s.prev.defined() ? s.prev : s.cur;
  if (prev_reduce) p = prev_reduce->forward(p);
  std::vector<Tensor> states{base->forward(s.cur), p};
  for (const auto& c : combinations)
    states.push_back(add(c->left->forward(states[static_cast<size_t>(c->left_input)]),
                         c->right->forward(states[static_cast<size_t>(c->right_input)])));
  std::vector<Tensor> parts;
  for (size_t j = 0; j < concat.size(); ++j) {
    const Tensor& h = states[static_cast<size_t>(concat[j])];
    parts.push_back(concat_reduce[j] ? concat_reduce[j]->forward(h) : h);
  }
  return {cat(parts, 1), s.cur, s.aux};
}

std::string Cell::extra_repr() const {
  return detail::str("filters=", filters, ", in=[", cur_in.c, ", ", cur_in.h, ", ", cur_in.w, "], out=[", out.c, ", ", out.h,
                     ", ", out.w, "], concat=", std::vector<int64_t>(concat.begin(), concat.end()));
}

// ---- AuxHead ----

AuxHead::AuxHead(LayerBuilder& b, Chw in, int64_t num_classes, double scaling) : AmoebaLayer("AuxHead") {
  const Chw pooled{in.c, (in.h - 5) / 3 + 1, (in.w - 5) / 3 + 1};
  TRIDENT_CHECK(in.h >= 5 && in.w >= 5, "AmoebaNet: the auxiliary head needs a feature map of at least 5x5 where it is ",
                "attached, got ", in.h, "x", in.w, "; use larger images or no auxiliary head");
  const auto proj_width = static_cast<int64_t>(128 * scaling), conv_width = static_cast<int64_t>(768 * scaling);
  TRIDENT_CHECK(proj_width >= 1 && conv_width >= 1, "AmoebaNet: aux scaling ", scaling, " leaves no channels");
  b.keep(in.numel());  // the first relu's output
  auto p = register_module("proj", std::make_shared<ConvBn>(b, pooled, proj_width, Int2{1, 1}, Int2{1, 1}, Int2{0, 0}, false));
  auto c = register_module("conv", std::make_shared<ConvBn>(b, p->out, conv_width, Int2{pooled.h, pooled.w}, Int2{1, 1},
                                                           Int2{0, 0}, true));
  proj = p;
  conv = c;
  fc = b.linear(*this, "fc", conv_width, num_classes);
  b.keep(conv_width);  // the last relu's output, the linear's input
  out = in;
}

AmoebaState AuxHead::forward(const AmoebaState& s) {
  if (!is_training()) return s;
  check_built(fc.get(), layer_name);
  Tensor h = avg_pool2d(relu(s.cur), {5, 5}, Int2{3, 3});
  h = relu(conv->forward(proj->forward(h)));
  return {s.cur, s.prev, fc->forward(flatten(h, 1))};
}

// ---- Classifier ----

Classifier::Classifier(LayerBuilder& b, Chw in, int64_t num_classes, double p, Generator* gen)
    : AmoebaLayer("Classifier"), dropout(p), generator(gen) {
  TRIDENT_CHECK(p >= 0 && p < 1, "AmoebaNet: dropout must be in [0, 1), got ", p);
  fc = b.linear(*this, "fc", in.c, num_classes);
  b.keep(in.numel() + in.c);  // the relu's output, the linear's input
  out = {num_classes, 1, 1};
}

AmoebaState Classifier::forward(const AmoebaState& s) {
  check_built(fc.get(), layer_name);
  TRIDENT_CHECK(s.cur.defined() && s.cur.dim() == 4 && s.cur.size(1) == fc->in_features, "AmoebaNet ", layer_name,
                ": expected a state of shape [N, ", fc->in_features, ", H, W], got ",
                s.cur.defined() ? shape_str(s.cur.sizes()) : "an undefined tensor");
  Tensor pooled = mean(relu(s.cur), {2, 3});
  return {fc->forward(trident::dropout(pooled, dropout, is_training(), generator)), Tensor(), s.aux};
}

std::string Classifier::extra_repr() const { return detail::str("dropout=", dropout); }

}  // namespace amoebanet
}  // namespace trident::models
