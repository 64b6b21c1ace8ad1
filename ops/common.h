// Argument checks shared by the op families, each naming the op and the offending values.
#pragma once

#include "autograd/node.h"
#include "core/tensor.h"

namespace trident::ops_detail {

using autograd::SavedTensor;
using autograd::TensorList;

inline void check_defined(const char* op, const Tensor& t, const char* arg = "input") {
  TRIDENT_CHECK(t.defined(), op, ": ", arg, " is an undefined tensor");
}

inline void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  TRIDENT_CHECK(a.dtype() == b.dtype(), op, ": expected both tensors to have the same dtype, got ", a.dtype(), " (shape ",
                a.sizes(), ") and ", b.dtype(), " (shape ", b.sizes(), "); convert one with .to(dtype)");
}

inline void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  TRIDENT_CHECK(a.device() == b.device(), op, ": expected both tensors on the same device, got ", a.device(), " and ",
                b.device());
}

// Until a device has kernels for a family, its ops say so instead of misbehaving.
inline void check_cpu(const char* op, const Tensor& t) {
  TRIDENT_CHECK(t.device().is_cpu(), op, ": no kernel for tensors on ", t.device(), " in this build");
}

inline void check_floating(const char* op, const Tensor& t) {
  TRIDENT_CHECK(is_floating(t.dtype()), op, ": expected a floating-point tensor, got ", t.dtype());
}

// In-place ops refuse to rewrite a tensor autograd may need (NOTE [In-place and autograd]).
inline void check_inplace(const char* op, const Tensor& self, const Tensor& other = Tensor()) {
  if (!autograd::GradMode::is_enabled()) return;
  TRIDENT_CHECK(!self.requires_grad() && !(other.defined() && other.requires_grad()), op,
                ": in-place operations on tensors that require grad are not supported while grad mode is on; use the "
                "out-of-place form, or wrap the update in a NoGradGuard (as optimizers do)");
}

}  // namespace trident::ops_detail
