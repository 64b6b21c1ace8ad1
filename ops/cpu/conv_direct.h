// Direct convolution with channels in the vector lanes, for the f32 convolutions of column
// stride 1 or 2 that Winograd does not take, on AVX-512 CPUs (internal to ops/cpu/conv.cpp,
// which chooses it; NOTE [Conv2d direct] in ops/cpu/conv_direct.cpp). Buffers are contiguous.
#pragma once

#include "ops/cpu/conv.h"

namespace trident::cpu {

// Whether the forward pass of this f32 geometry runs as the direct kernel: an AVX-512 CPU with
// the AVX-512 micro-kernel on (set_cpu_avx512_kernels_enabled_for_testing), column stride 1 or
// 2, a multiple of 16 output channels per group, not depthwise or 1x1 unpadded, not a shape of
// Winograd F(4x4, 3x3) or F(2, 7) (winograd_forward_applies, winograd7_forward_applies).
bool direct_forward_applies(const Conv2dGeometry& g);
// y [N, O, OH, OW] = x [N, C, H, W] (*) w [O, C/g, kH, kW] + bias (may be null).
void direct_forward(const float* x, const float* w, const float* bias, float* y, const Conv2dGeometry& g);
// Whether the weight gradient runs as the direct kernel (NOTE [Conv2d direct weight
// gradient]): where the forward pass does, with enough (group, input channel, block of 48
// output channels) items for the threads.
bool direct_backward_weight_applies(const Conv2dGeometry& g);
// gw [O, C/g, kH, kW] (overwritten), summed over the batch, from gy [N, O, OH, OW] and x.
void direct_backward_weight(const float* gy, const float* x, float* gw, const Conv2dGeometry& g);
// Whether the input gradient runs as the direct kernel on gy (NOTE [Conv2d direct input
// gradient]): as the forward pass, with a multiple of 16 input channels per group instead, and
// Winograd's input-gradient shapes left to it.
bool direct_backward_input_applies(const Conv2dGeometry& g);
// gx [N, C, H, W] (overwritten) from gy [N, O, OH, OW].
void direct_backward_input(const float* gy, const float* w, float* gx, const Conv2dGeometry& g);
// Turns the direct kernels off (false) or on, for the tests that compare it with the blocked
// one; returns the previous setting. Not thread-safe: call it between convolutions.
bool set_conv_direct_enabled_for_testing(bool enabled);
// The weights' budget (floats) of a range of channels that a thread's consecutive rows share
// (the forward pass's output channels, the input gradient's input channels); 1 makes every range
// one block of 32 channels, <= 0 restores the default (768 KiB). Returns the previous one.
int64_t set_conv_direct_range_floats_for_testing(int64_t floats);

}  // namespace trident::cpu
