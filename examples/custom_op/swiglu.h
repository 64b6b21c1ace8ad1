// A fused SwiGLU for Trident, defined outside Trident's source tree:
//   swiglu(gate, up) = silu(gate) * up,   silu(x) = x * sigmoid(x)
// the activation of LLaMA-style MLPs (down(swiglu(gate(x), up(x)))). Fused, it reads its two
// inputs once and writes one output, where the composition of built-in ops makes three passes
// and keeps two intermediates for backward.
#pragma once

#include <trident/trident.h>

namespace custom_op {

// gate and up: the same shape, the same floating dtype (f32 or f64), on the CPU (or on a CUDA
// device when this example was built against a CUDA build of Trident; UNTESTED until a GPU run).
// Differentiable in both inputs; errors name "SwiGLU" and the offending shapes, dtypes, devices.
trident::Tensor swiglu(const trident::Tensor& gate, const trident::Tensor& up);

// The same function composed of Trident's built-in ops: the reference swiglu is tested against.
trident::Tensor swiglu_reference(const trident::Tensor& gate, const trident::Tensor& up);

// The autograd function behind swiglu() (autograd/function.h, NOTE [User functions]).
struct SwiGLU : trident::autograd::Function<SwiGLU> {
  static constexpr const char* name = "SwiGLU";
  static trident::Tensor forward(trident::FunctionCtx& ctx, const trident::Tensor& gate, const trident::Tensor& up);
  static trident::autograd::TensorList backward(trident::FunctionCtx& ctx, const trident::autograd::TensorList& grads);
};

// The kernels, by device (swiglu.cpp dispatches): out = swiglu(a, b); (ga, gb) from g.
void swiglu_forward_cpu(const trident::Tensor& a, const trident::Tensor& b, const trident::Tensor& out);
void swiglu_backward_cpu(const trident::Tensor& g, const trident::Tensor& a, const trident::Tensor& b,
                         const trident::Tensor& ga, const trident::Tensor& gb);

}  // namespace custom_op
