#include "ops/compare.h"

#include <cmath>
#include <limits>

#include "ops/autocast.h"
#include "ops/common.h"
#include "ops/cpu/compare.h"
#include "ops/reduce.h"
#if TRIDENT_HAVE_CUDA
#include "ops/cuda/compare.h"
#endif

namespace trident {

using namespace ops_detail;

namespace {

Tensor compare_tensors(CompareOp op, const Tensor& a_in, const Tensor& b_in) {
  const auto promoted = autocast::promote(a_in, b_in);  // mixed dtypes only under autocast
  const Tensor& a = promoted.first;
  const Tensor& b = promoted.second;
  const char* name = compare_op_name(op);
  check_defined(name, a, "first operand");
  check_defined(name, b, "second operand");
  check_same_dtype(name, a, b);
  check_same_device(name, a, b);
  check_device(name, a);
  return TRIDENT_KERNEL(compare)(op, a.detach(), b.detach());
}

Tensor compare_scalar(CompareOp op, const Tensor& a, double s) {
  const char* name = compare_op_name(op);
  check_defined(name, a);
  check_device(name, a);
  return TRIDENT_KERNEL(compare_scalar)(op, a.detach(), s);
}

// A scalar written into a tensor of `dtype` must be representable (a fractional or
// out-of-range value in an integer tensor is a mistake, not something to truncate silently).
void check_scalar_fits(const char* op, double s, DType dtype) {
  if (!is_integral(dtype)) return;  // floating: rounds (or overflows to inf) as a cast would; bool: s != 0
  double lo = 0, hi = 0;
  switch (dtype) {
    case DType::I32: lo = std::numeric_limits<int32_t>::lowest(), hi = std::numeric_limits<int32_t>::max(); break;
    case DType::I64: lo = -0x1p63, hi = 0x1p63; break;  // hi exclusive: 2^63 does not fit
    case DType::U8: lo = 0, hi = 255; break;
    default: return;
  }
  const bool fits = std::trunc(s) == s && s >= lo && (dtype == DType::I64 ? s < hi : s <= hi);
  TRIDENT_CHECK(fits, op, ": value ", s, " cannot be stored in a tensor of dtype ", dtype,
                " (it must be an integer in its range)");
}

void check_bool(const char* op, const Tensor& t, const char* what) {
  TRIDENT_CHECK(t.dtype() == DType::Bool, op, ": expected ", what, " to be a bool tensor, got ", t.dtype(), " (shape ",
                t.sizes(), "); build it with a comparison such as ne(x, 0)");
}

// Three-way broadcasting with an error that names all three shapes.
Shape broadcast3(const char* op, const Shape& c, const Shape& a, const Shape& b) {
  const size_t n = std::max({c.size(), a.size(), b.size()});
  Shape out(n, 1);
  for (size_t i = 0; i < n; ++i) {
    const auto at = [&](const Shape& s) { return i < n - s.size() ? int64_t{1} : s[i - (n - s.size())]; };
    const int64_t sizes[3] = {at(c), at(a), at(b)};
    for (int64_t s : sizes) {
      if (s == 1) continue;
      TRIDENT_CHECK(out[i] == 1 || out[i] == s, op, ": shapes ", c, " (cond), ", a, " and ", b,
                    " cannot be broadcast together (dim ", i, ": ", sizes[0], ", ", sizes[1], ", ", sizes[2], ")");
      out[i] = s;
    }
  }
  return out;
}

// The gradient of a tensor picked where cond == pick_when: g there, 0 elsewhere, summed to `shape`.
Tensor picked_grad(const Tensor& g, const Tensor& cond, bool pick_when, const Shape& shape) {
  if (recording_backward())  // NOTE [Higher-order gradients]: the same selection, recorded
    return sum_to(pick_when ? where(cond, g, 0.0) : where(cond, 0.0, g), shape);
  const Shape gs = broadcast_shapes(g.sizes(), cond.sizes(), "where backward");
  return sum_to(TRIDENT_KERNEL(where_scalar)(cond, g, 0.0, pick_when, gs), shape);
}

// Nonzero is true (PyTorch's logical ops accept any dtype).
Tensor as_bool(const Tensor& t) {
  return t.dtype() == DType::Bool ? t.detach() : TRIDENT_KERNEL(compare_scalar)(CompareOp::Ne, t.detach(), 0.0);
}

Tensor logical_binary(LogicalOp op, const Tensor& a, const Tensor& b) {
  const char* name = logical_op_name(op);
  check_defined(name, a, "first operand");
  check_defined(name, b, "second operand");
  check_same_device(name, a, b);
  check_cpu(name, a);
  return cpu::logical(op, as_bool(a), as_bool(b));
}

Tensor float_class(FloatClass c, const char* name, const Tensor& x) {
  check_defined(name, x);
  check_cpu(name, x);
  return cpu::float_class(c, x.detach());
}

}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare_tensors(CompareOp::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare_tensors(CompareOp::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare_tensors(CompareOp::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare_tensors(CompareOp::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare_tensors(CompareOp::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare_tensors(CompareOp::Ge, a, b); }
Tensor eq(const Tensor& a, double s) { return compare_scalar(CompareOp::Eq, a, s); }
Tensor ne(const Tensor& a, double s) { return compare_scalar(CompareOp::Ne, a, s); }
Tensor lt(const Tensor& a, double s) { return compare_scalar(CompareOp::Lt, a, s); }
Tensor le(const Tensor& a, double s) { return compare_scalar(CompareOp::Le, a, s); }
Tensor gt(const Tensor& a, double s) { return compare_scalar(CompareOp::Gt, a, s); }
Tensor ge(const Tensor& a, double s) { return compare_scalar(CompareOp::Ge, a, s); }

Tensor logical_not(const Tensor& a) {
  check_defined("logical_not", a);
  check_cpu("logical_not", a);
  return cpu::logical_not(as_bool(a));
}
Tensor logical_and(const Tensor& a, const Tensor& b) { return logical_binary(LogicalOp::And, a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return logical_binary(LogicalOp::Or, a, b); }
Tensor logical_xor(const Tensor& a, const Tensor& b) { return logical_binary(LogicalOp::Xor, a, b); }

Tensor where(const Tensor& cond, const Tensor& a_in, const Tensor& b_in) {
  const auto promoted = autocast::promote(a_in, b_in);  // mixed dtypes only under autocast
  const Tensor& a = promoted.first;
  const Tensor& b = promoted.second;
  check_defined("where", cond, "cond");
  check_defined("where", a, "a");
  check_defined("where", b, "b");
  check_bool("where", cond, "cond");
  TRIDENT_CHECK(a.dtype() == b.dtype(), "where: expected a and b to have the same dtype, got ", a.dtype(), " (shape ",
                a.sizes(), ") and ", b.dtype(), " (shape ", b.sizes(), "); convert one with .to(dtype)");
  check_same_device("where", cond, a);
  check_same_device("where", a, b);
  check_device("where", a);
  const Shape shape = broadcast3("where", cond.sizes(), a.sizes(), b.sizes());
  Tensor out = TRIDENT_KERNEL(where)(cond.detach(), a.detach(), b.detach(), shape);
  if (autograd::any_requires_grad({a, b})) {
    const bool ga = a.requires_grad(), gb = b.requires_grad();
    autograd::record("WhereBackward", {a, b}, out,
                     [ga, gb, sc = SavedTensor(cond), za = a.sizes(), zb = b.sizes()](const TensorList& g) {
                       const Tensor c = sc.unpack();
                       TensorList r(2);
                       if (ga) r[0] = picked_grad(g[0], c, true, za);
                       if (gb) r[1] = picked_grad(g[0], c, false, zb);
                       return r;
                     }, kDifferentiable);
  }
  return out;
}

namespace {
// where(cond, x, s) (x_when_true) or where(cond, s, x).
Tensor where_scalar(const char* name, const Tensor& cond, const Tensor& x, double s, bool x_when_true) {
  check_defined(name, cond, x_when_true ? "cond" : "mask");
  check_defined(name, x);
  check_bool(name, cond, x_when_true ? "cond" : "mask");
  check_same_device(name, cond, x);
  check_device(name, x);
  check_scalar_fits(name, s, x.dtype());
  const Shape shape = broadcast_shapes(x.sizes(), cond.sizes(), name);
  Tensor out = TRIDENT_KERNEL(where_scalar)(cond.detach(), x.detach(), s, x_when_true, shape);
  if (autograd::any_requires_grad({x})) {
    autograd::record(x_when_true ? "WhereBackward" : "MaskedFillBackward", {x}, out,
                     [x_when_true, sc = SavedTensor(cond), zx = x.sizes()](const TensorList& g) {
                       return TensorList{picked_grad(g[0], sc.unpack(), x_when_true, zx)};
                     }, kDifferentiable);
  }
  return out;
}
}  // namespace

Tensor where(const Tensor& cond, const Tensor& a, double b) { return where_scalar("where", cond, a, b, true); }
Tensor where(const Tensor& cond, double a, const Tensor& b) { return where_scalar("where", cond, b, a, false); }
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  return where_scalar("masked_fill", mask, x, value, false);
}

const Tensor& masked_fill_(const Tensor& self, const Tensor& mask, double value) {
  check_defined("masked_fill_", self, "self");
  check_defined("masked_fill_", mask, "mask");
  check_bool("masked_fill_", mask, "mask");
  check_same_device("masked_fill_", self, mask);
  check_device("masked_fill_", self);
  check_inplace("masked_fill_", self);
  check_scalar_fits("masked_fill_", value, self.dtype());
  TRIDENT_CHECK(broadcast_shapes(self.sizes(), mask.sizes(), "masked_fill_") == self.sizes(),
                "masked_fill_: mask's shape ", mask.sizes(), " does not broadcast to self's shape ", self.sizes());
  TRIDENT_KERNEL(masked_fill_)(self, mask.detach(), value);
  return self;
}

Tensor isnan(const Tensor& x) { return float_class(FloatClass::Nan, "isnan", x); }
Tensor isinf(const Tensor& x) { return float_class(FloatClass::Inf, "isinf", x); }
Tensor isfinite(const Tensor& x) { return float_class(FloatClass::Finite, "isfinite", x); }

}  // namespace trident
