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
// The same sums in f64 before any rounding, continued from `sums` [O kH kW]: the batch in chunks
// (NOTE [bf16 depthwise convolutions] in ops/cpu/conv.cpp) gives, chunk after chunk, the very
// sums (the same additions in the same order) of one call over the whole batch.
void depthwise_backward_weight_sums(const float* gy, const float* x, double* sums, const Conv2dGeometry& g);

}  // namespace trident::cpu
