// AmoebaNet as a LayeredModel (NOTE [Layer list]), so that a pipeline can cut it into stages.
//
// AmoebaNetLayered wraps a built AmoebaNet: each of its ordered layers (stem, cells, auxiliary
// head, classifier) becomes one layer of a LayerList, and the activations between layers are
// the AmoebaState (NOTE [AmoebaNet stage state]) as three tensors {cur, prev, aux}, undefined
// ones included so positions are stable (prev is undefined right after the stem, aux before the
// auxiliary head). A pipeline sends the defined ones across a stage boundary (NOTE [Pipeline
// step]: undefined activations travel as a mark in the shape header only).
//
// The batch: "images" (floating [N, in_channels, S, S], read by the stem) and "labels" (i64 [N],
// read by the loss). The wrapper registers the network's layers under their own names, so its
// state dict and parameter names are the network's ("cell_0.base.conv.weight").
//
// Loss: the network's training loss (amoebanet_loss) in the LayeredModel form, one count term
// (the number of labels): (sum of cross-entropies of the logits + aux_weight * sum of those of
// the auxiliary logits, when the state has them) / count. Micro-batches given the mini-batch's
// count add up to the mini-batch loss.
//
// Batch norm under micro-batches normalizes each micro-batch by its own statistics (as GPipe);
// see NOTE [Deferred batch norm] (nn/normalization.h) for running statistics over the
// mini-batch.
#pragma once

#include <memory>
#include <vector>

#include "models/amoebanet.h"
#include "models/layer_list.h"

namespace trident::models {

class AmoebaNetLayered : public LayeredModel {
 public:
  // `net` must be materialized (not a counting build). aux_weight: the auxiliary loss's weight;
  // label_smoothing: cross_entropy's, for both terms (in [0, 1]).
  explicit AmoebaNetLayered(std::shared_ptr<AmoebaNet> net, double aux_weight = 0.4, double label_smoothing = 0.0);

  const LayerList& layers() const override { return layers_; }
  std::vector<double> loss_counts(const Batch& batch) const override;
  Tensor loss(const Activations& outputs, const Batch& batch, const std::vector<double>& counts = {}) const override;

  AmoebaNet& net() { return *net_; }

 private:
  std::shared_ptr<AmoebaNet> net_;
  double aux_weight_, label_smoothing_;
  LayerList layers_;
};

}  // namespace trident::models
