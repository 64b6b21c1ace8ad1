// Direct depthwise convolution kernels on contiguous f32/f64 buffers (internal to
// ops/cpu/conv.cpp, which chooses them for Conv2dGeometry::depthwise()).
#pragma once

#include "ops/cpu/conv.h"

namespace trident::cpu {

// y [N, O, OH, OW] = x [N, C, H, W] (*) w [O, 1, kH, kW] + bias (may be null).
template <typename T>
void depthwise_forward(const T* x, const T* w, const T* bias, T* y, const Conv2dGeometry& g);
// gx [N, C, H, W] (overwritten) from gy [N, O, OH, OW].
template <typename T>
void depthwise_backward_input(const T* gy, const T* w, T* gx, const Conv2dGeometry& g);
// gw [O, 1, kH, kW] (overwritten), summed over the batch.
template <typename T>
void depthwise_backward_weight(const T* gy, const T* x, T* gw, const Conv2dGeometry& g);

// bf16 tensors on the f32 kernels, a plane at a time (NOTE [bf16 depthwise planes] in
// ops/cpu/conv_depthwise.cpp): the results of the f32 functions above on the tensors converted
// to f32, rounded once to bf16; the weights and bias in f32.
void depthwise_forward(const BFloat16* x, const float* w, const float* bias, BFloat16* y, const Conv2dGeometry& g);
void depthwise_backward_input(const BFloat16* gy, const float* w, BFloat16* gx, const Conv2dGeometry& g);
// The weight gradient's f64 sums [O kH kW] (overwritten), before the f32 route's rounding to f32.
void depthwise_backward_weight_sums(const BFloat16* gy, const BFloat16* x, double* sums, const Conv2dGeometry& g);

}  // namespace trident::cpu
