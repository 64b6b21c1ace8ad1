// Blocked im2col convolution for f32: forward, weight gradient and stride-1 input gradient
// (internal to ops/cpu/conv.cpp, which chooses it; NOTE [Conv2d blocked im2col] in
// ops/cpu/conv_blocked.cpp). Buffers are contiguous.
#pragma once

#include "ops/cpu/conv.h"

namespace trident::cpu {

// NOTE [Blocked or GEMM]: the blocked kernels multiply with an 8-lane (AVX2) micro-kernel, at
// about the FMA units' AVX2 peak; that beat im2col + OpenBLAS on the AVX2 machines they were
// tuned on. Where OpenBLAS runs AVX-512 kernels (SkylakeX, Cooperlake, SapphireRapids: NOTE
// [OpenBLAS core]), its sgemm does about twice the multiply-adds per cycle, and im2col + GEMM
// is the faster f32 route for everything but the Winograd F(4x4, 3x3) convolutions (measured on
// a 2-thread Emerald Rapids Xeon, four alternating rounds: 3x3 stride 2 8x64x56x56->128 forward
// 5.0-6.6 ms against 6.9-9.5, forward + backward 13.4-18.0 against 18.4-30.9; 1x7 forward +
// backward 18.7-20.6 against 25.4-34.8; 7x1 forward 6.2-7.0 against 6.9-7.6). So there the
// blocked kernels, and F(2, 7) inside them, step aside. The choice is made once per process.
// Whether the blocked kernels (and F(2, 7)) run: yes unless OpenBLAS runs AVX-512 kernels.
bool blocked_kernels_preferred();
// Forces the choice for tests: 1 blocked, 0 im2col + GEMM, -1 the machine's rule; returns the
// previous setting. Not thread-safe: call it between convolutions.
int set_conv_blocked_preference_for_testing(int mode);

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
