#include "swiglu.h"

#include "core/tensor_arg.h"
#include "swiglu_math.h"
#if SWIGLU_WITH_CUDA
#include "swiglu_cuda.h"
#endif

namespace custom_op {

using trident::Tensor;
using trident::TensorArg;
using trident::tensor_arg;
using trident::autograd::TensorList;

namespace {

// Errors thrown in forward reach the user prefixed with "in forward of SwiGLU".
void check_inputs(const Tensor& a, const Tensor& b) {
  TRIDENT_CHECK(a.defined() && b.defined(), "gate and up must both be defined");
  TRIDENT_CHECK(a.sizes() == b.sizes(), "gate has shape ", a.sizes(), " but up has shape ", b.sizes());
  TRIDENT_CHECK(a.dtype() == b.dtype(), "gate is ", a.dtype(), " but up is ", b.dtype());
  TRIDENT_CHECK(a.dtype() == trident::DType::F32 || a.dtype() == trident::DType::F64, "f32 and f64 only, got ",
                a.dtype());
  TRIDENT_CHECK(a.device() == b.device(), "gate is on ", a.device(), " but up is on ", b.device());
}

Tensor empty_like_on(const Tensor& t) {
  return trident::empty(t.sizes(), trident::TensorOptions(t.dtype()).device(t.device()));
}

}  // namespace

// ---- CPU kernels: strided reads through TensorArg (views need no copy), contiguous writes ----

template <typename T>
static void forward_loop(TensorArg<const T> a, TensorArg<const T> b, TensorArg<T> out) {
  trident::parallel_for(0, out.numel, 1 << 15, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out.data[i] = swiglu_math::forward(a[i], b[i]);
  });
}

template <typename T>
static void backward_loop(TensorArg<const T> g, TensorArg<const T> a, TensorArg<const T> b, TensorArg<T> ga,
                          TensorArg<T> gb) {
  trident::parallel_for(0, ga.numel, 1 << 15, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) swiglu_math::backward(g[i], a[i], b[i], ga.data[i], gb.data[i]);
  });
}

void swiglu_forward_cpu(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (a.dtype() == trident::DType::F64) {
    forward_loop<double>(tensor_arg<const double>(a), tensor_arg<const double>(b), tensor_arg<double>(out));
  } else {
    forward_loop<float>(tensor_arg<const float>(a), tensor_arg<const float>(b), tensor_arg<float>(out));
  }
}

void swiglu_backward_cpu(const Tensor& g, const Tensor& a, const Tensor& b, const Tensor& ga, const Tensor& gb) {
  if (a.dtype() == trident::DType::F64) {
    backward_loop<double>(tensor_arg<const double>(g), tensor_arg<const double>(a), tensor_arg<const double>(b),
                          tensor_arg<double>(ga), tensor_arg<double>(gb));
  } else {
    backward_loop<float>(tensor_arg<const float>(g), tensor_arg<const float>(a), tensor_arg<const float>(b),
                         tensor_arg<float>(ga), tensor_arg<float>(gb));
  }
}

// ---- the autograd function: forward and backward side by side, one dispatch per device ----

Tensor SwiGLU::forward(trident::FunctionCtx& ctx, const Tensor& gate, const Tensor& up) {
  check_inputs(gate, up);
  Tensor out = empty_like_on(gate);
  if (gate.device().is_cuda()) {
#if SWIGLU_WITH_CUDA
    swiglu_forward_cuda(gate, up, out);
#else
    TRIDENT_FAIL("this build of the example has no CUDA kernel (Trident was built without CUDA)");
#endif
  } else {
    swiglu_forward_cpu(gate, up, out);
  }
  ctx.save_for_backward({gate, up});
  return out;
}

TensorList SwiGLU::backward(trident::FunctionCtx& ctx, const TensorList& grads) {
  const TensorList saved = ctx.saved_tensors();
  const Tensor &a = saved[0], &b = saved[1];
  Tensor ga = empty_like_on(a), gb = empty_like_on(b);
  if (a.device().is_cuda()) {
#if SWIGLU_WITH_CUDA
    swiglu_backward_cuda(grads[0], a, b, ga, gb);
#else
    TRIDENT_FAIL("this build of the example has no CUDA kernel (Trident was built without CUDA)");
#endif
  } else {
    swiglu_backward_cpu(grads[0], a, b, ga, gb);
  }
  // One kernel computes both; an input that needs no gradient gets none.
  return {ctx.needs_input_grad(0) ? ga : Tensor(), ctx.needs_input_grad(1) ? gb : Tensor()};
}

Tensor swiglu(const Tensor& gate, const Tensor& up) { return SwiGLU::apply(gate, up); }

Tensor swiglu_reference(const Tensor& gate, const Tensor& up) {
  return trident::mul(trident::mul(gate, trident::sigmoid(gate)), up);
}

}  // namespace custom_op
