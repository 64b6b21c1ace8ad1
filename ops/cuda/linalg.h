// CUDA GEMM through cuBLASLt: the same contracts as ops/cpu/linalg.h.
//
// NOTE [cuBLASLt GEMM]: every product is one cublasLtMatmul on the current stream, column-major
// as cuBLAS sees it: row-major out[m, n] = a[m, k] @ b[k, n] is computed as out^T = b^T a^T, so a
// row-major operand is an untransposed column-major one and a transposed view (its stride(-2) is
// 1) goes in as op T, without a copy. Batch dims that collapse to one stride become a strided
// batch; broadcast or scattered batch dims are made contiguous first (a copy). f16 and bf16
// multiply on tensor cores and accumulate in f32; f32 accumulates in f32 on plain FMA units unless
// TF32 is allowed (set_allow_tf32, off by default as in PyTorch), which trades 10 mantissa bits of
// the inputs for tensor-core speed. `linear` adds its bias in the GEMM's epilogue, `linear_gelu_tanh`
// its bias and GELU. The algorithm
// for a (shape, dtype, layout, alignment) is asked of cuBLASLt's heuristic once and cached; the
// 32 MiB workspace comes from the caching allocator on the current stream.
#pragma once

#include "core/tensor.h"

namespace trident::cuda {

// out[..., m, n] = a[..., m, k] @ b[..., k, n]; batch dims broadcast; f32, f16, bf16.
Tensor matmul(const Tensor& a, const Tensor& b);

// x[..., in] @ w[out, in]^T + b[out] (b may be undefined), bias fused into the GEMM.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b);

// gelu(linear(x, w, b)) with GELU's tanh form applied in the GEMM's epilogue (cuBLASLt
// GELU_AUX(_BIAS)), which also writes the value before GELU into `pre` (for the backward pass).
// False, with nothing computed, for f32 and when the shapes do not suit the epilogue
// (out_features not a multiple of 8, in_features 0, no rows): the caller then runs linear and
// gelu.
bool linear_gelu_tanh(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& out, Tensor& pre);

// TF32 tensor-core math for f32 products (PyTorch's torch.backends.cuda.matmul.allow_tf32).
void set_allow_tf32(bool allow);
bool allow_tf32();

}  // namespace trident::cuda
