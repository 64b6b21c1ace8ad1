// Differentiable copies and casts: the Tensor methods contiguous(), to(), clone() are defined
// here (NOTE [Tensor methods] in core/tensor.h), plus their free-function forms.
#pragma once

#include "core/tensor.h"

namespace trident {

inline Tensor contiguous(const Tensor& x) { return x.contiguous(); }
inline Tensor clone(const Tensor& x) { return x.clone(); }
// Differentiable cast: the gradient is cast back to the input's dtype.
inline Tensor cast(const Tensor& x, DType dtype) { return x.to(dtype); }

}  // namespace trident
