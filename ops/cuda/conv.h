// CUDA kernels of conv2d: the contracts of ops/cpu/conv.h (same signatures, Conv2dGeometry
// validated by ops/conv.cpp), on tensors on a CUDA device in f32, f16 and bf16 (an Error for
// f64, NOTE [CUDA dtypes]). Inputs may have any layout (made contiguous NCHW first); results are
// contiguous, in the inputs' dtype. Each tensor must have fewer than 2^31 elements (cuDNN's
// legacy descriptors take int sizes): larger ones are an Error naming the shape.
//
// NOTE [cuDNN convolutions]: forward, input gradient and weight gradient are cuDNN's legacy
// convolution calls (cudnnConvolutionForward / BackwardData / BackwardFilter, still in cuDNN 9)
// with compute type f32 for every dtype. Math: f16 and bf16 run on tensor cores; f32 runs on FMA
// units (CUDNN_FMA_MATH) unless TF32 is allowed by cuda::set_allow_tf32 (ops/cuda/linalg.h, the
// switch matmul uses), and then may use TF32 tensor cores (CUDNN_DEFAULT_MATH), never a
// down-conversion to 16 bits (CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION). Bias add and bias
// gradient are small kernels of ours (conv_bias.cu): a grid-stride add, and one block per output
// channel summing in f32 in a fixed order.
//
// Algorithms come from cuDNN's heuristics (cudnnGetConvolution*Algorithm_v7), asked once per
// (device, dtype, math, input and weight shapes, stride, padding, dilation, groups, pass) and
// cached per thread with the descriptors. Heuristics, not cudnnFind*: Find times every algorithm
// on the device, which synchronizes inside an op and needs exclusive use of the GPU to give stable
// answers; the heuristics cost microseconds and choose the same algorithm on every run. The
// heuristics are asked with the precision's math type on the descriptor (FMA, DEFAULT or
// TENSOR_OP), but each candidate carries the math type cuDNN ranked it under, which need not be
// that one: cuDNN lists tensor-op and default versions of the same algorithm, so the reported
// math is a property of the candidate, not an echo of the request. A filter that kept only
// candidates reporting the requested math could drop every fast one and leave the general
// algorithm. So (rank_conv_algorithms, ops/cuda/conv_algo.h, tested on made-up lists): the
// candidates that cuDNN reports as supported and whose workspace fits kMaxWorkspaceBytes (512 MiB)
// are tried in cuDNN's order, those whose math the precision allows first, under their own math;
// then the others under the requested math (the descriptor's math type, not the report, is what
// keeps f32 off TF32). The first pair cuDNN sizes a workspace for is kept, and its math type is
// set on the descriptor before every call. Both backward passes prefer the best-ranked
// *deterministic* candidates, so training repeats bit for bit (their non-deterministic algorithms
// accumulate with atomics). That costs little: the fast implicit-GEMM tensor-core algorithms are
// deterministic; the ones skipped are mostly the atomics-based ALGO_0 variants. Only when cuDNN
// returns no usable candidate is a general algorithm used (forward IMPLICIT_GEMM, backward
// ALGO_1). The workspace is a tensor from the caching allocator on the current stream, freed
// after the call (the next op on the stream reuses it).
#pragma once

#include "core/tensor.h"
#include "ops/cpu/conv.h"

namespace trident::cuda {

using cpu::Conv2dGeometry;

// [N, C, H, W] * [O, C/g, kH, kW] (+ bias [O], may be undefined) -> [N, O, OH, OW].
Tensor conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dGeometry& g);
// d input [N, C, H, W] from gy [N, O, OH, OW].
Tensor conv2d_backward_input(const Tensor& gy, const Tensor& weight, const Conv2dGeometry& g);
// d weight [O, C/g, kH, kW], summed over the batch.
Tensor conv2d_backward_weight(const Tensor& gy, const Tensor& input, const Conv2dGeometry& g);
// d bias [O]: gy summed over N, OH, OW (f32 sums, one block per channel, fixed order).
Tensor conv2d_backward_bias(const Tensor& gy);

// ---- introspection for tests ----
// How many times this process has asked cuDNN's heuristics for an algorithm (one per new key and
// pass; a cached key asks nothing).
int64_t conv_algorithm_queries();
// Forgets the calling thread's cached descriptors and algorithms.
void clear_conv_algorithm_cache();

// ---- internal (ops/cuda/conv.cpp uses it; defined in conv_bias.cu) ----
// y [N, O, *] contiguous += b [O] contiguous (same dtype), in place, on the current stream.
void add_channel_bias_(const Tensor& y, const Tensor& b);

}  // namespace trident::cuda
