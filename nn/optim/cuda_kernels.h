// CUDA loops of the optimizer updates: the signatures and contracts of nn/optim/cpu_kernels.h,
// the same per-element functors (nn/optim/math.h), one grid-stride launch per parameter on the
// current stream. f32 and f64 parameters, as on the CPU.
//
// NOTE [Optimizer kernels]: the optimizers call their kernels through TRIDENT_OPTIM_KERNEL(name),
// which picks cuda::name for a parameter on a CUDA device and cpu::name otherwise (the shape of
// NOTE [Device dispatch] in ops/common.h). The functors are the CPU's, in the parameter's type, so
// the GPU's updates follow PyTorch's order of operations exactly as the CPU's do; only LAMB's norms
// sum in a different order (f64 partial sums per 8192-element block, blocks combined in order on
// the host, which costs one synchronization per LAMB parameter).
#pragma once

#include "core/tensor.h"
#include "nn/optim/cpu_kernels.h"

namespace trident::nn::optim::cuda {

void sgd(const Tensor& p, const Tensor& g, const Tensor& buf, const math::SGDUpdate<double>& f);
void adam(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
          const math::AdamUpdate<double>& f);
void rmsprop(const Tensor& p, const Tensor& g, const Tensor& square_avg, const Tensor& grad_avg, const Tensor& buf,
             const math::RMSPropUpdate<double>& f);
cpu::LambNorms lamb_moments(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                            const math::LambUpdate<double>& f);
void lamb_apply(const Tensor& p, const Tensor& m, const Tensor& v, const math::LambUpdate<double>& f, double scale);

}  // namespace trident::nn::optim::cuda
