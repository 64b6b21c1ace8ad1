// Matrix products, differentiable; OpenBLAS underneath on the CPU (f16/bf16 computed in f32).
#pragma once

#include "core/tensor.h"
#include "ops/unary.h"

namespace trident {

// torch.matmul: 1-D x 1-D is a dot product; 2-D x 2-D a matrix product; a 1-D operand is
// treated as a row (left) or column (right) vector and that dim removed from the result;
// more dims are batch dims, broadcast against each other.
Tensor matmul(const Tensor& a, const Tensor& b);
// [m, k] x [k, n] only.
Tensor mm(const Tensor& a, const Tensor& b);
// [B, m, k] x [B, k, n] only.
Tensor bmm(const Tensor& a, const Tensor& b);

// y = x W^T + b for x [..., in], weight [out, in] (PyTorch's layout), optional bias [out]:
// one GEMM with the bias folded in, whatever the leading dims of x.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// gelu(linear(x, weight, bias), approximate) as one op, with the gradients of that composition
// (saved for backward: x, weight and the value before GELU, as the two ops would save). On CUDA
// the tanh form runs in the GEMM's epilogue (cuBLASLt GELU_AUX_BIAS): no separate pass over the
// [rows, out] activation, and GELU is taken of the f32 accumulator rather than of the rounded
// linear output. Elsewhere (the CPU, f32, the exact form, out_features not a multiple of 8) it
// is linear then gelu, the same values as the composition.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, GeluApproximation approximate);

// Lets f32 products on CUDA devices run on TF32 tensor cores (inputs rounded to 10 mantissa
// bits, f32 accumulation): off by default, as PyTorch's torch.backends.cuda.matmul.allow_tf32.
// CPU products are unaffected. Process-wide.
void set_matmul_allow_tf32(bool allow);
bool matmul_allow_tf32();

}  // namespace trident
