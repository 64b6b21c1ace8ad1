// NOTE [AMX direct convolution]: bf16 convolutions of one group (3x3, 1x1, AmoebaNet's 1x7 and
// 7x1, any stride and dilation) on AMX tiles without an im2col matrix. Every tap of a stride-1
// convolution reads the zero-padded input planes at a fixed offset: with the planes' rows
// Wp = W + 2 pw (rounded up to even) apart and the output computed on the same padded grid (the
// columns past OW are computed and dropped), output pixel q = oh Wp + ow reads input pixel
// q + kh dh Wp + kw dw for tap (kh, kw). So a run of 16 output pixels is a run of 16 input
// pixels, and a tile of the input can be loaded straight from the planes once they are laid out
// the way TDPBF16PS reads its second operand: channel pairs interleaved, [C/2][pixels][2]. With a
// stride (sh, sw) the padded input is first split into sh sw phase planes (phase (a, b) holds the
// padded pixels (i sh + a, j sw + b)); tap (kh, kw) then reads phase (kh dh % sh, kw dw % sw) at
// offset (kh dh / sh) Wp + kw dw / sw, Wp now a phase plane's row pitch, and the rest is the
// same. A 32 x 32 block of (output channels, output pixels) sums, in four f32 tiles, the
// weights' tiles [taps][O][C] against the input's tiles at each tap's offset, over all taps and
// channels, and is rounded once into the NCHW output (+ the bias). Threads take blocks in the
// order (image, pixels, channels), so a block of the input serves every block of output
// channels from cache, unless the packed weights exceed 1.5 MB: then the output-channel blocks
// go in equal groups of at most that much, outermost, so that each group's weights are read
// from memory once instead of once per block of pixels (8x512x7x7 -> 512 3x3 forward, 4.7 MB of
// weights: 3.17-3.19 -> 2.30-2.34 ms). The input gradient of a
// stride-1 convolution is the same kind of convolution of gy, zero-padded by (k - 1) d - p, with
// the weights transposed and turned by 180 degrees (when p <= (k - 1) d, true of every "same" or
// "valid" padding). A strided convolution's input gradient (or one padded further) goes by phases
// of gx: padded input row P = i sh + a receives gy row i - u from every tap kh with
// kh dh = u sh + a, so phase a of gx is a stride-1 convolution of gy, zero-padded by
// U = (kH - 1) dh / sh, over the taps of that phase alone at offsets U - u (likewise for
// columns); each phase's pass writes its rows and columns of gx (column step 2 by masked stores
// to every other element), a pixel no tap reaches is zero, and the taps add up to the forward
// pass's: 3x3 stride 2 runs 4 + 2 + 2 + 1 taps. The weight
// gradient sums, per tap and over every image and pixel, the input's (phase) planes at the tap's
// offset (A: 16 channels x 32 pixels, plain planes) against gy with pairs of pixels interleaved
// ([pixels/2][O][2], zero on the dropped columns): 32 x 32 blocks of (input channels, output
// channels) per tap. Channels are padded to multiples of 32 with zeros; images go in chunks whose
// laid-out copies fit the convolutions' copy budget (conv_copy_budget_bytes). Every sum is in
// f32 in a fixed order, whatever the threads. Grouped convolutions and the AVX512-BF16 kernel take
// im2col + the bf16 GEMM (NOTE [bf16 convolutions] in ops/cpu/conv.cpp).
//
// Padding, and the dropped columns, enter the sums as zeros: an infinite weight (forward or
// input gradient) or input (weight gradient) there makes NaN as it does in every im2col + GEMM
// convolution's forward pass.
//
// NOTE [AMX shifted columns]: on small maps the padded grid wastes much of the tile work: a 3x3
// on 7 x 7 maps computes rows of Wp = 10 pixels for 7 outputs, 70 pixels rounded up to three
// blocks of 32 for 49 outputs. A stride-1 pass may instead lay the input out as kW copies, copy s
// the padded planes shifted left by s dw columns and cut to Wout (rounded up to even) columns;
// tap (kh, kw) then reads copy kw at kh dh rows down, and the computed grid is Hout x Wout, two
// blocks for 7 x 7. It costs kW copies of the input for the blocks it saves, so it is taken
// where the tile steps saved, (blocks saved) kH kW out_p per input channel and image, are at least
// 16 (kW - 1) times the pixels of a copy (from two measured points: on 8x512x7x7 -> 512 3x3 it
// made the forward pass 1.74-1.79 -> 1.56-1.69 ms and forward + backward 6.4-6.9 -> 6.0-6.3; taken
// for every stride-1 pass that saved a quarter of the blocks, AmoebaNet-D(6, 32)'s bf16 step was
// 2.5% slower, its 1x7 of 32 channels on 15 x 15 maps copying its input seven times for little
// work). The forward pass, the stride-1 input gradient and the weight gradient choose it alike.
//
// NOTE [AMX pointwise blocks]: a 1x1 of stride 1 without padding (and a strided one, on its
// sampled pixels) runs its images' pixels as one row, and where its input has at most 256
// channels (padded) the forward pass and input gradient lay out each block of 32 pixels of input
// where it is used, in a buffer of the thread's, for every block of output channels in turn,
// instead of a pair-interleaved copy of the whole input written and read back: bf16 32x32x30x30
// -> 32 forward + backward 1.0-1.2 -> 0.87 ms, 32x128x30x30 -> 64 3.8-3.9 -> 3.1-3.3, 8x256x28x28
// -> 256 3.0-3.2 -> 2.8. Wider inputs keep the whole copy: a block then reads a line from each of
// 512 or more channel rows, and 8x256x56x56 -> 512 stride 2 (its input gradient's gy has 512
// channels) took 8.5-8.8 ms with the whole copy, 9.6-10.7 block by block.
#pragma once

#include "core/half.h"
#include "ops/cpu/conv.h"

namespace trident::cpu {

// Whether the direct kernels take this bf16 convolution's passes (AMX chosen, NOTE [AMX bf16
// GEMM]; one group).
bool amx_conv_applies(const Conv2dGeometry& g);

// Forces the direct kernels' shifted columns (NOTE [AMX shifted columns]) on (1: every stride-1
// pass with kW > 1 whose computed pixels they do not increase) or off (0), or back to their rule
// (-1); returns the previous mode. For tests and measurements.
int set_amx_shifted_columns_for_testing(int mode);
// Whether the forward pass of g lays its input out in shifted columns. For tests.
bool amx_conv_shifts_columns(const Conv2dGeometry& g);

// Contiguous NCHW bf16 tensors; bias may be null.
void amx_conv_forward(const BFloat16* x, const BFloat16* w, const BFloat16* bias, BFloat16* y, const Conv2dGeometry& g);
void amx_conv_backward_input(const BFloat16* gy, const BFloat16* w, BFloat16* gx, const Conv2dGeometry& g);
void amx_conv_backward_weight(const BFloat16* gy, const BFloat16* x, BFloat16* gw, const Conv2dGeometry& g);

}  // namespace trident::cpu
