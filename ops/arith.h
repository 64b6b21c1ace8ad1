// Element-wise arithmetic with NumPy broadcasting, differentiable.
//
// Both tensors must have the same dtype and device (no implicit promotion: mixing f32 and f64
// is an error that names both). A scalar takes the tensor's dtype.
//
// NOTE [In-place and autograd]: the in-place forms (add_, mul_, ...) bump the version counter
// and are allowed on tensors outside the graph, or under NoGradGuard (optimizer updates). On a
// tensor that requires grad while grad mode is on they throw instead of silently breaking the
// graph.
#pragma once

#include "core/tensor.h"

namespace trident {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor sub(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor div(const Tensor& a, double s);
Tensor rsub(const Tensor& a, double s);  // s - a
Tensor rdiv(const Tensor& a, double s);  // s / a
Tensor neg(const Tensor& a);

// Element-wise maximum / minimum with broadcasting (numeric dtypes). NaN in either operand gives
// NaN. Gradient: all to the larger (smaller) operand; on a tie each operand gets half, as in
// PyTorch. The scalar forms compare with s in the tensor's compute type; on a tie a gets half.
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, double s);
Tensor minimum(const Tensor& a, double s);

// In place: self op= other (other broadcasts to self's shape). Return self.
const Tensor& add_(const Tensor& self, const Tensor& other);
const Tensor& sub_(const Tensor& self, const Tensor& other);
const Tensor& mul_(const Tensor& self, const Tensor& other);
const Tensor& div_(const Tensor& self, const Tensor& other);
const Tensor& add_(const Tensor& self, double s);
const Tensor& sub_(const Tensor& self, double s);
const Tensor& mul_(const Tensor& self, double s);
const Tensor& div_(const Tensor& self, double s);
const Tensor& zero_(const Tensor& self);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return sub(a, s); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return div(a, s); }
inline Tensor operator+(double s, const Tensor& a) { return add(a, s); }
inline Tensor operator-(double s, const Tensor& a) { return rsub(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
inline Tensor operator/(double s, const Tensor& a) { return rdiv(a, s); }
inline Tensor operator-(const Tensor& a) { return neg(a); }

}  // namespace trident
