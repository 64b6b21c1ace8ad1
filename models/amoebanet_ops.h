// The operations inside AmoebaNet cells, as the TensorFlow TPU reference stacks them
// (network_utils.py). Each is built from a LayerBuilder and the per-image shape of its input
// (NOTE [AmoebaNet dry build]) and exposes the shape of its output as `out`. Inputs are NCHW;
// every forward checks nothing beyond what the ops check, since cells feed them the shapes they
// were built for.
//
// Padding: the reference pads 'SAME', which maps a size n to ceil(n / stride); we pad
// symmetrically (k / 2 on both sides of an odd kernel), which gives the same sizes. For stride
// 2 on an even size the reference puts its one padding row at the bottom and we put one on
// each side, so window positions differ by a pixel there (torchgpipe makes the same choice).
#pragma once

#include <memory>
#include <vector>

#include "models/amoebanet_builder.h"
#include "models/amoebanet_genotype.h"
#include "nn/module.h"

namespace trident::models::amoebanet {

// [relu ->] conv (no bias) -> batch norm. Children "conv", "bn".
class ConvBn : public nn::UnaryModule {
 public:
  ConvBn(LayerBuilder& b, Chw in, int64_t out_channels, Int2 kernel, Int2 stride, Int2 padding, bool pre_relu);
  Tensor forward(const Tensor& x) override;
  Chw out;
  bool pre_relu;
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;

 protected:
  std::string extra_repr() const override;
};

// The reference's factorized_reduction at stride 2: halves the height and width without
// dropping the odd pixels. [relu ->] one 1x1 stride-2 conv of x and one of x shifted by a
// pixel (zero-padded at the bottom and right), each to out_channels / 2, concatenated, batch
// norm. Children "path1_conv", "path2_conv" (given the shifted map's stride-2 samples, so a
// stride-1 conv: NOTE [Factorized reduction's second path]), "bn". out_channels must be even.
class FactorizedReduction : public nn::UnaryModule {
 public:
  FactorizedReduction(LayerBuilder& b, Chw in, int64_t out_channels, bool pre_relu);
  Tensor forward(const Tensor& x) override;
  Chw out;
  bool pre_relu;
  std::shared_ptr<nn::Conv2d> path1_conv, path2_conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
};

// "3x3" and "1x7_7x1". With filters / 4 >= 1: a relu-1x1-bn bottleneck to filters / 4
// ("pre"), the convolution ("conv_3x3", or "conv_1x7" and "conv_7x1", each relu-conv-bn), and a
// relu-1x1-bn back to filters ("post"); without, only the convolution at full width. The
// stride applies to the 3x3 (or to the width of the 1x7 and the height of the 7x1).
class BottleneckConv : public nn::UnaryModule {
 public:
  BottleneckConv(LayerBuilder& b, Chw in, int64_t filters, const CellOpSpec& op, int64_t stride);
  Tensor forward(const Tensor& x) override;
  Chw out;
  std::shared_ptr<ConvBn> pre, conv_a, conv_b, post;  // conv_b only for 1xk-kx1; pre/post may be null
};

// "separable_KxK_N": N blocks of relu -> depthwise KxK (stride on the first block only) ->
// pointwise 1x1 to filters -> batch norm. Children "separable_1" ... "separable_N", each with
// "depthwise", "pointwise", "bn".
class SeparableConv : public nn::UnaryModule {
 public:
  SeparableConv(LayerBuilder& b, Chw in, int64_t filters, int64_t kernel, int64_t repeats, int64_t stride);
  Tensor forward(const Tensor& x) override;
  Chw out;

  struct Block : nn::Module {
    Block() : nn::Module("SeparableBlock") {}
    std::shared_ptr<nn::Conv2d> depthwise, pointwise;
    std::shared_ptr<nn::BatchNorm2d> bn;
  };
  std::vector<std::shared_ptr<Block>> blocks;
};

// Max or average pooling (average excludes the padding, as 'SAME' pooling does), followed by a
// 1x1 conv and batch norm ("proj", no relu) when the input does not have `filters` channels.
// A 2x2 pool needs stride 2 (it is only ever applied to the cell inputs of a reduction cell).
class PoolOp : public nn::UnaryModule {
 public:
  PoolOp(LayerBuilder& b, Chw in, int64_t filters, const CellOpSpec& op, int64_t stride);
  Tensor forward(const Tensor& x) override;
  Chw out;
  bool max;
  int64_t kernel, stride, padding;
  std::shared_ptr<ConvBn> proj;

 protected:
  std::string extra_repr() const override;
};

// Builds one cell operation applied at `stride` to an input of shape `in`, producing `filters`
// channels. "none" is the identity when neither the stride nor the channels change, and a
// relu-1x1-bn (strided) otherwise. `out` receives the output shape.
std::shared_ptr<nn::UnaryModule> make_cell_op(LayerBuilder& b, Chw in, int64_t filters, const CellOpSpec& op,
                                              int64_t stride, Chw& out);

}  // namespace trident::models::amoebanet
