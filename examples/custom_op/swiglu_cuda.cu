// SwiGLU's CUDA kernels: the same per-element math as the CPU loop (swiglu_math.h), launched on
// Trident's current stream (core/cuda/stream.h, NOTE [Current stream]) with the tensors passed
// as TensorArg (core/tensor_arg.h, NOTE [Kernel arguments]): pointer, sizes and strides.
//
// Not yet run on a GPU: this file is compiled only against a CUDA build of Trident, and CI has no
// GPU. The test (test_swiglu.cpp) compares them with the CPU kernels when a GPU is present;
// Trident's own CPU test suite runs the kernels on its SIMT emulator
// (tests/simt/custom_op_simt_test.cpp), which compiles this file with TRIDENT_SIMT defined: the
// kernels only, the launchers under `#if !defined(TRIDENT_SIMT)`.
#include <algorithm>

#include "core/cuda/stream.h"
#include "core/tensor_arg.h"
#include "swiglu_cuda.h"
#include "swiglu_math.h"

namespace custom_op {

using trident::Tensor;
using trident::TensorArg;
using trident::tensor_arg;

namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535)); }

// Grid-stride loops: any size with a bounded grid.
template <typename T>
__global__ void forward_kernel(TensorArg<const T> a, TensorArg<const T> b, TensorArg<T> out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < out.numel; i += int64_t{gridDim.x} * blockDim.x)
    out.data[i] = swiglu_math::forward(a[i], b[i]);
}

template <typename T>
__global__ void backward_kernel(TensorArg<const T> g, TensorArg<const T> a, TensorArg<const T> b, TensorArg<T> ga,
                                TensorArg<T> gb) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < ga.numel; i += int64_t{gridDim.x} * blockDim.x)
    swiglu_math::backward(g[i], a[i], b[i], ga.data[i], gb.data[i]);
}

}  // namespace

#if !defined(TRIDENT_SIMT)
void swiglu_forward_cuda(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (out.numel() == 0) return;
  cudaStream_t stream = trident::cuda::current_stream(out.device());
  if (a.dtype() == trident::DType::F64) {
    forward_kernel<double><<<blocks_for(out.numel()), kThreads, 0, stream>>>(
        tensor_arg<const double>(a), tensor_arg<const double>(b), tensor_arg<double>(out));
  } else {
    forward_kernel<float><<<blocks_for(out.numel()), kThreads, 0, stream>>>(
        tensor_arg<const float>(a), tensor_arg<const float>(b), tensor_arg<float>(out));
  }
  TRIDENT_CUDA_CHECK(cudaGetLastError());
}

void swiglu_backward_cuda(const Tensor& g, const Tensor& a, const Tensor& b, const Tensor& ga, const Tensor& gb) {
  if (ga.numel() == 0) return;
  cudaStream_t stream = trident::cuda::current_stream(ga.device());
  if (a.dtype() == trident::DType::F64) {
    backward_kernel<double><<<blocks_for(ga.numel()), kThreads, 0, stream>>>(
        tensor_arg<const double>(g), tensor_arg<const double>(a), tensor_arg<const double>(b), tensor_arg<double>(ga),
        tensor_arg<double>(gb));
  } else {
    backward_kernel<float><<<blocks_for(ga.numel()), kThreads, 0, stream>>>(
        tensor_arg<const float>(g), tensor_arg<const float>(a), tensor_arg<const float>(b), tensor_arg<float>(ga),
        tensor_arg<float>(gb));
  }
  TRIDENT_CUDA_CHECK(cudaGetLastError());
}

#endif  // !TRIDENT_SIMT

}  // namespace custom_op
