// CPU GEMM through OpenBLAS.
#pragma once

#include "core/tensor.h"

namespace trident::cpu {

// out[..., m, n] = a[..., m, k] @ b[..., k, n]; a and b have >= 2 dims, batch dims broadcast.
// Any strides are accepted: a transposed operand goes to BLAS as a transposed matrix, without
// a copy, whenever one of its two strides is 1.
Tensor matmul(const Tensor& a, const Tensor& b);

// x[..., in] @ w[out, in]^T + b[out] (b may be undefined).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b);

}  // namespace trident::cpu
