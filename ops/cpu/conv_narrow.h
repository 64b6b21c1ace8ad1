// NOTE [Narrow weight gradients]: the weight gradient of a convolution with few channels, as a
// small AmoebaNet has them (8 to 32 channels: AmoebaNet-D(6, 32)'s 1x7 and 7x1 convolutions
// reduce 32 channels to 8), is a tiny matrix (O x C kH kW: 8 x 56) summed over a long batch of
// pixels (N OH OW: 28800). The GEMM-shaped kernels waste most of their work there: the blocked
// im2col and Winograd F(2, 7) kernels run blocks of 4 x 48 sums, AMX blocks of 32 x 32 per tap,
// so 8 x 8 channels fill an eighth to a sixteenth of them (the f32 1x7 weight gradient of
// 32x8x30x30 -> 8 took 1.4 ms, 19 GFLOP/s, PyTorch's whole forward + backward 1.2 ms).
// Here the pixels go in the vector lanes instead: with gy laid out at the zero-padded input's
// row pitch Wp (zeros on the Wp - OW columns between output rows) and the input zero-padded,
// tap (kh, kw) of output pixel q reads input pixel q + kh dh Wp + kw dw, so each sum
// gw[o][c][t] is a dot product of two contiguous rows at a fixed offset. A block of 4 output
// channels x 6 (input channel, tap) pairs (AVX-512; 2 x 6 with AVX2) keeps its 24 sums in
// registers while 4 rows of gy and 6 of the input stream past, 10 loads for 24 multiply-adds.
// Work items are bands of about kBandPixels output pixels (whole rows) of one image, which a
// thread copies (converting bf16 to f32) into buffers that stay in cache for all of the item's
// blocks; each item's f32 sums go to a buffer of partial results, added in f64 in item order,
// so the result does not depend on the threads, and rounded once (to f32, then to bf16 for a
// bf16 pass: the products of bf16 values are exact in f32, as on the AMX route).
// Taken for stride-1 convolutions of one group where it measured faster (2-core AMX Xeon, the
// weight gradient alone, 32 images; AVX-512 and, with TRIDENT_CPU_AVX512=off, AVX2):
// - f32 with more than one tap and O C <= 256: 8 -> 8 channels 1x7 at 30x30 7.5x (AVX2 2.5x),
//   8 -> 32 3.6x, 32 -> 8 2.0x, 16 -> 16 at 15x15 2.5x (AVX2 0.95x), 3 -> 32 3x3 at 224x224
//   1.3x; 32 -> 32 1x7 at 8x8 0.71x and 3x3 at 15x15 0.78x are left to the others, and so are
//   1x1 convolutions (a GEMM without im2col: 0.3-0.6x here);
// - bf16 with O C <= 128 (against AMX's 32 x 32 blocks): 8 -> 8 1x7 3.1x, 4 -> 4 3x3 10x,
//   16 -> 8 3x3 1.65x, 3 -> 32 3x3 at 224x224 1.7x; 8 -> 32 1x7 0.74x and 16 -> 16 0.7-0.78x
//   are not.
// Like every fixed-offset layout here, the dropped columns multiply zeros of gy by input
// pixels, so an infinite input makes NaN where im2col's gradient is infinite.
#pragma once

#include "core/half.h"
#include "ops/cpu/conv.h"

namespace trident::cpu {

// Whether the narrow kernel takes this weight gradient, of f32 or (bf16) of bf16 tensors on a
// bf16 GEMM kernel.
bool narrow_backward_weight_applies(const Conv2dGeometry& g, bool bf16);

// Contiguous NCHW gy and x; gw [O][C][kH][kW].
void narrow_backward_weight(const float* gy, const float* x, float* gw, const Conv2dGeometry& g);
void narrow_backward_weight(const BFloat16* gy, const BFloat16* x, BFloat16* gw, const Conv2dGeometry& g);

// Forces the narrow kernel on (1: every stride-1 convolution of one group) or off (0), or back to
// its rule (-1); returns the previous mode. For tests and measurements.
int set_narrow_backward_weight_for_testing(int mode);

}  // namespace trident::cpu
