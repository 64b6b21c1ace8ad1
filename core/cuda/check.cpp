#include "core/cuda/check.h"

#include <cublas_api.h>
#include <cudnn.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace trident::cuda::detail {

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  cudaGetLastError();  // clear a non-sticky error so the next call does not report it again
  trident::detail::throw_error(file, line, expr,
                               trident::detail::str("CUDA error ", cudaGetErrorName(err), " (", static_cast<int>(err),
                                                    "): ", cudaGetErrorString(err), " in ", expr));
}

void throw_cublas_error(int status, const char* expr, const char* file, int line) {
  trident::detail::throw_error(file, line, expr,
                               trident::detail::str("cuBLAS error ", cublasGetStatusName(static_cast<cublasStatus_t>(status)),
                                                    " (", status, "): ",
                                                    cublasGetStatusString(static_cast<cublasStatus_t>(status)), " in ", expr));
}

void throw_cudnn_error(int status, const char* expr, const char* file, int line) {
  char last[512] = {0};
  cudnnGetLastErrorString(last, sizeof(last));
  trident::detail::throw_error(file, line, expr,
                               trident::detail::str("cuDNN error (", status,
                                                    "): ", cudnnGetErrorString(static_cast<cudnnStatus_t>(status)),
                                                    last[0] ? " - " : "", last, " in ", expr));
}

void throw_nccl_error(int status, const char* expr, const char* file, int line) {
  trident::detail::throw_error(file, line, expr,
                               trident::detail::str("NCCL error (", status,
                                                    "): ", ncclGetErrorString(static_cast<ncclResult_t>(status)), " in ", expr));
}

bool launch_blocking() {
#ifndef NDEBUG
  return true;
#else
  static const bool blocking = [] {
    const char* e = std::getenv("TRIDENT_CUDA_LAUNCH_BLOCKING");
    return e != nullptr && std::strcmp(e, "0") != 0 && e[0] != '\0';
  }();
  return blocking;
#endif
}

void check_launch(const char* file, int line) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) [[unlikely]] throw_cuda_error(err, "kernel launch", file, line);
  if (launch_blocking()) {
    const cudaError_t sync = cudaDeviceSynchronize();
    if (sync != cudaSuccess) [[unlikely]] throw_cuda_error(sync, "kernel execution (synchronized after launch)", file, line);
  }
}

}  // namespace trident::cuda::detail
