#include "ops/cpu/arith.h"

#include "core/factory.h"
#include "ops/cpu/loops.h"
#include "ops/cpu/nary_loop.h"

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

namespace {
// Calls f with math::MaxMinGrad<is_max, first>{} (template arguments from runtime values).
template <typename F>
void with_max_min_grad(BinaryOp op, bool first, F&& f) {
  TRIDENT_ASSERT(op == BinaryOp::Maximum || op == BinaryOp::Minimum, "max_min_grad of ", binary_op_name(op));
  const bool is_max = op == BinaryOp::Maximum;
  if (is_max && first) f(math::MaxMinGrad<true, true>{});
  if (is_max && !first) f(math::MaxMinGrad<true, false>{});
  if (!is_max && first) f(math::MaxMinGrad<false, true>{});
  if (!is_max && !first) f(math::MaxMinGrad<false, false>{});
}
}  // namespace

Tensor max_min_grad(BinaryOp op, bool first, const Tensor& g, const Tensor& a, const Tensor& b) {
  Tensor out = empty(g.sizes(), g.dtype());
  TRIDENT_DISPATCH_FLOATING(g.dtype(), binary_op_name(op), [&] {
    with_max_min_grad(op, first, [&](auto f) { nary_loop<scalar_t, scalar_t, scalar_t, scalar_t>(out, {g, a, b}, f); });
  });
  return out;
}

Tensor max_min_grad_scalar(BinaryOp op, const Tensor& g, const Tensor& a, double s) {
  Tensor out = empty(g.sizes(), g.dtype());
  TRIDENT_DISPATCH_FLOATING(g.dtype(), binary_op_name(op), [&] {
    using C = compute_t<scalar_t>;
    const C sv = static_cast<C>(s);  // as binary_scalar rounds it for the forward
    with_max_min_grad(op, true, [&](auto f) {
      nary_loop<scalar_t, scalar_t, scalar_t>(out, {g, a}, [=](C gv, C av) { return f(gv, av, sv); });
    });
  });
  return out;
}

}  // namespace trident::cpu
