#include "ops/cuda/compare.h"

#include "ops/cuda/common.cuh"

namespace trident::cuda {

namespace {

__device__ __forceinline__ bool cmp(CompareOp op, float a, float b) {
  switch (op) {
    case CompareOp::Eq: return math::Eq{}(a, b);
    case CompareOp::Ne: return math::Ne{}(a, b);
    case CompareOp::Lt: return math::Lt{}(a, b);
    case CompareOp::Le: return math::Le{}(a, b);
    case CompareOp::Gt: return math::Gt{}(a, b);
    case CompareOp::Ge: return math::Ge{}(a, b);
  }
  return false;
}

template <typename T>
struct CompareF {
  CompareOp op;
  __device__ bool operator()(T a, T b) const { return cmp(op, static_cast<float>(a), static_cast<float>(b)); }
};

template <typename T>
struct CompareScalarF {
  CompareOp op;
  float s;
  __device__ bool operator()(T a) const { return cmp(op, static_cast<float>(a), s); }
};

template <typename T>
struct WhereF {
  __device__ T operator()(bool c, T a, T b) const { return c ? a : b; }
};

template <typename T>
struct WhereScalarF {
  T s;
  bool x_when_true;
  __device__ T operator()(bool c, T x) const { return c == x_when_true ? x : s; }
};

// The scalar as the CPU compares it: rounded to the tensor's dtype (NOTE in ops/cpu/compare.cpp).
template <typename T>
float scalar_as(double s) {
  return static_cast<float>(static_cast<T>(static_cast<float>(s)));
}

}  // namespace

// The host side: not compiled by the CPU emulator (tests/simt/simt.h), whose tests launch the
// kernels above themselves.
#if !defined(TRIDENT_SIMT)
Tensor compare(CompareOp op, const Tensor& a, const Tensor& b) {
  Tensor out = empty_on(broadcast_shapes(a.sizes(), b.sizes(), compare_op_name(op)), DType::Bool, a.device());
  TRIDENT_DISPATCH_CUDA_FLOATING(a.dtype(), "compare", [&] {
    elementwise<bool, scalar_t, scalar_t>(out, {a, b}, CompareF<scalar_t>{op});
  });
  return out;
}

Tensor compare_scalar(CompareOp op, const Tensor& a, double s) {
  Tensor out = empty_on(a.sizes(), DType::Bool, a.device());
  TRIDENT_DISPATCH_CUDA_FLOATING(a.dtype(), "compare_scalar", [&] {
    elementwise<bool, scalar_t>(out, {a}, CompareScalarF<scalar_t>{op, scalar_as<scalar_t>(s)});
  });
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, const Shape& shape) {
  Tensor out = empty_on(shape, a.dtype(), a.device());
  TRIDENT_DISPATCH_CUDA_FLOATING(a.dtype(), "where", [&] {
    elementwise<scalar_t, bool, scalar_t, scalar_t>(out, {cond, a, b}, WhereF<scalar_t>{});
  });
  return out;
}

Tensor where_scalar(const Tensor& cond, const Tensor& x, double s, bool x_when_true, const Shape& shape) {
  Tensor out = empty_on(shape, x.dtype(), x.device());
  TRIDENT_DISPATCH_CUDA_FLOATING(x.dtype(), "where", [&] {
    elementwise<scalar_t, bool, scalar_t>(out, {cond, x},
                                          WhereScalarF<scalar_t>{static_cast<scalar_t>(scalar_as<scalar_t>(s)), x_when_true});
  });
  return out;
}

void masked_fill_(const Tensor& self, const Tensor& mask, double s) {
  TRIDENT_DISPATCH_CUDA_FLOATING(self.dtype(), "masked_fill_", [&] {
    elementwise<scalar_t, bool, scalar_t>(self, {mask, self},
                                          WhereScalarF<scalar_t>{static_cast<scalar_t>(scalar_as<scalar_t>(s)), false});
  });
  self.bump_version();
}

#endif  // !TRIDENT_SIMT

}  // namespace trident::cuda
