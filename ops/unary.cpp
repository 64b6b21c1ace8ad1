#include "ops/unary.h"

#include <cmath>
#include <limits>
#include <string>

#include "ops/common.h"
#include "ops/cpu/unary.h"
#if TRIDENT_HAVE_CUDA
#include "ops/cuda/unary.h"
#endif

namespace trident {

using namespace ops_detail;

namespace {

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
      return TensorList{TRIDENT_KERNEL(unary_backward)(op, g[0], s.unpack())};
    });
  }
  return out;
}

}  // namespace

Tensor relu(const Tensor& x) { return unary_op(cpu::UnaryOp::Relu, "ReluBackward", x); }
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
      return TensorList{TRIDENT_KERNEL(pow_backward)(g[0], s.unpack(), exponent)};
    });
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
      return TensorList{TRIDENT_KERNEL(clamp_backward)(g[0], s.unpack(), lo, hi)};
    });
  }
  return out;
}

}  // namespace trident
