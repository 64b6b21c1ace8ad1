// 2-D pooling, differentiable, with PyTorch's semantics (torch.nn.functional.max_pool2d,
// avg_pool2d, adaptive_avg_pool2d). Input [N, C, H, W] or [C, H, W]; the result keeps the
// leading dims and replaces (H, W) by (OH, OW). f32 and f64; f16/bf16 are computed in f32. On a
// CUDA device f32, f16 and bf16 (ops/cuda/pool.h), with the same results and indices.
//
// Output size (max and avg): OH = floor_or_ceil((H + 2 ph - dh (kH - 1) - 1) / sh) + 1, where
// in ceil mode a last window that would start beyond the input and its left padding is
// dropped. Padding is implicit -inf for max and 0 for avg (counted in the divisor when
// count_include_pad). Adaptive: output o covers [floor(o H / OH), ceil((o + 1) H / OH)).
//
// Errors (trident::Error, naming the shapes and the parameter): input not 3-D/4-D or with
// an empty C, H or W dim; kernel, stride or dilation < 1; padding < 0 or more than half the
// kernel; an output size below 1; a negative adaptive output size.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <utility>

#include "core/tensor.h"

namespace trident {

// (height, width) pairs, as in ops/conv.h.
using Int2 = std::array<int64_t, 2>;

// stride defaults to the kernel size. The gradient of each output goes to its argmax (the
// first maximal element of the window in row-major order; a NaN wins, as in PyTorch).
Tensor max_pool2d(const Tensor& x, Int2 kernel, std::optional<Int2> stride = std::nullopt, Int2 padding = {0, 0},
                  Int2 dilation = {1, 1}, bool ceil_mode = false);
// The same, also returning the argmax of each output as an i64 tensor of the output's shape
// holding the flat index ih * W + iw within the input plane (PyTorch's return_indices=True).
// Only the values are differentiable.
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, Int2 kernel, std::optional<Int2> stride = std::nullopt,
                                                  Int2 padding = {0, 0}, Int2 dilation = {1, 1}, bool ceil_mode = false);

// stride defaults to the kernel size. count_include_pad: divide by the window size including
// padding (PyTorch's default) rather than by the number of input elements in the window.
Tensor avg_pool2d(const Tensor& x, Int2 kernel, std::optional<Int2> stride = std::nullopt, Int2 padding = {0, 0},
                  bool ceil_mode = false, bool count_include_pad = true);

// Averages over the windows of PyTorch's adaptive formula so the result is output_size.
Tensor adaptive_avg_pool2d(const Tensor& x, Int2 output_size);

}  // namespace trident
