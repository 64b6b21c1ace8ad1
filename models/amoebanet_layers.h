// The layers of AmoebaNet's ordered list (stem, cells, auxiliary head, classifier) and the
// state they pass along.
//
// NOTE [AmoebaNet stage state]: a cell reads the two previous hidden states, not only the
// last one, so the unit passed from layer to layer (and from pipeline stage to pipeline stage)
// is an AmoebaState of three tensors, each [N, C, H, W] unless said otherwise:
//   cur   the images before the stem, then the latest hidden state, and after the classifier
//         the logits [N, num_classes];
//   prev  the hidden state before cur; undefined right after the stem (the first cell then
//         uses cur for both, as the reference does);
//   aux   the auxiliary head's logits [N, num_classes] from the moment it ran (training only),
//         carried through the later layers untouched; undefined otherwise.
// A layer maps a state to the next one: a cell returns {its output, its input cur, aux}. A
// pipeline cutting the list sends the defined tensors of the state across a stage boundary
// (tensors() lists them in a fixed order) and receives gradients for each of them.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/amoebanet_builder.h"
#include "models/amoebanet_genotype.h"
#include "nn/module.h"

namespace trident::models {

struct AmoebaState {
  Tensor cur, prev, aux;
  // {cur, prev, aux}, undefined ones included, so positions are stable.
  std::vector<Tensor> tensors() const { return {cur, prev, aux}; }
  static AmoebaState from_tensors(const std::vector<Tensor>& t);
};

// One entry of the ordered layer list.
class AmoebaLayer : public nn::Module {
 public:
  using nn::Module::Module;
  virtual AmoebaState forward(const AmoebaState& s) = 0;
  // The per-image shape of cur after this layer ({num_classes, 1, 1} for the classifier).
  amoebanet::Chw out;
  // The name the model registered it under ("cell_3"), for error messages.
  std::string layer_name;
};

namespace amoebanet {

// conv 3x3 (stride 2 for ImageNet, 1 for the small stem; 'VALID', no bias) from the image
// channels to `filters`, batch norm. Children "conv", "bn". Checks the image shape.
class Stem : public AmoebaLayer {
 public:
  Stem(LayerBuilder& b, Chw image, int64_t filters, int64_t stride);
  AmoebaState forward(const AmoebaState& s) override;
  Chw image;
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
};

// Two operations and the sum of their results: the reference's comb_iter_i.
class Combination : public nn::Module {
 public:
  Combination() : nn::Module("Combination") {}
  int left_input = 0, right_input = 0;
  std::shared_ptr<nn::UnaryModule> left, right;
};

// A normal (stride 1) or reduction (stride 2 on the cell inputs) cell of `filters` channels
// per state, from the reference's BaseCell. Children: "prev_reduce" (when the previous state's
// shape differs from the current one's: a factorized reduction if its size differs, else a
// relu-1x1-bn), "base" (relu-1x1-bn of cur), "comb_0" ... "comb_4", and "reduce_<k>" for a
// concatenated state whose shape differs from the last state's.
class Cell : public AmoebaLayer {
 public:
  // prev: the shape of the previous hidden state, or none for the first cell after the stem.
  Cell(LayerBuilder& b, const CellGenotype& genotype, bool reduction, int64_t filters, Chw cur, std::optional<Chw> prev);
  AmoebaState forward(const AmoebaState& s) override;
  bool reduction;
  int64_t filters;
  Chw cur_in;
  std::optional<Chw> prev_in;
  std::vector<int> concat;
  std::shared_ptr<nn::UnaryModule> prev_reduce, base;
  std::vector<std::shared_ptr<Combination>> combinations;
  std::vector<std::shared_ptr<nn::UnaryModule>> concat_reduce;  // per concat entry, may be null

 protected:
  std::string extra_repr() const override;
};

// The auxiliary classifier (training only; evaluation passes the state through): relu, 5x5
// average pool of stride 3 ('VALID'), 1x1 conv to int(128 s) + batch norm ("proj"), relu, a conv
// covering the whole remaining map to int(768 s) + batch norm ("conv"), relu, linear ("fc"),
// with s the aux scaling. Writes state.aux.
class AuxHead : public AmoebaLayer {
 public:
  AuxHead(LayerBuilder& b, Chw in, int64_t num_classes, double scaling);
  AmoebaState forward(const AmoebaState& s) override;
  std::shared_ptr<nn::UnaryModule> proj, conv;
  std::shared_ptr<nn::Linear> fc;
};

// relu, global average pool, dropout, linear ("fc"): state.cur becomes the logits and prev is
// dropped. Dropout draws from `generator` (the default one when null).
class Classifier : public AmoebaLayer {
 public:
  Classifier(LayerBuilder& b, Chw in, int64_t num_classes, double dropout, Generator* generator = nullptr);
  AmoebaState forward(const AmoebaState& s) override;
  double dropout;
  Generator* generator;
  std::shared_ptr<nn::Linear> fc;

 protected:
  std::string extra_repr() const override;
};

}  // namespace amoebanet
}  // namespace trident::models
