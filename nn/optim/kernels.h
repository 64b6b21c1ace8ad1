// Which optimizer kernels run: NOTE [Optimizer kernels] in nn/optim/cuda_kernels.h.
#pragma once

#include "nn/optim/cpu_kernels.h"
#include "ops/common.h"
#if TRIDENT_HAVE_CUDA
#include "nn/optim/cuda_kernels.h"
#define TRIDENT_OPTIM_KERNEL(FN)                                                                  \
  [&](auto&&... trident_args_) -> decltype(auto) {                                                \
    if (::trident::ops_detail::any_cuda(trident_args_...)) return ::trident::nn::optim::cuda::FN(trident_args_...); \
    return ::trident::nn::optim::cpu::FN(trident_args_...);                                       \
  }
#else
#define TRIDENT_OPTIM_KERNEL(FN) ::trident::nn::optim::cpu::FN
#endif
