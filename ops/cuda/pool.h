// CUDA kernels of the pooling ops: the contracts of ops/cpu/pool.h (same signatures and
// Pool2dGeometry), on tensors on a CUDA device in f32, f16 and bf16 computing in f32 (an Error
// for f64, NOTE [CUDA dtypes]). Inputs may have any layout (made contiguous first); results are
// contiguous in the input's dtype; max pooling's indices are i64 on the device.
//
// NOTE [CUDA pooling]: these are our own kernels, not cuDNN's pooling: cuDNN returns no argmax
// indices (the contract does, and backward takes them), has no dilation and no ceil mode (its
// padding is symmetric), and its NaN and tie rules are not PyTorch's. Pooling is memory-bound, so
// direct kernels lose nothing. Forward: a thread per output (a warp per output for the adaptive
// average, whose window can be a whole plane), walking its window in PyTorch's order (rows, then
// columns) with the CPU's rules: max takes a strictly greater value or a NaN, so the first maximum
// wins; a window with no finite maximum points at its first in-range element; average windows
// and divisors are math::avg_pool_window's. Backward is a gather, never a scatter: a thread per
// input element adds the gradients of the outputs whose windows hold it (for max, those whose
// index is this element), in output order. No atomics: results repeat bit for bit, and each
// input is written once (so no zero-fill pass).
#pragma once

#include <utility>

#include "core/tensor.h"
#include "ops/cpu/pool.h"

namespace trident::cuda {

using cpu::Pool2dGeometry;

std::pair<Tensor, Tensor> max_pool2d_forward(const Tensor& x, const Pool2dGeometry& g);
Tensor max_pool2d_backward(const Tensor& gy, const Tensor& indices, const Shape& input_sizes, const Pool2dGeometry& g);

Tensor avg_pool2d_forward(const Tensor& x, const Pool2dGeometry& g);
Tensor avg_pool2d_backward(const Tensor& gy, const Shape& input_sizes, const Pool2dGeometry& g);

Tensor adaptive_avg_pool2d_forward(const Tensor& x, int64_t OH, int64_t OW);
Tensor adaptive_avg_pool2d_backward(const Tensor& gy, const Shape& input_sizes);

}  // namespace trident::cuda
