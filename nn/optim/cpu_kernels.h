// CPU loops of the optimizer updates: one pass over a contiguous f32/f64 parameter's elements
// per update (two for LAMB, whose trust ratio needs norms first), each element updated by the
// functors of nn/optim/math.h, split across threads for large parameters. All tensors of one
// call are contiguous with the parameter's shape and dtype; undefined buffers are unused.
// The CUDA loops (nn/optim/cuda_kernels.h) batch many parameters per launch with the same functors.
#pragma once

#include "core/tensor.h"
#include "nn/optim/math.h"

namespace trident::nn::optim::cpu {

// buf is undefined when f.momentum == 0.
void sgd(const Tensor& p, const Tensor& g, const Tensor& buf, const math::SGDUpdate<double>& f);
// vmax (amsgrad) is undefined when amsgrad is off.
void adam(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, const Tensor& vmax,
          const math::AdamUpdate<double>& f);
// grad_avg is used when centered, buf when momentum > 0 (defined exactly then).
void rmsprop(const Tensor& p, const Tensor& g, const Tensor& square_avg, const Tensor& grad_avg, const Tensor& buf,
             const math::RMSPropUpdate<double>& f);

// LAMB's first pass: updates m and v, returns ||p|| and ||r|| (r the update direction). The
// sums of squares accumulate in f64 over fixed blocks of elements, combined in block order, so
// the norms do not depend on the thread count.
struct LambNorms {
  double param = 0, update = 0;
};
LambNorms lamb_moments(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                       const math::LambUpdate<double>& f);
// LAMB's second pass: p = p - scale * r, scale = lr * trust ratio.
void lamb_apply(const Tensor& p, const Tensor& m, const Tensor& v, const math::LambUpdate<double>& f, double scale);

}  // namespace trident::nn::optim::cpu
