#include "ops/cuda/unary.h"

#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/math/unary.h"

namespace trident::cuda {

namespace {

__device__ __forceinline__ float forward(UnaryOp op, float x) {
  switch (op) {
    case UnaryOp::Relu: return math::Relu{}(x);
    case UnaryOp::Tanh: return math::Tanh{}(x);
    case UnaryOp::Abs: return math::Abs{}(x);
    case UnaryOp::Exp: return math::Exp{}(x);
    case UnaryOp::Log: return math::Log{}(x);
    case UnaryOp::Sqrt: return math::Sqrt{}(x);
    case UnaryOp::Rsqrt: return math::Rsqrt{}(x);
    case UnaryOp::Sigmoid: return math::Sigmoid{}(x);
    case UnaryOp::Gelu: return math::Gelu{}(x);
    case UnaryOp::GeluTanh: return math::GeluTanh{}(x);
  }
  return x;
}

__device__ __forceinline__ float backward(UnaryOp op, float g, float s) {
  switch (op) {
    case UnaryOp::Relu: return math::ReluBackward{}(g, s);
    case UnaryOp::Tanh: return math::TanhBackward{}(g, s);
    case UnaryOp::Abs: return math::AbsBackward{}(g, s);
    case UnaryOp::Exp: return math::ExpBackward{}(g, s);
    case UnaryOp::Log: return math::LogBackward{}(g, s);
    case UnaryOp::Sqrt: return math::SqrtBackward{}(g, s);
    case UnaryOp::Rsqrt: return math::RsqrtBackward{}(g, s);
    case UnaryOp::Sigmoid: return math::SigmoidBackward{}(g, s);
    case UnaryOp::Gelu: return math::GeluBackward{}(g, s);
    case UnaryOp::GeluTanh: return math::GeluTanhBackward{}(g, s);
  }
  return g;
}

// x^p with the special forms of math::with_pow, chosen per kernel (kind is uniform).
__device__ __forceinline__ float pow_of(math::PowKind kind, float p, float x) {
  switch (kind) {
    case math::PowKind::Zero: return math::PowZero{}(x);
    case math::PowKind::One: return math::PowOne{}(x);
    case math::PowKind::Square: return math::PowSquare{}(x);
    case math::PowKind::Cube: return math::PowCube{}(x);
    case math::PowKind::Sqrt: return math::Sqrt{}(x);
    case math::PowKind::Rsqrt: return math::Rsqrt{}(x);
    case math::PowKind::Reciprocal: return math::PowReciprocal{}(x);
    case math::PowKind::InvSquare: return math::PowInvSquare{}(x);
    case math::PowKind::General: break;
  }
  return std::pow(x, p);
}

template <typename T>
struct UnaryF {
  UnaryOp op;
  __device__ T operator()(T x) const { return static_cast<T>(forward(op, static_cast<float>(x))); }
};

template <typename T>
struct UnaryBackwardF {
  UnaryOp op;
  __device__ T operator()(T g, T s) const { return static_cast<T>(backward(op, static_cast<float>(g), static_cast<float>(s))); }
};

// NOTE [Relu into a narrower dtype] (ops/cpu/unary.h): In -> Out in one pass, and its gradient.
template <typename Out, typename In>
struct ReluToF {
  __device__ Out operator()(In x) const { return static_cast<Out>(math::Relu{}(static_cast<float>(x))); }
};
template <typename Out, typename G>
struct ReluToBackwardF {
  __device__ Out operator()(G g, G y) const {
    return static_cast<Out>(math::ReluBackward{}(static_cast<float>(g), static_cast<float>(y)));
  }
};

template <typename T>
struct PowF {
  math::PowKind kind;
  float p;
  __device__ T operator()(T x) const { return static_cast<T>(pow_of(kind, p, static_cast<float>(x))); }
};

template <typename T>
struct PowBackwardF {
  math::PowKind kind_m1;  // of p - 1
  float p_m1, p;
  __device__ T operator()(T g, T x) const {
    return static_cast<T>(static_cast<float>(g) * (p * pow_of(kind_m1, p_m1, static_cast<float>(x))));
  }
};

template <typename T>
struct ClampF {
  math::Clamp<float> f;
  __device__ T operator()(T x) const { return static_cast<T>(f(static_cast<float>(x))); }
};

template <typename T>
struct ClampBackwardF {
  math::ClampBackward<float> f;
  __device__ T operator()(T g, T x) const { return static_cast<T>(f(static_cast<float>(g), static_cast<float>(x))); }
};

template <template <typename> class F, typename... Args>
Tensor map1(const char* name, const Tensor& x, Args... args) {
  Tensor out = empty_on(x.sizes(), x.dtype(), x.device());
  TRIDENT_DISPATCH_CUDA_FLOATING(x.dtype(), "unary", [&] { elementwise<scalar_t, scalar_t>(out, {x}, F<scalar_t>{args...}); });
  return out;
}

template <template <typename> class F, typename... Args>
Tensor map2(const char* name, const Tensor& g, const Tensor& x, Args... args) {
  Tensor out = empty_on(x.sizes(), x.dtype(), x.device());
  TRIDENT_DISPATCH_CUDA_FLOATING(x.dtype(), "unary backward", [&] {
    elementwise<scalar_t, scalar_t, scalar_t>(out, {g, x}, F<scalar_t>{args...});
  });
  return out;
}

// NOTE [Hot unary ops]: the activations of every training step (ReLU, both GELUs) get kernels
// with the op fixed at compile time: with the switch inside the per-element loop the compiler
// cannot interleave the lanes of a 16-byte pack, and GELU ran at a third of PyTorch's speed on an
// H200. The other ops keep the one run-time-switch kernel per dtype (NOTE [CUDA dtypes]).
// The tanh GELU of f16 and bf16 tensors takes the fast-math forms (math::gpu::gelu_tanh<true>,
// NOTE [GELU on the GPU]).
template <UnaryOp Op>
struct Fixed {
  template <typename T>
  struct F {
    __device__ T operator()(T x) const {
      if constexpr (Op == UnaryOp::GeluTanh && !std::is_same_v<T, float>) {
        return static_cast<T>(math::gpu::gelu_tanh<true>(static_cast<float>(x)));
      } else {
        return static_cast<T>(forward(Op, static_cast<float>(x)));
      }
    }
  };
  template <typename T>
  struct B {
    __device__ T operator()(T g, T s) const {
      if constexpr (Op == UnaryOp::GeluTanh && !std::is_same_v<T, float>) {
        return static_cast<T>(static_cast<float>(g) * math::gpu::gelu_tanh_grad<true>(static_cast<float>(s)));
      } else {
        return static_cast<T>(backward(Op, static_cast<float>(g), static_cast<float>(s)));
      }
    }
  };
};

}  // namespace

// The host side: not compiled by the CPU emulator (tests/simt/simt.h), whose tests launch the
// kernels above themselves.
#if !defined(TRIDENT_SIMT)
Tensor unary(UnaryOp op, const Tensor& x) {
  switch (op) {
    case UnaryOp::Relu: return map1<Fixed<UnaryOp::Relu>::F>("relu", x);
    case UnaryOp::Gelu: return map1<Fixed<UnaryOp::Gelu>::F>("gelu", x);
    case UnaryOp::GeluTanh: return map1<Fixed<UnaryOp::GeluTanh>::F>("gelu", x);
    default: return map1<UnaryF>(unary_op_name(op), x, op);
  }
}

Tensor unary_backward(UnaryOp op, const Tensor& g, const Tensor& saved) {
  switch (op) {
    case UnaryOp::Relu: return map2<Fixed<UnaryOp::Relu>::B>("relu", g, saved);
    case UnaryOp::Gelu: return map2<Fixed<UnaryOp::Gelu>::B>("gelu", g, saved);
    case UnaryOp::GeluTanh: return map2<Fixed<UnaryOp::GeluTanh>::B>("gelu", g, saved);
    default: return map2<UnaryBackwardF>(unary_op_name(op), g, saved, op);
  }
}

Tensor relu_to(const Tensor& x, DType dtype) {
  Tensor out = empty_on(x.sizes(), dtype, x.device());
  TRIDENT_DISPATCH_CUDA_FLOATING(x.dtype(), "relu", [&] {
    using In = scalar_t;
    TRIDENT_DISPATCH_CUDA_FLOATING(dtype, "relu", [&] { elementwise<scalar_t, In>(out, {x}, ReluToF<scalar_t, In>{}); });
  });
  return out;
}

Tensor relu_to_backward(const Tensor& g_in, const Tensor& y, DType dtype) {
  const Tensor g = g_in.dtype() == y.dtype() ? g_in : g_in.to(y.dtype());
  Tensor out = empty_on(y.sizes(), dtype, y.device());
  TRIDENT_DISPATCH_CUDA_FLOATING(y.dtype(), "relu_backward", [&] {
    using G = scalar_t;
    TRIDENT_DISPATCH_CUDA_FLOATING(dtype, "relu_backward",
                                   [&] { elementwise<scalar_t, G, G>(out, {g, y}, ReluToBackwardF<scalar_t, G>{}); });
  });
  return out;
}

Tensor pow(const Tensor& x, double p) { return map1<PowF>("pow", x, math::pow_kind(p), static_cast<float>(p)); }

Tensor pow_backward(const Tensor& g, const Tensor& x, double p) {
  if (p == 0.0) return zeros(x.sizes(), TensorOptions(x.dtype()).device(x.device()));
  return map2<PowBackwardF>("pow_backward", g, x, math::pow_kind(p - 1.0), static_cast<float>(p - 1.0),
                            static_cast<float>(p));
}

Tensor clamp(const Tensor& x, double lo, double hi) {
  return map1<ClampF>("clamp", x, math::Clamp<float>{static_cast<float>(lo), static_cast<float>(hi)});
}

Tensor clamp_backward(const Tensor& g, const Tensor& x, double lo, double hi) {
  return map2<ClampBackwardF>("clamp_backward", g, x, math::ClampBackward<float>{static_cast<float>(lo), static_cast<float>(hi)});
}

#endif  // !TRIDENT_SIMT

}  // namespace trident::cuda
