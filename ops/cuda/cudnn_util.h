// What every cuDNN call of the CUDA backend shares: a handle per (device, thread) bound to the
// current stream, RAII descriptors, and the dtype mapping. Include only from code built when
// TRIDENT_HAVE_CUDA. Every cuDNN call goes through TRIDENT_CUDNN_CHECK (core/cuda/check.h), which
// throws a trident::Error with cudnnGetErrorString, cuDNN's last error message and file:line.
//
// NOTE [cuDNN handles]: a cudnnHandle_t must not be used by two threads at once, and creating one
// costs milliseconds, so each thread borrows one handle per device on first use, keeps it, and
// gives it back to a process-wide pool when the thread exits (a data-loader or pipeline thread
// that comes and goes reuses the same few handles). Handles are never destroyed: destroying them
// from a static destructor races the CUDA runtime's own teardown (as cuBLASLt's in
// ops/cuda/linalg.cpp). cudnn_handle(device) also sets the handle's stream to the thread's
// current stream of that device (NOTE [Current stream]) on every call, which costs a store, so a
// StreamGuard between two ops is always honoured.
#pragma once

#include <cudnn.h>

#include "core/cuda/check.h"
#include "core/dtype.h"

namespace trident::cuda {

// The calling thread's handle for cuda:device, bound to current_stream(device).
cudnnHandle_t cudnn_handle(int device);

// CUDNN_DATA_FLOAT, _HALF or _BFLOAT16; an Error naming `op` for any other dtype (f64 is a CPU
// dtype, NOTE [CUDA dtypes]).
cudnnDataType_t cudnn_dtype(DType dt, const char* op);

// Owners of cuDNN descriptors: created in the constructor, destroyed with the object.
class TensorDescriptor {
 public:
  TensorDescriptor() { TRIDENT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d_)); }
  ~TensorDescriptor() { cudnnDestroyTensorDescriptor(d_); }
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
  // A contiguous NCHW tensor.
  void set_nchw(cudnnDataType_t t, int n, int c, int h, int w) {
    TRIDENT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d_, CUDNN_TENSOR_NCHW, t, n, c, h, w));
  }
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

class FilterDescriptor {
 public:
  FilterDescriptor() { TRIDENT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d_)); }
  ~FilterDescriptor() { cudnnDestroyFilterDescriptor(d_); }
  FilterDescriptor(const FilterDescriptor&) = delete;
  FilterDescriptor& operator=(const FilterDescriptor&) = delete;
  // A contiguous [k, c, h, w] filter (k output channels, c input channels per group).
  void set_kchw(cudnnDataType_t t, int k, int c, int h, int w) {
    TRIDENT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d_, t, CUDNN_TENSOR_NCHW, k, c, h, w));
  }
  cudnnFilterDescriptor_t get() const { return d_; }

 private:
  cudnnFilterDescriptor_t d_ = nullptr;
};

class ConvolutionDescriptor {
 public:
  ConvolutionDescriptor() { TRIDENT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d_)); }
  ~ConvolutionDescriptor() { cudnnDestroyConvolutionDescriptor(d_); }
  ConvolutionDescriptor(const ConvolutionDescriptor&) = delete;
  ConvolutionDescriptor& operator=(const ConvolutionDescriptor&) = delete;
  cudnnConvolutionDescriptor_t get() const { return d_; }

 private:
  cudnnConvolutionDescriptor_t d_ = nullptr;
};

}  // namespace trident::cuda
