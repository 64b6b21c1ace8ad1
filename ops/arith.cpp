#include "ops/arith.h"

#include "core/copy.h"
#include "core/factory.h"
#include "ops/autocast.h"
#include "ops/common.h"
#include "ops/cpu/arith.h"
#include "ops/reduce.h"
#if TRIDENT_HAVE_CUDA
#include "ops/cuda/arith.h"
#endif

namespace trident {

using namespace ops_detail;

namespace {

void check_binary(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a, "first operand");
  check_defined(op, b, "second operand");
  check_same_dtype(op, a, b);
  check_same_device(op, a, b);
  check_device(op, a);
  TRIDENT_CHECK(a.dtype() != DType::Bool, op, ": not defined for bool tensors");
  if (autograd::any_requires_grad({a, b})) check_floating(op, a);
}

Tensor binary_forward(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_op_name(op);
  check_binary(name, a, b);
  if (op == BinaryOp::Div) check_floating("div", a);
  return TRIDENT_KERNEL(binary)(op, a, b);
}

Tensor scalar_forward(BinaryOp op, const Tensor& a, double s, bool scalar_first) {
  const char* name = binary_op_name(op);
  check_defined(name, a);
  check_device(name, a);
  TRIDENT_CHECK(a.dtype() != DType::Bool, name, ": not defined for bool tensors");
  if (op == BinaryOp::Div) check_floating("div", a);
  return TRIDENT_KERNEL(binary_scalar)(op, a, s, scalar_first);
}

}  // namespace

// ---- tensor op tensor: the gradient of a broadcast operand is summed back to its shape ----

Tensor add(const Tensor& a_in, const Tensor& b_in) {
  const auto promoted = autocast::promote(a_in, b_in);  // mixed dtypes only under autocast
  const Tensor& a = promoted.first;
  const Tensor& b = promoted.second;
  Tensor out = binary_forward(BinaryOp::Add, a, b);
  if (autograd::any_requires_grad({a, b})) {
    autograd::record("AddBackward", {a, b}, out, [sa = a.sizes(), sb = b.sizes()](const TensorList& g) {
      return TensorList{sum_to(g[0], sa), sum_to(g[0], sb)};
    }, kDifferentiable);
  }
  return out;
}

Tensor sub(const Tensor& a_in, const Tensor& b_in) {
  const auto promoted = autocast::promote(a_in, b_in);  // mixed dtypes only under autocast
  const Tensor& a = promoted.first;
  const Tensor& b = promoted.second;
  Tensor out = binary_forward(BinaryOp::Sub, a, b);
  if (autograd::any_requires_grad({a, b})) {
    autograd::record("SubBackward", {a, b}, out, [sa = a.sizes(), sb = b.sizes()](const TensorList& g) {
      return TensorList{sum_to(g[0], sa), neg(sum_to(g[0], sb))};
    }, kDifferentiable);
  }
  return out;
}

Tensor mul(const Tensor& a_in, const Tensor& b_in) {
  const auto promoted = autocast::promote(a_in, b_in);  // mixed dtypes only under autocast
  const Tensor& a = promoted.first;
  const Tensor& b = promoted.second;
  Tensor out = binary_forward(BinaryOp::Mul, a, b);
  if (autograd::any_requires_grad({a, b})) {
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    // Save only what the other gradient needs.
    autograd::record("MulBackward", {a, b}, out,
                     [sa = gb ? SavedTensor(a) : SavedTensor(), sb = ga ? SavedTensor(b) : SavedTensor(),
                      za = a.sizes(), zb = b.sizes()](const TensorList& g) {
                       TensorList r(2);
                       if (sb.defined()) r[0] = sum_to(mul(g[0], sb.unpack()), za);
                       if (sa.defined()) r[1] = sum_to(mul(g[0], sa.unpack()), zb);
                       return r;
                     }, kDifferentiable);
  }
  return out;
}

Tensor div(const Tensor& a_in, const Tensor& b_in) {
  const auto promoted = autocast::promote(a_in, b_in);  // mixed dtypes only under autocast
  const Tensor& a = promoted.first;
  const Tensor& b = promoted.second;
  Tensor out = binary_forward(BinaryOp::Div, a, b);
  if (autograd::any_requires_grad({a, b})) {
    const bool gb = b.requires_grad();
    // d(a/b)/da = 1/b; d(a/b)/db = -a/b^2 = -out/b.
    autograd::record("DivBackward", {a, b}, out,
                     [sb = SavedTensor(b), so = gb ? SavedTensor(out) : SavedTensor(), za = a.sizes(),
                      zb = b.sizes()](const TensorList& g) {
                       const Tensor bv = sb.unpack();
                       TensorList r(2);
                       r[0] = sum_to(div(g[0], bv), za);
                       if (so.defined()) r[1] = sum_to(neg(div(mul(g[0], so.unpack()), bv)), zb);
                       return r;
                     }, kDifferentiable);
  }
  return out;
}

// ---- tensor op scalar ----

Tensor add(const Tensor& a, double s) {
  Tensor out = scalar_forward(BinaryOp::Add, a, s, false);
  if (autograd::any_requires_grad({a})) autograd::record("AddBackward", {a}, out, [](const TensorList& g) { return g; }, kDifferentiable);
  return out;
}

Tensor sub(const Tensor& a, double s) {
  Tensor out = scalar_forward(BinaryOp::Sub, a, s, false);
  if (autograd::any_requires_grad({a})) autograd::record("SubBackward", {a}, out, [](const TensorList& g) { return g; }, kDifferentiable);
  return out;
}

Tensor rsub(const Tensor& a, double s) {
  Tensor out = scalar_forward(BinaryOp::Sub, a, s, true);
  if (autograd::any_requires_grad({a}))
    autograd::record("RsubBackward", {a}, out, [](const TensorList& g) { return TensorList{neg(g[0])}; }, kDifferentiable);
  return out;
}

Tensor mul(const Tensor& a, double s) {
  Tensor out = scalar_forward(BinaryOp::Mul, a, s, false);
  if (autograd::any_requires_grad({a}))
    autograd::record("MulBackward", {a}, out, [s](const TensorList& g) { return TensorList{mul(g[0], s)}; }, kDifferentiable);
  return out;
}

Tensor div(const Tensor& a, double s) {
  Tensor out = scalar_forward(BinaryOp::Div, a, s, false);
  if (autograd::any_requires_grad({a}))
    autograd::record("DivBackward", {a}, out, [s](const TensorList& g) { return TensorList{div(g[0], s)}; }, kDifferentiable);
  return out;
}

Tensor rdiv(const Tensor& a, double s) {
  Tensor out = scalar_forward(BinaryOp::Div, a, s, true);
  if (autograd::any_requires_grad({a})) {
    // d(s/a)/da = -s/a^2 = -out/a
    autograd::record("RdivBackward", {a}, out, [sa = SavedTensor(a), so = SavedTensor(out)](const TensorList& g) {
      return TensorList{neg(div(mul(g[0], so.unpack()), sa.unpack()))};
    }, kDifferentiable);
  }
  return out;
}

Tensor neg(const Tensor& a) {
  check_defined("neg", a);
  check_device("neg", a);
  TRIDENT_CHECK(a.dtype() != DType::Bool, "neg: not defined for bool tensors");
  Tensor out = TRIDENT_KERNEL(neg)(a);
  if (autograd::any_requires_grad({a}))
    autograd::record("NegBackward", {a}, out, [](const TensorList& g) { return TensorList{neg(g[0])}; }, kDifferentiable);
  return out;
}

// ---- maximum / minimum: the gradient goes to the winner, half to each on a tie ----

namespace {
Tensor max_min(BinaryOp op, const char* backward_name, const Tensor& a_in, const Tensor& b_in) {
  const auto promoted = autocast::promote(a_in, b_in);  // mixed dtypes only under autocast
  const Tensor& a = promoted.first;
  const Tensor& b = promoted.second;
  Tensor out = binary_forward(op, a, b);
  if (autograd::any_requires_grad({a, b})) {
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    autograd::record(backward_name, {a, b}, out,
                     [op, ga, gb, sa = SavedTensor(a), sb = SavedTensor(b)](const TensorList& g) {
                       const Tensor av = sa.unpack(), bv = sb.unpack();
                       // The share of the gradient each side gets: a mask (halves on ties).
                       auto share = [&](bool first) {
                         if (!recording_backward()) return TRIDENT_KERNEL(max_min_grad)(op, first, g[0], av, bv);
                         return mul(g[0], TRIDENT_KERNEL(max_min_grad)(op, first, ones_like(g[0]), av.detach(), bv.detach()));
                       };
                       TensorList r(2);
                       if (ga) r[0] = sum_to(share(true), av.sizes());
                       if (gb) r[1] = sum_to(share(false), bv.sizes());
                       return r;
                     }, kDifferentiable);
  }
  return out;
}

Tensor max_min(BinaryOp op, const char* backward_name, const Tensor& a, double s) {
  Tensor out = scalar_forward(op, a, s, false);
  if (autograd::any_requires_grad({a})) {
    autograd::record(backward_name, {a}, out, [op, s, sa = SavedTensor(a)](const TensorList& g) {
      if (!recording_backward()) return TensorList{TRIDENT_KERNEL(max_min_grad_scalar)(op, g[0], sa.unpack(), s)};
      return TensorList{mul(g[0], TRIDENT_KERNEL(max_min_grad_scalar)(op, ones_like(g[0]), sa.unpack().detach(), s))};
    }, kDifferentiable);
  }
  return out;
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return max_min(BinaryOp::Maximum, "MaximumBackward", a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return max_min(BinaryOp::Minimum, "MinimumBackward", a, b); }
Tensor maximum(const Tensor& a, double s) { return max_min(BinaryOp::Maximum, "MaximumBackward", a, s); }
Tensor minimum(const Tensor& a, double s) { return max_min(BinaryOp::Minimum, "MinimumBackward", a, s); }

// ---- in place ----

namespace {
const Tensor& inplace(BinaryOp op, const Tensor& self, const Tensor& other) {
  const std::string name = std::string(binary_op_name(op)) + "_";
  check_defined(name.c_str(), self, "self");
  check_defined(name.c_str(), other, "other");
  check_same_dtype(name.c_str(), self, other);
  check_same_device(name.c_str(), self, other);
  check_device(name.c_str(), self);
  check_inplace(name.c_str(), self, other);
  TRIDENT_CHECK(broadcast_shapes(self.sizes(), other.sizes(), name.c_str()) == self.sizes(), name,
                ": other's shape ", other.sizes(), " does not broadcast to self's shape ", self.sizes());
  if (op == BinaryOp::Div) check_floating(name.c_str(), self);
  TRIDENT_KERNEL(binary_inplace)(op, self, other);
  return self;
}
const Tensor& inplace(BinaryOp op, const Tensor& self, double s) {
  const std::string name = std::string(binary_op_name(op)) + "_";
  check_defined(name.c_str(), self, "self");
  check_device(name.c_str(), self);
  check_inplace(name.c_str(), self);
  if (op == BinaryOp::Div) check_floating(name.c_str(), self);
  TRIDENT_KERNEL(binary_scalar_inplace)(op, self, s);
  return self;
}
}  // namespace

const Tensor& add_(const Tensor& self, const Tensor& other) { return inplace(BinaryOp::Add, self, other); }
const Tensor& sub_(const Tensor& self, const Tensor& other) { return inplace(BinaryOp::Sub, self, other); }
const Tensor& mul_(const Tensor& self, const Tensor& other) { return inplace(BinaryOp::Mul, self, other); }
const Tensor& div_(const Tensor& self, const Tensor& other) { return inplace(BinaryOp::Div, self, other); }
const Tensor& add_(const Tensor& self, double s) { return inplace(BinaryOp::Add, self, s); }
const Tensor& sub_(const Tensor& self, double s) { return inplace(BinaryOp::Sub, self, s); }
const Tensor& mul_(const Tensor& self, double s) { return inplace(BinaryOp::Mul, self, s); }
const Tensor& div_(const Tensor& self, double s) { return inplace(BinaryOp::Div, self, s); }

const Tensor& zero_(const Tensor& self) {
  check_defined("zero_", self, "self");
  check_inplace("zero_", self);
  fill_(self, 0.0);
  return self;
}

}  // namespace trident
