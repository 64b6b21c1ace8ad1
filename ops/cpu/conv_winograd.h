// Winograd F(4x4, 3x3) convolution kernels for f32 (internal to ops/cpu/conv.cpp, which chooses
// them; NOTE [Conv2d Winograd] in ops/cpu/conv_winograd.cpp). Buffers are contiguous.
#pragma once

#include "ops/cpu/conv.h"

namespace trident::cpu {

// Whether the f32 forward pass of this geometry runs as Winograd: 3x3, stride 1, dilation 1,
// not depthwise, enough channels per group and an output large enough that the 4x4 tiles
// save at least half the multiplications.
bool winograd_forward_applies(const Conv2dGeometry& g);
// Likewise for the input gradient, a stride-1 3x3 convolution of gy with the flipped,
// transposed kernel and padding 2 - p (so p <= 2 on both axes).
bool winograd_backward_input_applies(const Conv2dGeometry& g);

// y [N, O, OH, OW] = x [N, C, H, W] (*) w [O, C/g, 3, 3] + bias (may be null).
void winograd_forward(const float* x, const float* w, const float* bias, float* y, const Conv2dGeometry& g);
// gx [N, C, H, W] (overwritten) from gy [N, O, OH, OW].
void winograd_backward_input(const float* gy, const float* w, float* gx, const Conv2dGeometry& g);
// gw [O, C/g, 3, 3] (overwritten), summed over the batch, from gy and x, where the forward
// applies (the same tiles of the output).
void winograd_backward_weight(const float* gy, const float* x, float* gw, const Conv2dGeometry& g);

}  // namespace trident::cpu
