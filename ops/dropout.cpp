#include "ops/dropout.h"

#include "core/factory.h"
#include "ops/arith.h"
#include "ops/common.h"
#include "ops/cpu/dropout.h"
#if TRIDENT_HAVE_CUDA
#include "ops/cuda/dropout.h"
#endif

namespace trident {

using namespace ops_detail;

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  check_defined("dropout", x);
  check_device("dropout", x);
  check_floating("dropout", x);
  TRIDENT_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability p must be in [0, 1], got ", p);
  if (!training || p == 0.0 || x.numel() == 0) return x;
  Generator& g = gen != nullptr ? *gen : default_generator();
  const PhiloxState state = g.reserve(philox::blocks_for(static_cast<uint64_t>(x.numel()), /*wide=*/false));
  Tensor out = TRIDENT_KERNEL(dropout)(x.detach(), state, p);
  if (autograd::any_requires_grad({x})) {
    // The mask is regenerated from the saved state: dx = g * mask / (1 - p).
    autograd::record("DropoutBackward", {x}, out,
                     [state, p](const TensorList& grads) {
                       if (recording_backward())  // g times the scaled mask, a constant (NOTE [Higher-order gradients])
                         return TensorList{mul(grads[0], TRIDENT_KERNEL(dropout)(ones_like(grads[0]), state, p))};
                       return TensorList{TRIDENT_KERNEL(dropout)(grads[0], state, p)};
                     }, kDifferentiable);
  }
  return out;
}

}  // namespace trident
