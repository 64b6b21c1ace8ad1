#include "models/amoebanet_layered.h"

#include "ops/arith.h"
#include "ops/loss.h"

namespace trident::models {

namespace {

// One AmoebaLayer as a Layer of the list: a view registering the network's layer as its only
// child (NOTE [Layer list]: views read the training mode from what they wrap).
class AmoebaLayerView : public Layer {
 public:
  AmoebaLayerView(std::shared_ptr<AmoebaLayer> layer, bool first) : Layer("AmoebaLayerView"), layer_(layer), first_(first) {
    register_module("layer", layer);
  }
  Activations forward(const Activations& x, const Batch& batch) override {
    AmoebaState s;
    if (first_) {
      TRIDENT_CHECK(x.empty(), "AmoebaNet ", layer_->layer_name, ": the first layer reads the batch's images, but got ",
                    x.size(), " activations");
      s.cur = batch.at("images");
    } else {
      TRIDENT_CHECK(x.size() == 3, "AmoebaNet ", layer_->layer_name, ": expected the state {cur, prev, aux}, got ",
                    x.size(), " activations");
      s = AmoebaState::from_tensors(x);
    }
    return layer_->forward(s).tensors();
  }

 private:
  std::shared_ptr<AmoebaLayer> layer_;
  bool first_;
};

}  // namespace

AmoebaNetLayered::AmoebaNetLayered(std::shared_ptr<AmoebaNet> net, double aux_weight, double label_smoothing)
    : LayeredModel("AmoebaNetLayered"), net_(std::move(net)), aux_weight_(aux_weight), label_smoothing_(label_smoothing) {
  TRIDENT_CHECK(net_ != nullptr, "AmoebaNetLayered: no network given");
  TRIDENT_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "AmoebaNetLayered: label_smoothing must be in [0, 1], got ",
                label_smoothing);
  std::vector<std::pair<std::string, std::shared_ptr<Layer>>> views;
  for (size_t i = 0; i < net_->size(); ++i) {
    const std::shared_ptr<AmoebaLayer>& l = net_->layers()[i];
    register_module(l->layer_name, l);
    views.emplace_back(l->layer_name, std::make_shared<AmoebaLayerView>(l, i == 0));
  }
  layers_ = LayerList(std::move(views), *this);
}

std::vector<double> AmoebaNetLayered::loss_counts(const Batch& batch) const {
  const Tensor& labels = batch.at("labels");
  TRIDENT_CHECK(labels.dtype() == DType::I64 && labels.dim() == 1, "AmoebaNet: labels must be i64 [N], got ",
                labels.dtype(), " ", labels.sizes());
  return {static_cast<double>(labels.size(0))};
}

Tensor AmoebaNetLayered::loss(const Activations& outputs, const Batch& batch, const std::vector<double>& counts) const {
  TRIDENT_CHECK(outputs.size() == 3, "AmoebaNet loss: expected the state {logits, prev, aux}, got ", outputs.size(),
                " activations");
  const Tensor& labels = batch.at("labels");
  const std::vector<double> n = counts.empty() ? loss_counts(batch) : counts;
  TRIDENT_CHECK(n.size() == 1, "AmoebaNet loss: expected 1 label count, got ", n.size());
  CrossEntropyOptions o;
  o.reduction = Reduction::Sum;
  o.label_smoothing = label_smoothing_;
  Tensor total = cross_entropy(outputs[0], labels, o);
  if (outputs[2].defined() && aux_weight_ != 0) total = add(total, mul(cross_entropy(outputs[2], labels, o), aux_weight_));
  return div(total, n[0]);
}

}  // namespace trident::models
