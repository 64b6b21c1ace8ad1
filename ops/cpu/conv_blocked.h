// Blocked im2col convolution for f32: forward, weight gradient and stride-1 input gradient
// (internal to ops/cpu/conv.cpp, which chooses it; NOTE [Conv2d blocked im2col] in
// ops/cpu/conv_blocked.cpp). Buffers are contiguous.
#pragma once

#include "ops/cpu/conv.h"

namespace trident::cpu {

// y [N, O, OH, OW] = x [N, C, H, W] (*) w [O, C/g, kH, kW] + bias (may be null), any kernel,
// stride, padding and dilation.
void blocked_forward(const float* x, const float* w, const float* bias, float* y, const Conv2dGeometry& g);

// Whether the input gradient can run as the blocked forward convolution of gy with the
// flipped, transposed kernel: stride 1 and padding at most the dilated kernel's reach,
// (k - 1) d - p >= 0 on both axes.
bool blocked_backward_input_applies(const Conv2dGeometry& g);
// gx [N, C, H, W] (overwritten) from gy [N, O, OH, OW].
void blocked_backward_input(const float* gy, const float* w, float* gx, const Conv2dGeometry& g);
// gw [O, C/g, kH, kW] (overwritten), summed over the batch, from gy and x.
void blocked_backward_weight(const float* gy, const float* x, float* gw, const Conv2dGeometry& g);

// Whether the f32 forward pass and weight gradient / the input gradient of this geometry run as
// Winograd F(2, 7) (NOTE [Conv2d Winograd F(2,7)]: 1x7 and 7x1 kernels, stride 1, dilation 1,
// at least 8 input and output channels per group), inside blocked_forward /
// blocked_backward_weight / blocked_backward_input.
bool winograd7_forward_applies(const Conv2dGeometry& g);
bool winograd7_backward_input_applies(const Conv2dGeometry& g);
// Turns F(2, 7) off (false) or on for the tests that compare it with the direct blocked
// kernel; returns the previous setting. Not thread-safe: call it between convolutions.
bool set_conv_winograd7_enabled_for_testing(bool enabled);

}  // namespace trident::cpu
