// Checked calls into CUDA and its libraries. Every call into the CUDA runtime, cuBLAS(Lt),
// cuDNN and NCCL goes through one of these macros, so that a failure becomes a trident::Error
// naming the call, the library's own message and the file:line of the call site:
//
//   TRIDENT_CUDA_CHECK(cudaMemcpyAsync(...));
//   TRIDENT_CUBLAS_CHECK(cublasLtMatmul(...));
//   TRIDENT_CUDNN_CHECK(cudnnBackendExecute(...));
//   TRIDENT_NCCL_CHECK(ncclAllReduce(...));
//   kernel<<<grid, block, 0, stream>>>(...); TRIDENT_CUDA_KERNEL_CHECK();
//
// NOTE [Launch checks]: a launch reports a bad configuration (too many threads, too much shared
// memory, no kernel image for this GPU) only through cudaGetLastError, so every launch is
// followed by TRIDENT_CUDA_KERNEL_CHECK(). It costs a host-side call of well under a microsecond,
// so it is on in every build. Errors *inside* a kernel (an illegal address) surface at the next
// synchronizing call; debug builds (NDEBUG unset), and any build run with
// TRIDENT_CUDA_LAUNCH_BLOCKING=1, also synchronize the device after each launch, so that such an
// error is reported at the launch that caused it.
//
// cuBLAS, cuDNN and NCCL all use 0 for success, so the macros compare with 0 and this header
// needs only the runtime's; the library headers are included where their strings are looked up.
#pragma once

#include <cuda_runtime.h>

namespace trident::cuda::detail {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);
[[noreturn]] void throw_cublas_error(int status, const char* expr, const char* file, int line);
[[noreturn]] void throw_cudnn_error(int status, const char* expr, const char* file, int line);
[[noreturn]] void throw_nccl_error(int status, const char* expr, const char* file, int line);
// After a launch: cudaGetLastError, and a device synchronization when launches are blocking.
void check_launch(const char* file, int line);
// Whether launches synchronize (debug builds, or TRIDENT_CUDA_LAUNCH_BLOCKING=1).
bool launch_blocking();

}  // namespace trident::cuda::detail

#define TRIDENT_CUDA_CHECK(expr)                                                             \
  do {                                                                                       \
    const cudaError_t trident_cuda_err_ = (expr);                                            \
    if (trident_cuda_err_ != cudaSuccess) [[unlikely]]                                       \
      ::trident::cuda::detail::throw_cuda_error(trident_cuda_err_, #expr, __FILE__, __LINE__); \
  } while (0)

#define TRIDENT_CUBLAS_CHECK(expr)                                                           \
  do {                                                                                       \
    const int trident_cublas_st_ = static_cast<int>(expr);                                   \
    if (trident_cublas_st_ != 0) [[unlikely]]                                                \
      ::trident::cuda::detail::throw_cublas_error(trident_cublas_st_, #expr, __FILE__, __LINE__); \
  } while (0)

#define TRIDENT_CUDNN_CHECK(expr)                                                            \
  do {                                                                                       \
    const int trident_cudnn_st_ = static_cast<int>(expr);                                    \
    if (trident_cudnn_st_ != 0) [[unlikely]]                                                 \
      ::trident::cuda::detail::throw_cudnn_error(trident_cudnn_st_, #expr, __FILE__, __LINE__); \
  } while (0)

#define TRIDENT_NCCL_CHECK(expr)                                                             \
  do {                                                                                       \
    const int trident_nccl_st_ = static_cast<int>(expr);                                     \
    if (trident_nccl_st_ != 0) [[unlikely]]                                                  \
      ::trident::cuda::detail::throw_nccl_error(trident_nccl_st_, #expr, __FILE__, __LINE__); \
  } while (0)

// After every kernel launch (NOTE [Launch checks]).
#define TRIDENT_CUDA_KERNEL_CHECK() ::trident::cuda::detail::check_launch(__FILE__, __LINE__)
