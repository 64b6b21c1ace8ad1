// Blocked im2col convolution for f32: forward, weight gradient and stride-1 input gradient
// (internal to ops/cpu/conv.cpp, which chooses it; NOTE [Conv2d blocked im2col] in
// ops/cpu/conv_blocked.cpp). Buffers are contiguous.
#pragma once

#include "ops/cpu/conv.h"

namespace trident::cpu {

// NOTE [Blocked or GEMM]: the blocked kernels beat im2col + OpenBLAS sgemm where their
// micro-kernel has the vector width of OpenBLAS's: on AVX2 machines, and on AVX-512 machines
// with the AVX-512 micro-kernel and its 48-wide blocks (NOTE [AVX-512 micro-kernel] in
// ops/cpu/conv_simd.h). Where OpenBLAS runs AVX-512 kernels (SkylakeX, Cooperlake,
// SapphireRapids: NOTE [OpenBLAS core]) but the micro-kernel is the AVX2 one (a compiler without
// the x86-64-v4 target, or the kernel turned off), sgemm does about twice its multiply-adds per
// cycle, so there the f32 convolutions the plain blocked kernels would serve go through im2col
// + GEMM; those under Winograd F(2, 7) (1.75x fewer multiply-adds) stay. Measured on an
// Emerald Rapids Xeon, 3x3 stride 2 8x64x56x56->128, one thread, best of 5 alternating runs
// (ms): forward 8.2-8.6 blocked with 48-wide blocks against 10.5-11.3 by GEMM (14.4 blocked
// with the AVX2 kernel); weight gradient 8.8-9.5 against 9.8-10.9.
// Whether the plain blocked kernels run: yes unless OpenBLAS's kernels are wider than the
// micro-kernel's.
bool blocked_kernels_preferred();
// Forces the choice for tests: 1 blocked, 0 im2col + GEMM, -1 the machine's rule; returns the
// previous setting. Not thread-safe: call it between convolutions.
int set_conv_blocked_preference_for_testing(int mode);

// Forces the blocked forward pass's layout for tests (NOTE [Conv2d dense blocks] in
// ops/cpu/conv_blocked.cpp): 1 dense blocks gathered from the input wherever they can run (not
// for a 1 x k kernel computed on transposed planes), 0 the phase planes, -1 the rule; returns the
// previous setting. Not thread-safe: call it between convolutions.
int set_conv_dense_blocks_for_testing(int mode);

// The AVX-512 micro-kernel (NOTE [AVX-512 micro-kernel] in ops/cpu/conv_simd.h) runs where
// cpu_avx512_kernels() (ops/cpu/isa.h) says; set_cpu_avx512_kernels_enabled_for_testing(false)
// makes the Winograd and blocked kernels use the AVX2 one.

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
