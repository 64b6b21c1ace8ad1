// AmoebaNet-D(L, D) and AmoebaNet-B(L, D) as GPipe trained them: the TensorFlow TPU reference
// implementation's network (tensorflow/tpu models/official/amoeba_net), written out of nn/
// modules and exposed as an ordered list of layers that a pipeline can cut.
//
// Layout (the reference's _build_network_base): L normal cells in total, in three stacks
// separated by reduction cells placed before normal cells int(L/3) and int(2L/3); normal cells
// of stack s have D * 2^s filters per hidden state (a reduction cell doubles them). A normal
// cell outputs 4 states (concatenation [0, 3, 4, 6]), so the classifier of AmoebaNet-D(L, D)
// sees 16 D channels.
//   ImageNet stem: conv 3x3 / 2 'VALID' to stem_filters (32) + batch norm, then two reduction
//     cells of D/4 and D/2 filters ("stem_cell_0", "stem_cell_1"). 224 -> 111 -> 56 -> 28,
//     then 28, 14, 7 for the three stacks (331 -> 83 -> ... -> 11; 480 -> ... -> 15).
//   Small stem (the reference's basic stem, for CIFAR and Fashion-MNIST): conv 3x3 / 1
//     'VALID' + batch norm, no stem cells. 32 -> 30, then 30, 15, 8.
//   Classifier: relu, global average pool, dropout, linear.
//   Auxiliary head (optional, training only): after normal cell int(2L/3) - 1.
//
// The ordered layers: "stem", ["stem_cell_0", "stem_cell_1"], "cell_0" ... with
// "reduction_cell_0" and "reduction_cell_1" before the normal cells they precede, ["aux_head"]
// after its cell, "classifier". Each is an AmoebaLayer mapping an AmoebaState (NOTE [AmoebaNet
// stage state]) to the next; parameter names are "<layer>.<...>", e.g.
// "cell_0.comb_1.right.pre.conv.weight", "classifier.fc.weight".
//
// Parameter counts (AmoebaNet-D on 1000 classes; see tests/models/amoebanet_test.cpp and the
// report for how they meet GPipe's Table 1): (18, 208) 81,781,529 with the auxiliary head,
// (18, 416) 318,270,652, (72, 512) 1,843,378,372. They are computed without allocating
// anything by amoebanet_plan() (NOTE [AmoebaNet dry build]).
//
// Deviations from the reference, all without effect on parameter counts: no drop-path; batch
// norm momentum 0.1 by default (the reference's decay 0.9997 is bn_momentum = 0.0003); 'SAME'
// padding is symmetric (see models/amoebanet_ops.h); weights are He-normal by PyTorch's fan-out.
#pragma once

#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "models/amoebanet_layers.h"
#include "models/layer_list.h"

namespace trident::models {

struct AmoebaNetConfig {
  enum class Stem { ImageNet, Small };

  std::string genotype = "D";      // "D" or "B" (models/amoebanet_genotype.h)
  int64_t num_cells = 18;          // L: normal cells over the three stacks
  int64_t filters = 256;           // D: filters of the first stack's cells
  int64_t num_classes = 1000;
  int64_t image_size = 224;        // square images
  int64_t in_channels = 3;
  Stem stem = Stem::ImageNet;
  int64_t stem_filters = 32;       // the reference's stem_reduction_size
  // The stem convolution's stride; 0 means the stem's own (2 for ImageNet, 1 for Small). A
  // small stem of stride 2 quarters the work on 28x28 or 32x32 images (28 -> 13, then 13, 7, 4).
  int64_t stem_stride = 0;
  int64_t num_reduction_layers = 2;
  bool aux_head = false;
  double aux_scaling = 0.4;
  double dropout = 0.5;            // the reference's dense_dropout_keep_prob 0.5
  double bn_eps = 1e-3;
  double bn_momentum = 0.1;
  DType dtype = DType::F32;

  // Parses "amoebanet-d(18,256)" or "AmoebaNet-B(18, 512)" (case and spaces free). The stem is
  // Small when image_size < 64, ImageNet otherwise. Throws naming the bad name.
  static AmoebaNetConfig from_name(const std::string& name, int64_t num_classes = 1000, int64_t image_size = 224,
                                   int64_t in_channels = 3);
  // "amoebanet-d(18,256)".
  std::string name() const;
  // Throws trident::Error naming the first bad field.
  void validate() const;
  // The normal cells before which reduction cells come (the reference's calc_reduction_layers).
  std::vector<int64_t> reduction_indices() const;
};

// One layer of the ordered list, as built: what a pipeline needs to balance stages without
// running anything.
struct AmoebaLayerInfo {
  std::string name;
  std::string type;          // "Stem", "NormalCell", "ReductionCell", "AuxHead", "Classifier"
  amoebanet::Chw out;        // per-image shape of the state's cur after the layer
  int64_t parameters = 0;
  // Per image, what autograd keeps for backward (NOTE [AmoebaNet activation memory]):
  int64_t activation_elements = 0;  // in the activation dtype
  int64_t index_elements = 0;       // max pooling's argmaxes (a byte each on the CPU, i64 on a GPU)
  // NOTE [AmoebaNet multiply-adds]: per image, in the forward (the auxiliary head's in
  // training only, as it runs).
  int64_t multiply_adds = 0;
};

struct AmoebaNetPlan {
  AmoebaNetConfig config;
  std::vector<AmoebaLayerInfo> layers;
  int64_t parameters = 0;
  int64_t multiply_adds = 0;  // per image, forward in training (all layers)
};

// The layers, shapes, parameter and activation counts of a configuration, from a counting
// build (NOTE [AmoebaNet dry build]): no tensor is allocated, so the largest networks are fine.
AmoebaNetPlan amoebanet_plan(const AmoebaNetConfig& config);
inline int64_t amoebanet_num_parameters(const AmoebaNetConfig& config) { return amoebanet_plan(config).parameters; }

// Training memory for --dry-run, in bytes: parameters and gradients in the config's dtype,
// optimizer state as `optimizer_slots` tensors per parameter (SGD with momentum 1, RMSProp with
// momentum and Adam(W) 2), activations kept for backward per image with activations in
// `activation_dtype` (f32, or bf16/f16 under autocast). An estimate: it leaves out the
// transient buffers of forward and backward (gradients of activations, workspaces).
struct AmoebaNetMemory {
  int64_t parameters = 0;
  int64_t parameter_bytes = 0, gradient_bytes = 0, optimizer_bytes = 0;
  int64_t activation_bytes_per_image = 0;
  int64_t total_bytes(int64_t batch) const {
    return parameter_bytes + gradient_bytes + optimizer_bytes + batch * activation_bytes_per_image;
  }
  // A few lines: each part in MiB/GiB, and the total for `batch`.
  std::string str(int64_t batch) const;
};
// On the CPU max pooling keeps a byte per output for its backward, on a GPU an i64 index
// (NOTE [Max pooling by taps] in ops/cpu/pool.cpp).
AmoebaNetMemory amoebanet_memory(const AmoebaNetConfig& config, int optimizer_slots = 2,
                                 DType activation_dtype = DType::F32, bool on_cpu = true);

class AmoebaNet : public nn::Module {
 public:
  // Builds and initializes the network (initialization draws from gen, the default generator
  // when null; dropout draws from the default generator).
  explicit AmoebaNet(const AmoebaNetConfig& config, Generator* gen = nullptr);
  // NOTE [AmoebaNet stage-only build]: the same network, but the parameters and buffers of the
  // layers outside `keep` are released to placeholders (release_to_placeholder:
  // their shape and dtype, NaN, one element of memory) as soon as each such layer is built. Every
  // layer is still built and initialized in order, so the kept layers hold exactly the values of
  // the whole network's (the generator makes every draw it would), while the memory never holds
  // more than the kept layers and the one layer being built. For a pipeline stage: the cut
  // Pipeline (or keep_stage) would make, without the whole network ever in memory (NOTE
  // [Stage-only build] in models/layer_list.h). keep {0, SIZE_MAX} (models::kAllLayers) builds
  // the whole network; any other ranges must be non-empty ranges of the layers (several: an
  // interleaved pipeline's chunks).
  AmoebaNet(const AmoebaNetConfig& config, Generator* gen, const LayerSelection& keep);

  // images [N, in_channels, image_size, image_size] -> logits [N, num_classes].
  Tensor forward(const Tensor& images);
  // Layers [begin, end) of the ordered list applied to a state: a pipeline stage.
  // forward(images) == forward({images, {}, {}}, 0, size()).cur.
  AmoebaState forward(const AmoebaState& state, size_t begin, size_t end);
  // The whole network on images, keeping the auxiliary logits (state.aux) in training.
  AmoebaState forward_state(const Tensor& images) { return forward(AmoebaState{images, {}, {}}, 0, layers_.size()); }

  size_t size() const { return layers_.size(); }
  const std::vector<std::shared_ptr<AmoebaLayer>>& layers() const { return layers_; }
  const std::vector<AmoebaLayerInfo>& layer_info() const { return info_; }
  const AmoebaNetConfig& config() const { return config_; }

 private:
  friend AmoebaNetPlan amoebanet_plan(const AmoebaNetConfig& config);
  AmoebaNet(const AmoebaNetConfig& config, Generator* gen, bool materialize,
            const LayerSelection& keep = kAllLayers);

  AmoebaNetConfig config_;
  std::vector<std::shared_ptr<AmoebaLayer>> layers_;
  std::vector<AmoebaLayerInfo> info_;
  bool materialized_;
};

// Builds from a name: build_amoebanet("amoebanet-d(18,256)", 1000, 224).
std::shared_ptr<AmoebaNet> build_amoebanet(const std::string& name, int64_t num_classes, int64_t image_size,
                                           int64_t in_channels = 3, Generator* gen = nullptr);

// The reference's training loss: cross-entropy of the logits, plus aux_weight (0.4) times that
// of the auxiliary logits when the state has them. labels: i64 [N].
Tensor amoebanet_loss(const AmoebaState& output, const Tensor& labels, double aux_weight = 0.4,
                      double label_smoothing = 0.0);

}  // namespace trident::models
