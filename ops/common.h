// Argument checks shared by the op families, each naming the op and the offending values.
#pragma once

#include "autograd/node.h"
#include "core/profiler.h"
#include "core/tensor.h"
#include "trident_config.h"

namespace trident::ops_detail {

using autograd::SavedTensor;
using autograd::TensorList;

// NOTE [Higher-order gradients] (autograd/engine.h): a formula recorded with kDifferentiable
// computes with differentiable ops whenever recording_backward() (a create_graph backward is
// running it with grad mode on), and may use its fast kernels otherwise. A kernel formula linear in
// the gradient g whose coefficient is piecewise constant in the saved tensors (a mask, a sign,
// the share of a tie) becomes g * (the kernel applied to ones): differentiable in g, and with no
// derivative through the coefficient, as there is none away from the kinks.
constexpr autograd::Backward kDifferentiable = autograd::Backward::Differentiable;
inline bool recording_backward() { return autograd::GradMode::is_enabled(); }

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
  TRIDENT_CHECK(t.device().is_cpu(), op, ": no ", t.device().is_cuda() ? "CUDA" : "device", " kernel yet (tensor on ",
                t.device(), "); move it to the CPU with .to(kCPU)");
}

// NOTE [Device dispatch]: a family with CUDA kernels checks its tensors with check_device and
// calls its kernels as TRIDENT_KERNEL(name)(args...): trident::cuda::name (ops/cuda/<family>.h)
// when any tensor argument is on a CUDA device, else trident::cpu::name. The two have the same
// signature and contract. In a build without CUDA it is the CPU kernel, and check_device refuses
// CUDA tensors as check_cpu does.
inline void check_device(const char* op, const Tensor& t) {
#if TRIDENT_HAVE_CUDA
  (void)op;
  (void)t;
#else
  check_cpu(op, t);
#endif
}

inline bool is_cuda_arg(const Tensor& t) { return t.defined() && t.device().is_cuda(); }
inline int cuda_device_index(const Tensor& t) { return t.device().index; }
template <typename X>
int cuda_device_index(const X&) {
  return -1;
}
template <typename X>
bool is_cuda_arg(const X&) {
  return false;
}
// The device index of the first CUDA tensor argument, -1 when there is none.
template <typename... A>
int cuda_index(const A&... a) {
  int index = -1;
  const auto pick = [&index](const auto& x) {
    if (index < 0 && is_cuda_arg(x)) index = cuda_device_index(x);
  };
  (pick(a), ...);
  return index;
}

inline void check_floating(const char* op, const Tensor& t) {
  TRIDENT_CHECK(is_floating(t.dtype()), op, ": expected a floating-point tensor, got ", t.dtype());
}

// The usual checks of a floating-point op of two tensors (matmul, linear, mse_loss,
// add_layer_norm): both defined (named a_name and b_name in the error), one dtype and device, a
// device the family runs on, a floating dtype.
inline void check_floating_pair(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name) {
  check_defined(op, a, a_name);
  check_defined(op, b, b_name);
  check_same_dtype(op, a, b);
  check_same_device(op, a, b);
  check_device(op, a);
  check_floating(op, a);
}

// In-place ops refuse to rewrite a tensor autograd may need (NOTE [In-place and autograd]).
inline void check_inplace(const char* op, const Tensor& self, const Tensor& other = Tensor()) {
  if (!autograd::GradMode::is_enabled()) return;
  TRIDENT_CHECK(!self.requires_grad() && !(other.defined() && other.requires_grad()), op,
                ": in-place operations on tensors that require grad are not supported while grad mode is on; use the "
                "out-of-place form, or wrap the update in a NoGradGuard (as optimizers do)");
}

}  // namespace trident::ops_detail

// Each call is a profiler scope (NOTE [Op profiler] in core/profiler.h) named after the kernel.
#if TRIDENT_HAVE_CUDA
#define TRIDENT_KERNEL(FN)                                                                            \
  [&](auto&&... trident_args_) -> decltype(auto) {                                                    \
    const int trident_cuda_ = ::trident::ops_detail::cuda_index(trident_args_...);                    \
    ::trident::profiler::Scope trident_scope_(#FN, trident_cuda_);                                    \
    if (trident_cuda_ >= 0) return ::trident::cuda::FN(trident_args_...);                            \
    return ::trident::cpu::FN(trident_args_...);                                                      \
  }
#else
#define TRIDENT_KERNEL(FN)                                                                            \
  [&](auto&&... trident_args_) -> decltype(auto) {                                                    \
    ::trident::profiler::Scope trident_scope_(#FN);                                                   \
    return ::trident::cpu::FN(trident_args_...);                                                      \
  }
#endif
