// CPU kernels of the unary family (ops/unary.h holds the differentiable wrappers). Every
// kernel returns a new contiguous tensor of its input's shape and dtype.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace trident::cpu {

enum class UnaryOp : uint8_t { Relu, Tanh, Abs, Exp, Log, Sqrt, Rsqrt, Sigmoid, Gelu, GeluTanh };
const char* unary_op_name(UnaryOp op);
// Whether the op's backward is computed from its output y (true) or its input x.
bool unary_backward_uses_output(UnaryOp op);

// Floating dtypes; Abs also takes integer dtypes.
Tensor unary(UnaryOp op, const Tensor& x);
// The input gradient from the upstream gradient g (same shape and dtype) and `saved`, x or y
// as unary_backward_uses_output says.
Tensor unary_backward(UnaryOp op, const Tensor& g, const Tensor& saved);

// x^p (floating dtypes) and its gradient g * p * x^(p-1) (zeros when p = 0).
Tensor pow(const Tensor& x, double p);
Tensor pow_backward(const Tensor& g, const Tensor& x, double p);

// min(max(x, lo), hi) for floating and integer dtypes (integers: lo and hi are integral), and
// its gradient: g where lo <= x <= hi, else 0.
Tensor clamp(const Tensor& x, double lo, double hi);
Tensor clamp_backward(const Tensor& g, const Tensor& x, double lo, double hi);

}  // namespace trident::cpu
