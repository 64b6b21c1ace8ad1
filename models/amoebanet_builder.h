// The one construction path of AmoebaNet, able to run dry.
//
// NOTE [AmoebaNet dry build]: every AmoebaNet module is built by constructors that take a
// LayerBuilder and the per-image shape of their input, and that create their leaf layers
// (Conv2d, BatchNorm2d, Linear) only through the builder. A materializing builder creates and
// registers the layers; a counting builder creates none, yet tallies the same parameters and
// the same activations. The module tree (cells, operations) is built either way, with its
// shapes, so the counts of a 1.8-billion-parameter network come from the very code that
// would build it, in milliseconds and without its 7 GB. Nothing may allocate a parameter
// outside the builder, and a counting-built module must never run (its forward throws).
// tests/models/amoebanet_test.cpp checks that both modes agree exactly on small networks.
//
// NOTE [AmoebaNet activation memory]: alongside parameters the builder tallies, per image,
// the activation elements Trident's autograd keeps from forward to backward, following what
// each op saves: relu keeps its output (which is also the next conv's input), conv its input,
// batch norm its input, max pooling its argmaxes (byte taps on the CPU, i64 indices on a GPU:
// NOTE [Max pooling by taps]), linear its input; additions,
// concatenations, average pooling, dropout (its mask is regenerated) and the mean keep
// nothing. Modules call keep() for each tensor so kept, where they know whether it is new.
//
// NOTE [AmoebaNet multiply-adds]: the builder also tallies, per image, the multiply-adds of the
// forward's convolutions and linear layers (a convolution knows its input's shape, so its
// output's), the work that model FLOPs count (NOTE [MFU] in apps/mfu.h: a training step is 3
// forwards' worth, 2 FLOPs per multiply-add); pooling, batch norm, activations and additions are
// left out, as the FLOP counts of the literature leave them out.
#pragma once

#include <memory>
#include <string>

#include "core/dtype.h"
#include "core/rng.h"
#include "nn/conv2d.h"
#include "nn/linear.h"
#include "nn/normalization.h"

namespace trident::models::amoebanet {

// The shape of one image's feature map.
struct Chw {
  int64_t c = 0, h = 0, w = 0;
  int64_t numel() const { return c * h * w; }
  bool operator==(const Chw&) const = default;
};

// ceil(n / s): the reference pads 'SAME', so a stride-s layer maps n to ceil(n / s).
inline int64_t ceil_div(int64_t n, int64_t s) { return (n + s - 1) / s; }

struct LayerBuilderOptions {
  bool materialize = true;
  DType dtype = DType::F32;
  double bn_eps = 1e-3;
  double bn_momentum = 0.1;
  Generator* gen = nullptr;  // initialization draws; the default generator when null
};

class LayerBuilder {
 public:
  explicit LayerBuilder(LayerBuilderOptions options) : opt_(options) {}
  bool materialize() const { return opt_.materialize; }

  // Leaf layers, registered on `owner` as `name` and returned when materializing; null when
  // counting. Either way their parameters (and multiply-adds) are tallied. Convolutions have no
  // bias and He-normal fan-out weights (the reference's variance_scaling_initializer(mode='FAN_OUT'));
  // `input` is the per-image shape of the convolution's input (its channels are `in`).
  std::shared_ptr<nn::Conv2d> conv(nn::Module& owner, const std::string& name, Chw input, int64_t out, Int2 kernel,
                                   Int2 stride = {1, 1}, Int2 padding = {0, 0}, int64_t groups = 1);
  // Batch norm with weight and bias (the reference's scale=True, center=True), eps and momentum
  // from the options.
  std::shared_ptr<nn::BatchNorm2d> batch_norm(nn::Module& owner, const std::string& name, int64_t channels);
  // Linear with bias, PyTorch's initialization.
  std::shared_ptr<nn::Linear> linear(nn::Module& owner, const std::string& name, int64_t in, int64_t out);

  // NOTE [AmoebaNet activation memory]: per-image elements kept for backward.
  void keep(int64_t elements) { kept_ += elements; }
  void keep_indices(int64_t elements) { kept_indices_ += elements; }

  int64_t parameters() const { return parameters_; }
  int64_t kept() const { return kept_; }
  int64_t kept_indices() const { return kept_indices_; }
  // NOTE [AmoebaNet multiply-adds]: per image, forward.
  int64_t multiply_adds() const { return multiply_adds_; }

 private:
  LayerBuilderOptions opt_;
  int64_t parameters_ = 0, kept_ = 0, kept_indices_ = 0, multiply_adds_ = 0;
};

}  // namespace trident::models::amoebanet
