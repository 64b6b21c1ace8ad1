#include "ops/cuda/arith.h"

#include "ops/cuda/common.cuh"

namespace trident::cuda {

namespace {

template <typename C>
__device__ __forceinline__ C apply(BinaryOp op, C x, C y) {
  switch (op) {
    case BinaryOp::Add: return math::Add{}(x, y);
    case BinaryOp::Sub: return math::Sub{}(x, y);
    case BinaryOp::Mul: return math::Mul{}(x, y);
    case BinaryOp::Div: return math::Div{}(x, y);
    case BinaryOp::Maximum: return math::Maximum{}(x, y);
    case BinaryOp::Minimum: return math::Minimum{}(x, y);
  }
  return x;
}

template <typename T>
struct BinaryF {
  BinaryOp op;
  __device__ T operator()(T a, T b) const {
    using C = compute_t<T>;
    return static_cast<T>(apply<C>(op, static_cast<C>(a), static_cast<C>(b)));
  }
};

template <typename T>
struct ScalarF {
  BinaryOp op;
  compute_t<T> s;
  bool scalar_first;
  __device__ T operator()(T a) const {
    using C = compute_t<T>;
    const C x = static_cast<C>(a);
    return static_cast<T>(scalar_first ? apply<C>(op, s, x) : apply<C>(op, x, s));
  }
};

template <typename T>
struct NegF {
  __device__ T operator()(T a) const { return static_cast<T>(-static_cast<compute_t<T>>(a)); }
};

template <typename C>
__device__ __forceinline__ C max_min_grad_of(bool is_max, bool first, C g, C a, C b) {
  if (is_max) return first ? math::MaxMinGrad<true, true>{}(g, a, b) : math::MaxMinGrad<true, false>{}(g, a, b);
  return first ? math::MaxMinGrad<false, true>{}(g, a, b) : math::MaxMinGrad<false, false>{}(g, a, b);
}

template <typename T>
struct MaxMinGradF {
  bool is_max, first;
  __device__ T operator()(T g, T a, T b) const {
    using C = compute_t<T>;
    return static_cast<T>(max_min_grad_of<C>(is_max, first, static_cast<C>(g), static_cast<C>(a), static_cast<C>(b)));
  }
};

template <typename T>
struct MaxMinGradScalarF {
  bool is_max;
  compute_t<T> s;
  __device__ T operator()(T g, T a) const {
    using C = compute_t<T>;
    return static_cast<T>(max_min_grad_of<C>(is_max, true, static_cast<C>(g), static_cast<C>(a), s));
  }
};

}  // namespace

// The host side: not compiled by the CPU emulator (tests/simt/simt.h), whose tests launch the
// kernels above themselves.
#if !defined(TRIDENT_SIMT)
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const Shape shape = broadcast_shapes(a.sizes(), b.sizes(), binary_op_name(op));
  Tensor out = empty_on(shape, a.dtype(), a.device());
  TRIDENT_DISPATCH_CUDA_FLOATING(a.dtype(), "binary", [&] {
    elementwise<scalar_t, scalar_t, scalar_t>(out, {a, b}, BinaryF<scalar_t>{op});
  });
  return out;
}

Tensor binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first) {
  Tensor out = empty_on(a.sizes(), a.dtype(), a.device());
  TRIDENT_DISPATCH_CUDA_FLOATING(a.dtype(), "binary_scalar", [&] {
    elementwise<scalar_t, scalar_t>(out, {a}, ScalarF<scalar_t>{op, static_cast<compute_t<scalar_t>>(s), scalar_first});
  });
  return out;
}

void binary_inplace(BinaryOp op, const Tensor& self, const Tensor& other) {
  TRIDENT_DISPATCH_CUDA_FLOATING(self.dtype(), "binary_inplace", [&] {
    elementwise<scalar_t, scalar_t, scalar_t>(self, {self, other}, BinaryF<scalar_t>{op});
  });
}

void binary_scalar_inplace(BinaryOp op, const Tensor& self, double s) {
  TRIDENT_DISPATCH_CUDA_FLOATING(self.dtype(), "binary_scalar_inplace", [&] {
    elementwise<scalar_t, scalar_t>(self, {self}, ScalarF<scalar_t>{op, static_cast<compute_t<scalar_t>>(s), false});
  });
}

Tensor neg(const Tensor& a) {
  Tensor out = empty_on(a.sizes(), a.dtype(), a.device());
  TRIDENT_DISPATCH_CUDA_FLOATING(a.dtype(), "neg", [&] { elementwise<scalar_t, scalar_t>(out, {a}, NegF<scalar_t>{}); });
  return out;
}

Tensor max_min_grad(BinaryOp op, bool first, const Tensor& g, const Tensor& a, const Tensor& b) {
  Tensor out = empty_on(g.sizes(), g.dtype(), g.device());
  TRIDENT_DISPATCH_CUDA_FLOATING(g.dtype(), "max_min_grad", [&] {
    elementwise<scalar_t, scalar_t, scalar_t, scalar_t>(out, {g, a, b},
                                                        MaxMinGradF<scalar_t>{op == BinaryOp::Maximum, first});
  });
  return out;
}

Tensor max_min_grad_scalar(BinaryOp op, const Tensor& g, const Tensor& a, double s) {
  Tensor out = empty_on(g.sizes(), g.dtype(), g.device());
  TRIDENT_DISPATCH_CUDA_FLOATING(g.dtype(), "max_min_grad_scalar", [&] {
    elementwise<scalar_t, scalar_t, scalar_t>(
        out, {g, a}, MaxMinGradScalarF<scalar_t>{op == BinaryOp::Maximum, static_cast<compute_t<scalar_t>>(s)});
  });
  return out;
}

#endif  // !TRIDENT_SIMT

}  // namespace trident::cuda
