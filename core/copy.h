// Raw data movement under the autograd layer: strided copy with dtype conversion, and fill.
// These bump the destination's version (they write in place) and record no graph; the
// differentiable forms are in ops/copy.h.
#pragma once

#include "core/tensor.h"

namespace trident {

// dst[...] = src[...] converted to dst's dtype; src broadcasts to dst's shape.
void copy_(const Tensor& dst, const Tensor& src);
// Every element of dst = value (converted to dst's dtype).
void fill_(const Tensor& dst, double value);
// dst[i] = src[i] rounded to bf16 (NOTE [Half conversions]) for i < n, on this thread: copy_'s
// vectorized conversion, for kernels that round their own f32 buffers.
void convert_f32_to_bf16(const float* src, BFloat16* dst, int64_t n);

}  // namespace trident

namespace trident {
// dst += src (src broadcasts to dst's shape; same dtype). The gradient accumulation of the
// autograd engine: kept here, below autograd, so the engine needs no op family.
void add_into_(const Tensor& dst, const Tensor& src);
}  // namespace trident
