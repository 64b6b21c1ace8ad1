// The ordered layer list every model exposes, so that a pipeline can cut it into stages.
//
// NOTE [Layer list]: a model is written once as a list of layers (GPT-2: embedding, blocks,
// final norm and head; BERT: embeddings, encoder layers, pooler and heads). The model's own
// forward runs the whole list through LayerList::run, and a pipeline stage runs a contiguous
// range [begin, end) through the very same function, so "whole" and "in stages" are one code
// path and must give the same numbers (tests/models/*_test.cpp check it).
//
//  - Activations: what flows from one layer to the next, a list of tensors (one hidden-state
//    tensor [B, T, C] between blocks; the last layer may return several, BERT's MLM and NSP
//    logits). The first layer receives an empty list and reads its inputs from the batch. This
//    is what a pipeline sends between stages, and what autograd::checkpoint re-materializes
//    (its TensorList in, TensorList out).
//  - Batch: the named inputs of one (micro-)batch ("input_ids", "attention_mask", "targets",
//    ...), every one with the batch on dim 0, so Batch::split cuts them into micro-batches.
//    Every layer may read them (BERT's layers read the attention mask), and the loss reads the
//    targets. Side inputs never need gradients.
//  - Layers are Modules. A layer that is a block of the model (GPT-2's transformer.h.3) is the
//    model's own submodule; a layer made of modules registered elsewhere in the model (GPT-2's
//    embedding layer uses transformer.wte and transformer.wpe) is a view: a Module that
//    registers those same modules as its children, so its parameters() are the stage's
//    parameters, while the model's state dict keeps Hugging Face's names. Views are not in the
//    model's module tree, so the model's train()/eval() reaches their children but not the
//    views themselves: a layer reads the training mode from the modules it wraps, never its own.
//  - Tied parameters (GPT-2's wte in the embedding and the head): the same tensor appears in two
//    layers; LayerList::tied() lists them with the layers that hold them, which is what a
//    pipeline needs to all-reduce their gradients between the first and last stages.
//  - Names: parameter_names(begin, end) gives each parameter of a range its name in the model's
//    state dict, so a stage can save and load its part under the serial (Hugging Face) names.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/node.h"
#include "nn/module.h"

namespace trident::models {

using Activations = autograd::TensorList;

// The named inputs of a batch: every tensor has the batch on dim 0.
class Batch {
 public:
  Batch() = default;
  Batch(std::initializer_list<std::pair<const std::string, Tensor>> tensors);

  // Adds or replaces a tensor (undefined tensors are not stored).
  Batch& set(const std::string& name, const Tensor& t);
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // The tensor, or an undefined one when absent.
  Tensor get(const std::string& name) const;
  // The tensor; throws naming the batch's tensors when absent.
  const Tensor& at(const std::string& name) const;
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }

  // The batch size: dim 0, shared by all tensors (checked); 0 for an empty batch.
  int64_t size() const;
  // Rows [begin, end) of every tensor (views).
  Batch slice(int64_t begin, int64_t end) const;
  // `parts` micro-batches of equal size; parts must divide size() (an error says so).
  std::vector<Batch> split(int64_t parts) const;
  // Every tensor on `d` (the same tensors where they are there already): a loader's host batch
  // on a stage's or a model's GPU.
  Batch to(Device d) const;

 private:
  std::map<std::string, Tensor> tensors_;
};

// One layer of the list (see NOTE [Layer list]).
class Layer : public nn::Module {
 public:
  using nn::Module::Module;
  virtual Activations forward(const Activations& x, const Batch& batch) = 0;
};

struct TiedParameter {
  std::string name;             // its name in the model's state dict
  Tensor tensor;
  std::vector<size_t> layers;   // the layers holding it, ascending (at least two)
};

class LayerList {
 public:
  static constexpr size_t npos = std::numeric_limits<size_t>::max();

  LayerList() = default;
  // Layers with their short names ("embedding", "h.0", ..., "head": for printing, traces and
  // errors). `model` names the parameters (its named_parameters()); every parameter of every
  // layer must be one of the model's.
  LayerList(std::vector<std::pair<std::string, std::shared_ptr<Layer>>> layers, const nn::Module& model);

  size_t size() const { return layers_.size(); }
  const std::shared_ptr<Layer>& operator[](size_t i) const;
  const std::string& name(size_t i) const;

  // Runs layers [begin, end) (end = npos: to the last) on `x`: the model's forward and a
  // pipeline stage both go through here. Errors name the layer that failed.
  Activations run(const Batch& batch, Activations x = {}, size_t begin = 0, size_t end = npos) const;

  // The parameters of layers [begin, end), each tensor once, with their names in the model.
  std::vector<std::pair<std::string, Tensor>> named_parameters(size_t begin = 0, size_t end = npos) const;
  int64_t num_parameters(size_t begin = 0, size_t end = npos) const;
  // Parameters held by more than one layer.
  const std::vector<TiedParameter>& tied() const { return tied_; }

 private:
  void check_range(size_t begin, size_t& end) const;
  std::vector<std::shared_ptr<Layer>> layers_;
  std::vector<std::string> names_;
  // Per layer: (name in the model, tensor) of each parameter.
  std::vector<std::vector<std::pair<std::string, Tensor>>> params_;
  std::vector<TiedParameter> tied_;
};

// NOTE [Stage-only build]: a model's constructor may take the range of its layer list to keep,
// [first, second), for a pipeline stage (or several ranges, LayerSelection, for the chunks of an
// interleaved pipeline's rank). It still builds and initializes every layer in order, so
// the generator makes every draw the whole build makes and the kept layers hold exactly the whole
// model's values, but it releases each tensor no kept layer holds (release_module: a placeholder
// of the same shape and dtype, NOTE [Stage-only model] in parallel/pipeline/pipeline.h) as soon
// as the module holding it is built. Memory then never holds more than the stage and the one
// module being built, and every rank builds at once, where building whole and cutting
// (pipeline::keep_stage) needs the whole model on each rank. The result is what the cut gives.
// AmoebaNet, GPT-2 and BERT take it (AmoebaNet's NOTE [AmoebaNet stage-only build]).
// An interleaved pipeline's rank holds several ranges (its chunks, NOTE [Interleaved schedule] in
// parallel/pipeline/schedule.h): a LayerSelection.
using LayerRange = std::pair<size_t, size_t>;
inline constexpr LayerRange kAllLayers{0, std::numeric_limits<size_t>::max()};
class LayerSelection {
 public:
  LayerSelection(const LayerRange& range) : ranges_{range} {}  // NOLINT(google-explicit-constructor): one range
  explicit LayerSelection(std::vector<LayerRange> ranges) : ranges_(std::move(ranges)) {}
  bool keeps(size_t i) const {
    for (const auto& [b, e] : ranges_)
      if (i >= b && i < e) return true;
    return false;
  }
  const std::vector<LayerRange>& ranges() const { return ranges_; }

 private:
  std::vector<LayerRange> ranges_;
};
// Whether layer i is in `keep`.
inline bool keeps(const LayerSelection& keep, size_t i) { return keep.keeps(i); }
// Checks that `keep` is kAllLayers or non-empty ranges of a list of `layers` layers, ascending and
// disjoint, naming the model.
void check_keep(const LayerSelection& keep, size_t layers, const char* model);
// Releases every parameter and buffer of `m` that is not one already to its placeholder, and gives
// the CPU allocator's free blocks back to the system (the next module is built in them).
void release_module(nn::Module& m);

class LayeredModel;
// The parameter count of each layer of a model whose list is a first layer, `blocks` layers
// alike and a last layer, as its layers().num_parameters(i, i + 1) counts them, from
// build_one(): the same model with one block (built under nn::init::SkipDrawsGuard, so nothing
// is computed, with the default generator left where it was). For a pipeline's cut by
// parameters before a stage-only build.
std::vector<int64_t> layer_parameters_from_one_block(const std::function<std::unique_ptr<LayeredModel>()>& build_one,
                                                     int64_t blocks);

// What the training applications and the pipeline need from a model written as a layer list.
class LayeredModel : public nn::Module {
 public:
  using nn::Module::Module;
  virtual const LayerList& layers() const = 0;
  // Per-term counts of the targets in a batch (GPT-2: one term, the targets that are not
  // ignore_index; BERT: masked tokens, then sentence pairs). See loss().
  virtual std::vector<double> loss_counts(const Batch& batch) const = 0;
  // The loss of the last layer's outputs against the batch's targets: the sum over terms of
  // (sum of per-target losses) / counts[term]. counts defaults to loss_counts(batch), which
  // makes each term the usual mean; a pipeline passes the counts of the whole mini-batch, so the
  // micro-batches' losses (and gradients) add up to exactly the mini-batch's.
  virtual Tensor loss(const Activations& outputs, const Batch& batch, const std::vector<double>& counts = {}) const = 0;
};

}  // namespace trident::models
