// The optimizer kernels: the CPU loops, and with CUDA the multi-tensor CUDA loops (NOTE
// [Optimizer kernels] in nn/optim/cuda_kernels.h says which runs when).
#pragma once

#include "nn/optim/cpu_kernels.h"
#include "trident_config.h"
#if TRIDENT_HAVE_CUDA
#include "nn/optim/cuda_kernels.h"
#endif
