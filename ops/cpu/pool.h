// CPU kernels of the pooling ops. Tensors are [..., H, W] (any leading dims, taken as a list
// of planes); the op (ops/pool.cpp) validates the arguments and fills a Pool2dGeometry. Inputs
// may have any strides and must be detached; f16/bf16 are computed in f32.
#pragma once

#include <cstdint>
#include <utility>

#include "core/tensor.h"

namespace trident::cpu {

struct Pool2dGeometry {
  int64_t H = 0, W = 0, OH = 0, OW = 0;
  int64_t kH = 1, kW = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  bool count_include_pad = true;  // avg only
};

// Values and i64 argmax indices (ih * W + iw within the plane; -1 for a window that covers
// no input element, whose value is -inf).
std::pair<Tensor, Tensor> max_pool2d_forward(const Tensor& x, const Pool2dGeometry& g);
// gx (of input_sizes) with gy[j] added at indices[j] of each plane.
Tensor max_pool2d_backward(const Tensor& gy, const Tensor& indices, const Shape& input_sizes, const Pool2dGeometry& g);

// NOTE [Max pooling by taps] (ops/cpu/pool.cpp): the values and each output's winning tap
// kh kW + kw as u8 (255: a window with no input element), for windows of fewer than 255 taps
// (max_pool2d_taps_apply); the gradient from them; and the i64 indices they stand for.
bool max_pool2d_taps_apply(const Pool2dGeometry& g);
std::pair<Tensor, Tensor> max_pool2d_forward_taps(const Tensor& x, const Pool2dGeometry& g);
Tensor max_pool2d_backward_taps(const Tensor& gy, const Tensor& taps, const Shape& input_sizes, const Pool2dGeometry& g);
Tensor max_pool2d_taps_to_indices(const Tensor& taps, const Pool2dGeometry& g);

Tensor avg_pool2d_forward(const Tensor& x, const Pool2dGeometry& g);
Tensor avg_pool2d_backward(const Tensor& gy, const Shape& input_sizes, const Pool2dGeometry& g);

Tensor adaptive_avg_pool2d_forward(const Tensor& x, int64_t OH, int64_t OW);
Tensor adaptive_avg_pool2d_backward(const Tensor& gy, const Shape& input_sizes);

}  // namespace trident::cpu
