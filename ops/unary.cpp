#include "ops/unary.h"

#include <cmath>
#include <limits>
#include <string>

#include "core/factory.h"
#include "ops/arith.h"
#include "ops/common.h"
#include "ops/compare.h"
#include "ops/cpu/unary.h"
#if TRIDENT_HAVE_CUDA
#include "ops/cuda/unary.h"
#endif

namespace trident {

using namespace ops_detail;

namespace {

Tensor sign_of(const Tensor& x) {  // -1, 0 or 1 in x's dtype: a constant
  const Tensor xd = x.detach();
  return sub(gt(xd, 0.0).to(x.dtype()), lt(xd, 0.0).to(x.dtype()));
}

// NOTE [Higher-order gradients]: d op / dx from s (x or y, as unary_backward_uses_output says)
// with recorded ops, for a create_graph backward.
Tensor unary_derivative(cpu::UnaryOp op, const Tensor& s) {
  using cpu::UnaryOp;
  switch (op) {
    case UnaryOp::Relu: return gt(s.detach(), 0.0).to(s.dtype());    // y > 0: a mask
    case UnaryOp::Tanh: return rsub(mul(s, s), 1.0);                  // 1 - y^2
    case UnaryOp::Abs: return sign_of(s);                             // sign(x)
    case UnaryOp::Exp: return s;                                      // y
    case UnaryOp::Log: return rdiv(s, 1.0);                           // 1 / x
    case UnaryOp::Sqrt: return rdiv(mul(s, 2.0), 1.0);                // 1 / (2 y)
    case UnaryOp::Rsqrt: return mul(mul(mul(s, s), s), -0.5);         // -y^3 / 2
    case UnaryOp::Sigmoid: return mul(s, rsub(s, 1.0));               // y (1 - y)
    case UnaryOp::Gelu: return gelu_derivative(s, GeluApproximation::None);
    case UnaryOp::GeluTanh: return gelu_derivative(s, GeluApproximation::Tanh);
  }
  TRIDENT_FAIL("unary_derivative: unknown op");
}

// The common shape of a unary op: check, run the kernel on the detached input, and record a
// node whose backward is the op's backward kernel applied to (g, x) or (g, y).
Tensor unary_op(cpu::UnaryOp op, const char* backward_name, const Tensor& x) {
  const char* name = cpu::unary_op_name(op);
  check_defined(name, x);
  check_device(name, x);
  if (op == cpu::UnaryOp::Abs) {
    TRIDENT_CHECK(x.dtype() != DType::Bool, name, ": not defined for bool tensors");
  } else {
    check_floating(name, x);
  }
  Tensor out = TRIDENT_KERNEL(unary)(op, x.detach());
  if (autograd::any_requires_grad({x})) {
    const bool use_output = cpu::unary_backward_uses_output(op);
    autograd::record(backward_name, {x}, out, [op, s = SavedTensor(use_output ? out : x)](const TensorList& g) {
      if (recording_backward()) return TensorList{mul(g[0], unary_derivative(op, s.unpack()))};
      return TensorList{TRIDENT_KERNEL(unary_backward)(op, g[0], s.unpack())};
    }, kDifferentiable);
  }
  return out;
}

}  // namespace

Tensor relu(const Tensor& x) { return unary_op(cpu::UnaryOp::Relu, "ReluBackward", x); }
Tensor relu(const Tensor& x, DType dtype) {
  if (x.defined() && dtype == x.dtype()) return relu(x);
  check_defined("relu", x);
  check_device("relu", x);
  check_floating("relu", x);
  TRIDENT_CHECK(is_floating(dtype), "relu: the output dtype must be a floating dtype, got ", dtype, " (input ", x.dtype(),
                " of shape ", x.sizes(), ")");
  // NOTE [Relu into a narrower dtype] in ops/cpu/unary.h.
  Tensor out = TRIDENT_KERNEL(relu_to)(x.detach(), dtype);
  if (autograd::any_requires_grad({x})) {
    autograd::record("ReluBackward", {x}, out, [in = x.dtype(), s = SavedTensor(out)](const TensorList& g) {
      const Tensor y = s.unpack();
      if (recording_backward()) return TensorList{mul(g[0].to(in), gt(y.detach(), 0.0).to(in))};
      return TensorList{TRIDENT_KERNEL(relu_to_backward)(g[0], y, in)};
    }, kDifferentiable);
  }
  return out;
}
Tensor tanh(const Tensor& x) { return unary_op(cpu::UnaryOp::Tanh, "TanhBackward", x); }
Tensor sigmoid(const Tensor& x) { return unary_op(cpu::UnaryOp::Sigmoid, "SigmoidBackward", x); }
Tensor abs(const Tensor& x) { return unary_op(cpu::UnaryOp::Abs, "AbsBackward", x); }
Tensor exp(const Tensor& x) { return unary_op(cpu::UnaryOp::Exp, "ExpBackward", x); }
Tensor log(const Tensor& x) { return unary_op(cpu::UnaryOp::Log, "LogBackward", x); }
Tensor sqrt(const Tensor& x) { return unary_op(cpu::UnaryOp::Sqrt, "SqrtBackward", x); }
Tensor rsqrt(const Tensor& x) { return unary_op(cpu::UnaryOp::Rsqrt, "RsqrtBackward", x); }

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  return approximate == GeluApproximation::Tanh ? unary_op(cpu::UnaryOp::GeluTanh, "GeluBackward", x)
                                                : unary_op(cpu::UnaryOp::Gelu, "GeluBackward", x);
}

Tensor gelu_derivative(const Tensor& x, GeluApproximation approximate) {
  check_defined("gelu_derivative", x);
  if (approximate == GeluApproximation::Tanh) {
    // gelu(x) = x/2 (1 + tanh(u)), u = c (x + a x^3): d/dx = (1 + t)/2 + x/2 (1 - t^2) c (1 + 3 a x^2).
    constexpr double c = 0.7978845608028654, a = 0.044715;  // sqrt(2 / pi)
    const Tensor x2 = mul(x, x);
    const Tensor t = tanh(mul(add(x, mul(mul(x2, x), a)), c));
    const Tensor du = mul(add(mul(x2, 3 * a), 1.0), c);
    return add(mul(add(t, 1.0), 0.5), mul(mul(mul(x, 0.5), rsub(mul(t, t), 1.0)), du));
  }
  // Exact: Phi(x) + x phi(x), from the backward kernel applied to ones; its own derivative,
  // phi(x) (2 - x^2), is recorded with composite ops, so every order is available.
  check_device("gelu_derivative", x);
  check_floating("gelu_derivative", x);
  Tensor out = TRIDENT_KERNEL(unary_backward)(cpu::UnaryOp::Gelu, ones_like(x.detach()), x.detach());
  if (autograd::any_requires_grad({x})) {
    autograd::record("GeluDerivativeBackward", {x}, out, [sx = SavedTensor(x)](const TensorList& g) {
      constexpr double inv_sqrt_2pi = 0.3989422804014327;
      const Tensor xv = sx.unpack();
      const Tensor x2 = mul(xv, xv);
      const Tensor phi = mul(exp(mul(x2, -0.5)), inv_sqrt_2pi);
      return TensorList{mul(g[0], mul(phi, rsub(x2, 2.0)))};
    }, kDifferentiable);
  }
  return out;
}

Tensor gelu(const Tensor& x, std::string_view approximate) {
  if (approximate == "none") return gelu(x, GeluApproximation::None);
  if (approximate == "tanh") return gelu(x, GeluApproximation::Tanh);
  TRIDENT_FAIL("gelu: approximate must be \"none\" or \"tanh\", got \"", std::string(approximate), "\"");
}

Tensor pow(const Tensor& x, double exponent) {
  check_defined("pow", x);
  check_device("pow", x);
  check_floating("pow", x);
  Tensor out = TRIDENT_KERNEL(pow)(x.detach(), exponent);
  if (autograd::any_requires_grad({x})) {
    autograd::record("PowBackward", {x}, out, [exponent, s = SavedTensor(x)](const TensorList& g) {
      if (recording_backward()) {  // p x^(p-1) (NOTE [Higher-order gradients])
        if (exponent == 0.0) return TensorList{zeros_like(g[0])};
        return TensorList{mul(g[0], mul(pow(s.unpack(), exponent - 1), exponent))};
      }
      return TensorList{TRIDENT_KERNEL(pow_backward)(g[0], s.unpack(), exponent)};
    }, kDifferentiable);
  }
  return out;
}

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  check_defined("clamp", x);
  check_device("clamp", x);
  TRIDENT_CHECK(min.has_value() || max.has_value(), "clamp: at least one of min and max must be given");
  TRIDENT_CHECK(x.dtype() != DType::Bool, "clamp: not defined for bool tensors");
  if (is_integral(x.dtype())) {
    for (const auto& [b, what] : {std::pair{min, "min"}, std::pair{max, "max"}}) {
      TRIDENT_CHECK(!b || (std::isfinite(*b) && std::trunc(*b) == *b), "clamp: ", what, " = ", *b,
                    " is not an integral value, but the tensor has integer dtype ", x.dtype(),
                    "; convert it to a floating dtype first");
    }
  }
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const double lo = min.value_or(-kInf), hi = max.value_or(kInf);
  Tensor out = TRIDENT_KERNEL(clamp)(x.detach(), lo, hi);
  if (autograd::any_requires_grad({x})) {
    autograd::record("ClampBackward", {x}, out, [lo, hi, s = SavedTensor(x)](const TensorList& g) {
      if (recording_backward())  // g times the mask of the unclamped elements
        return TensorList{mul(g[0], TRIDENT_KERNEL(clamp_backward)(ones_like(g[0]), s.unpack().detach(), lo, hi))};
      return TensorList{TRIDENT_KERNEL(clamp_backward)(g[0], s.unpack(), lo, hi)};
    }, kDifferentiable);
  }
  return out;
}

}  // namespace trident
