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

// NOTE [Relu into a narrower dtype]: relu(x).to(dtype) in one pass, for a relu whose consumer
// computes in half precision (autocast::lower_relu): the same values, rounded once as the cast
// rounds them, with one read of x and one write of the narrow result instead of an f32 relu
// output and its cast, and in backward one pass from the bf16 gradient instead of a cast up and
// an f32 relu backward. In AmoebaNet-D(6, 32)'s bf16 training step (2 threads, the op profiler)
// the relus, their backward passes and the casts took 70.6 ms of 285; fused, 34.3 of 238.
// f32 -> bf16 contiguous runs take a kernel of their own (16 lanes with AVX-512); other layouts
// go through the f32 relu loop and a rounding per element; any floating dtypes otherwise.
Tensor relu_to(const Tensor& x, DType dtype);
// Its gradient: g (y's dtype) where y > 0, else 0, written in `dtype` (x's): what the cast's
// gradient (g widened) and relu's give, except where a positive x below half bf16's smallest
// subnormal rounded to y = 0, where this gradient is the fused function's own, 0.
Tensor relu_to_backward(const Tensor& g, const Tensor& y, DType dtype);

// x^p (floating dtypes) and its gradient g * p * x^(p-1) (zeros when p = 0).
Tensor pow(const Tensor& x, double p);
Tensor pow_backward(const Tensor& g, const Tensor& x, double p);

// min(max(x, lo), hi) for floating and integer dtypes (integers: lo and hi are integral), and
// its gradient: g where lo <= x <= hi, else 0.
Tensor clamp(const Tensor& x, double lo, double hi);
Tensor clamp_backward(const Tensor& g, const Tensor& x, double lo, double hi);

}  // namespace trident::cpu
