// Element-wise unary functions, differentiable, with PyTorch's names and semantics.
//
// Inputs are floating-point (f32, f64; f16/bf16 compute in f32 and round once); abs and clamp
// also take integer tensors (no gradient). The result has the input's shape and dtype and is
// contiguous. Errors name the op and the offending dtype or argument.
//
// Gradients follow PyTorch at the points where the derivative is not defined or infinite:
// relu'(0) = 0, abs'(0) = 0, sqrt'(0) = inf, log'(0) = inf, clamp passes the gradient where
// min <= x <= max (both bounds included), pow(x, p)' = p * pow(x, p - 1) with the same special
// forms as the forward (so pow(x, 0)' = 0 everywhere and pow(x, 0.5)' at 0 is inf).
//
// f32 exp, log, sigmoid, tanh and both GELUs are vectorized and accurate to a few ulps (NOTE [Fast
// f32 math] in ops/math/fast_f32.h); GELU is exact in its tail, where PyTorch's
// 0.5 x (1 + erf(x / sqrt2)) cancels (x < -5). GELU at x = -inf gives -0 (the limit), not NaN.
#pragma once

#include <optional>
#include <string_view>

#include "core/tensor.h"

namespace trident {

Tensor relu(const Tensor& x);
// relu(x).to(dtype) in one pass (floating dtypes; NOTE [Relu into a narrower dtype] in
// ops/cpu/unary.h): for a relu whose consumer computes in half precision, as
// autocast::lower_relu uses it. Its gradient comes back in x's dtype. dtype == x.dtype() is relu(x).
Tensor relu(const Tensor& x, DType dtype);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);  // 1 / sqrt(x)

// GELU, x * Phi(x). None: the exact form with the normal CDF (BERT). Tanh: GPT-2's
// approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
enum class GeluApproximation { None, Tanh };
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::None);
// PyTorch's spelling: approximate = "none" or "tanh"; anything else throws.
Tensor gelu(const Tensor& x, std::string_view approximate);
// d gelu(x) / dx, recorded (differentiable to any order): the create_graph backward of gelu and
// linear_gelu (NOTE [Higher-order gradients] in autograd/engine.h).
Tensor gelu_derivative(const Tensor& x, GeluApproximation approximate = GeluApproximation::None);

// x^exponent element-wise. Exponents 0, 1, 2, 3, 0.5, -0.5, -1, -2 use exact forms (x * x,
// sqrt, 1 / x, ...) as PyTorch does; others use pow() in the compute type. Negative x with a
// non-integer exponent gives NaN.
Tensor pow(const Tensor& x, double exponent);

// min(max(x, min), max); at least one bound must be given. min > max gives max everywhere
// (PyTorch's rule); NaN in x stays NaN. For integer tensors the bounds must be integral values.
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
inline Tensor clamp_min(const Tensor& x, double min) { return clamp(x, min, std::nullopt); }
inline Tensor clamp_max(const Tensor& x, double max) { return clamp(x, std::nullopt, max); }

}  // namespace trident
