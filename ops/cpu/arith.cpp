#include "ops/cpu/arith.h"

#include "core/factory.h"
#include "ops/cpu/loops.h"

namespace trident::cpu {

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  Tensor out = empty(broadcast_shapes(a.sizes(), b.sizes(), binary_op_name(op)), a.dtype());
  TRIDENT_DISPATCH_NUMERIC(a.dtype(), binary_op_name(op), [&] {
    math::with_binary_op(op, [&](auto f) { binary_loop<scalar_t, scalar_t>(out, a, b, f); });
  });
  return out;
}

Tensor binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first) {
  Tensor out = empty(a.sizes(), a.dtype());
  TRIDENT_DISPATCH_NUMERIC(a.dtype(), binary_op_name(op), [&] {
    using C = compute_t<scalar_t>;
    const C sv = static_cast<C>(s);
    math::with_binary_op(op, [&](auto f) {
      if (scalar_first) {
        unary_loop<scalar_t, scalar_t>(out, a, [=](C x) { return f(sv, x); });
      } else {
        unary_loop<scalar_t, scalar_t>(out, a, [=](C x) { return f(x, sv); });
      }
    });
  });
  return out;
}

void binary_inplace(BinaryOp op, const Tensor& self, const Tensor& other) {
  TRIDENT_DISPATCH_NUMERIC(self.dtype(), binary_op_name(op), [&] {
    math::with_binary_op(op, [&](auto f) { binary_loop<scalar_t, scalar_t>(self, self, other, f); });
  });
  self.bump_version();
}

void binary_scalar_inplace(BinaryOp op, const Tensor& self, double s) {
  TRIDENT_DISPATCH_NUMERIC(self.dtype(), binary_op_name(op), [&] {
    using C = compute_t<scalar_t>;
    const C sv = static_cast<C>(s);
    math::with_binary_op(op, [&](auto f) { unary_loop<scalar_t, scalar_t>(self, self, [=](C x) { return f(x, sv); }); });
  });
  self.bump_version();
}

Tensor neg(const Tensor& a) {
  Tensor out = empty(a.sizes(), a.dtype());
  TRIDENT_DISPATCH_NUMERIC(a.dtype(), "neg", [&] { unary_loop<scalar_t, scalar_t>(out, a, math::Neg{}); });
  return out;
}

}  // namespace trident::cpu
