// CPU kernels of conv2d (NCHW). The op (ops/conv.cpp) validates the arguments and fills a
// Conv2dGeometry; these functions trust it. Inputs may have any strides (they are made
// contiguous here) and must be detached; f16/bf16 are computed in f32.
//
// The algorithm is chosen per pass from the geometry and dtype (NOTE [Conv2d algorithms] in
// ops/cpu/conv.cpp): depthwise (direct loops), f32 3x3 stride 1 (Winograd F(4x4, 3x3)),
// pointwise 1x1 / stride 1 / no padding (one GEMM per sample and group, no im2col), other f32
// passes with column stride 1 or 2 on AVX-512 CPUs when the channels fill the vector lanes
// (direct, channels in the lanes), other f32 (blocked im2col with a register-blocked kernel;
// strided input gradients excepted), and everything else (im2col + GEMM).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace trident::cpu {

struct Conv2dGeometry {
  int64_t N = 0, C = 0, H = 0, W = 0;  // input
  int64_t O = 0, kH = 0, kW = 0;       // weight [O, C / groups, kH, kW]
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int64_t groups = 1;
  int64_t OH = 0, OW = 0;  // output

  int64_t in_per_group() const { return C / groups; }
  int64_t out_per_group() const { return O / groups; }
  // groups == C and one input channel per group: out channel o reads input channel o / (O / C).
  bool depthwise() const { return groups == C && C > 0 && O % C == 0 && in_per_group() == 1; }
  // The im2col matrix would be the input itself.
  bool pointwise() const { return kH == 1 && kW == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
  // 1x1 with a stride and no padding: the pointwise convolution of the pixels it samples (NOTE
  // [Strided pointwise convolutions] in ops/cpu/conv.cpp).
  bool sampled_pointwise() const { return kH == 1 && kW == 1 && ph == 0 && pw == 0 && (sh > 1 || sw > 1); }
};

// [N, C, H, W] * [O, C/g, kH, kW] (+ bias [O], may be undefined) -> [N, O, OH, OW].
Tensor conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dGeometry& g);
// Forward and backward side by side: each takes the output gradient gy [N, O, OH, OW].
// d input [N, C, H, W]
Tensor conv2d_backward_input(const Tensor& gy, const Tensor& weight, const Conv2dGeometry& g);
// d weight [O, C/g, kH, kW], summed over the batch.
Tensor conv2d_backward_weight(const Tensor& gy, const Tensor& input, const Conv2dGeometry& g);
// d bias [O]: gy summed over N, OH, OW.
Tensor conv2d_backward_bias(const Tensor& gy);

// The budget (bytes) for the padded copy of the input that the Winograd and blocked im2col
// kernels make: a batch whose copy is larger goes through them in chunks of images. 32 MiB
// unless a test sets another (bytes <= 0 restores the default) to exercise the chunking.
int64_t conv_copy_budget_bytes();
void set_conv_copy_budget_bytes_for_testing(int64_t bytes);

}  // namespace trident::cpu
