// 2-D convolution, differentiable (PyTorch's torch.nn.functional.conv2d, NCHW).
//
//   input  [N, C, H, W] (or unbatched [C, H, W], which gives an unbatched result)
//   weight [O, C / groups, kH, kW]
//   bias   [O], or an undefined Tensor for none
//   result [N, O, OH, OW], OH = (H + 2 ph - dh (kH - 1) - 1) / sh + 1 (floor), OW likewise.
//
// Input channel c of group g = c / (C / groups) meets the output channels of that group,
// o in [g O / groups, (g + 1) O / groups). groups == C with weight.size(1) == 1 is a depthwise
// convolution (O = C times a channel multiplier); it has its own direct kernel.
//
// Dtypes: f32 and f64; f16 and bf16 inputs are computed in f32 and the result rounded once.
// input, weight and bias must share dtype and device. On a CUDA device: f32, f16 and bf16 through
// cuDNN (NOTE [cuDNN convolutions] in ops/cuda/conv.h); f64 is an Error there.
//
// Errors (trident::Error, the message names the shapes and the offending parameter):
// input not 3-D/4-D, weight not 4-D, bias not [O]; groups < 1, or not dividing C or O;
// C != weight.size(1) * groups; stride or dilation < 1; padding < 0; a (dilated) kernel
// larger than the padded input.
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace trident {

// (height, width) pairs: stride, padding, dilation, kernel and output sizes.
using Int2 = std::array<int64_t, 2>;

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), Int2 stride = {1, 1},
              Int2 padding = {0, 0}, Int2 dilation = {1, 1}, int64_t groups = 1);

}  // namespace trident
