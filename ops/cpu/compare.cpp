#include "ops/cpu/compare.h"

#include <type_traits>

#include "core/factory.h"
#include "ops/cpu/loops.h"
#include "ops/cpu/nary_loop.h"
#include "ops/math/select.h"

namespace trident::cpu {

namespace {
// A scalar in a tensor's compute type: floating dtypes round it to their own precision first
// (0.1 compares equal to an f16 tensor holding 0.1, as in PyTorch); integers and bool take it
// as is (the caller checked that it fits).
template <typename scalar_t>
compute_t<scalar_t> scalar_as(double s) {
  using C = compute_t<scalar_t>;
  if constexpr (std::is_same_v<scalar_t, bool>) {
    return s != 0.0;
  } else if constexpr (std::is_floating_point_v<C>) {
    return static_cast<C>(static_cast<scalar_t>(static_cast<C>(s)));
  } else {
    return static_cast<C>(s);
  }
}
}  // namespace

Tensor compare(CompareOp op, const Tensor& a, const Tensor& b) {
  Tensor out = empty(broadcast_shapes(a.sizes(), b.sizes(), compare_op_name(op)), DType::Bool);
  TRIDENT_DISPATCH_ALL(a.dtype(), compare_op_name(op), [&] {
    math::with_compare_op(op, [&](auto f) { binary_loop<scalar_t, bool>(out, a, b, f); });
  });
  return out;
}

Tensor compare_scalar(CompareOp op, const Tensor& a, double s) {
  Tensor out = empty(a.sizes(), DType::Bool);
  TRIDENT_DISPATCH_ALL(a.dtype(), compare_op_name(op), [&] {
    using C = compute_t<scalar_t>;
    math::with_compare_op(op, [&](auto f) {
      if constexpr (std::is_floating_point_v<C>) {
        const C sv = scalar_as<scalar_t>(s);
        unary_loop<scalar_t, bool>(out, a, [=](C x) { return f(x, sv); });
      } else {
        // Integers and bool: in f64, so 2 < 2.5 and 3 > 2.5 hold (exact below 2^53).
        unary_loop<scalar_t, bool>(out, a, [=](C x) { return f(static_cast<double>(x), s); });
      }
    });
  });
  return out;
}

Tensor logical(LogicalOp op, const Tensor& a, const Tensor& b) {
  Tensor out = empty(broadcast_shapes(a.sizes(), b.sizes(), logical_op_name(op)), DType::Bool);
  math::with_logical_op(op, [&](auto f) { binary_loop<bool, bool>(out, a, b, f); });
  return out;
}

Tensor logical_not(const Tensor& a) {
  Tensor out = empty(a.sizes(), DType::Bool);
  unary_loop<bool, bool>(out, a, math::LogicalNot{});
  return out;
}

Tensor float_class(FloatClass c, const Tensor& x) {
  if (!is_floating(x.dtype())) return full(x.sizes(), c == FloatClass::Finite ? 1.0 : 0.0, DType::Bool);
  Tensor out = empty(x.sizes(), DType::Bool);
  TRIDENT_DISPATCH_FLOATING(x.dtype(), "isnan/isinf/isfinite", [&] {
    math::with_float_class(c, [&](auto f) { unary_loop<scalar_t, bool>(out, x, f); });
  });
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, const Shape& shape) {
  Tensor out = empty(shape, a.dtype());
  TRIDENT_DISPATCH_ALL(a.dtype(), "where", [&] {
    nary_loop<scalar_t, bool, scalar_t, scalar_t>(out, {cond, a, b}, math::Where{});
  });
  return out;
}

Tensor where_scalar(const Tensor& cond, const Tensor& x, double s, bool x_when_true, const Shape& shape) {
  Tensor out = empty(shape, x.dtype());
  TRIDENT_DISPATCH_ALL(x.dtype(), "where", [&] {
    using C = compute_t<scalar_t>;
    const C sv = scalar_as<scalar_t>(s);
    if (x_when_true) {
      nary_loop<scalar_t, bool, scalar_t>(out, {cond, x}, [=](bool c, C v) { return math::select(c, v, sv); });
    } else {
      nary_loop<scalar_t, bool, scalar_t>(out, {cond, x}, [=](bool c, C v) { return math::select(c, sv, v); });
    }
  });
  return out;
}

void masked_fill_(const Tensor& self, const Tensor& mask, double s) {
  TRIDENT_DISPATCH_ALL(self.dtype(), "masked_fill_", [&] {
    using C = compute_t<scalar_t>;
    const C sv = scalar_as<scalar_t>(s);
    // Each element is read and written at the same place, so writing self while reading it is safe.
    nary_loop<scalar_t, bool, scalar_t>(self, {mask, self}, [=](bool c, C v) { return math::select(c, sv, v); });
  });
  self.bump_version();
}

}  // namespace trident::cpu
