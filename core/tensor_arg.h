// TensorArg: a tensor as a hand-written kernel sees it -- a typed pointer, the sizes and the
// strides -- in a small trivially copyable struct that a CUDA kernel takes by value and a CPU
// loop uses the same way.
//
// NOTE [Kernel arguments]: a kernel written outside Trident's ops (a user's .cu file, see
// docs/extending.md and examples/custom_op) gets its tensors as TensorArg<T>: `data` points at
// the first element (storage base plus the tensor's offset) in the tensor's device memory,
// `sizes` and `strides` are in elements (a stride is 0 on a broadcast dim), and
// `arg[i]` reads the i-th element in row-major order through the strides, so views (transposed,
// sliced, expanded) need no copy. `contiguous` tells a kernel when `data[i]` is enough. T
// carries const for read-only inputs: tensor_arg<const float>(x). The struct does not own the
// memory: the Tensor must outlive the kernel (on CUDA: until the stream has run it, which holds
// while the tensors stay referenced by the op that launched it). CUDA launches go on
// trident::cuda::current_stream(device) (core/cuda/stream.h). Everything here is host and device
// code, and is tested on CPU tensors (tests/core/tensor_arg_test.cpp).
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/macros.h"
#include "core/tensor.h"

namespace trident {

inline constexpr int kMaxKernelDims = 8;

template <typename T>
struct TensorArg {
  T* data = nullptr;
  int32_t ndim = 0;
  int64_t numel = 0;
  bool contiguous = true;
  int64_t sizes[kMaxKernelDims] = {};
  int64_t strides[kMaxKernelDims] = {};  // in elements

  // Element offset, from `data`, of the i-th element in row-major order (0 <= i < numel).
  TRIDENT_INLINE int64_t offset_of(int64_t i) const {
    int64_t off = 0;
    for (int32_t d = ndim - 1; d >= 0; --d) {
      off += (i % sizes[d]) * strides[d];
      i /= sizes[d];
    }
    return off;
  }
  // The i-th element in row-major order, through the strides.
  TRIDENT_INLINE T& operator[](int64_t i) const { return contiguous ? data[i] : data[offset_of(i)]; }
};

// The TensorArg of t. T must be t's element type (float for f32, Half for f16, ..., optionally
// const); t must be defined and have at most kMaxKernelDims dims. Host code only.
template <typename T>
TensorArg<T> tensor_arg(const Tensor& t) {
  using Element = std::remove_const_t<T>;
  TRIDENT_CHECK(t.defined(), "tensor_arg: the tensor is undefined");
  TRIDENT_CHECK(dtype_of<Element> == t.dtype(), "tensor_arg<", dtype_of<Element>, ">: the tensor has dtype ", t.dtype());
  TRIDENT_CHECK(t.dim() <= kMaxKernelDims, "tensor_arg: at most ", kMaxKernelDims, " dims, got shape ", t.sizes());
  TensorArg<T> a;
  a.data = static_cast<T*>(t.data_ptr());
  a.ndim = static_cast<int32_t>(t.dim());
  a.numel = t.numel();
  a.contiguous = t.is_contiguous();
  for (int32_t d = 0; d < a.ndim; ++d) {
    a.sizes[d] = t.sizes()[static_cast<size_t>(d)];
    a.strides[d] = t.strides()[static_cast<size_t>(d)];
  }
  return a;
}

}  // namespace trident
