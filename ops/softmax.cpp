#include "ops/softmax.h"

#include <algorithm>

#include "ops/arith.h"
#include "ops/autocast.h"
#include "ops/common.h"
#include "ops/cpu/softmax.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/unary.h"
#if TRIDENT_HAVE_CUDA
#include "ops/cuda/softmax.h"
#endif

namespace trident {

using namespace ops_detail;

namespace {

Tensor softmax_op(const Tensor& x, int64_t dim_in, bool log) {
  if (autocast::is_enabled()) {  // NOTE [Autocast]
    autocast::Suspend off;
    return softmax_op(autocast::widen(x), dim_in, log);
  }
  const char* name = log ? "log_softmax" : "softmax";
  check_defined(name, x);
  check_device(name, x);
  check_floating(name, x);
  const int64_t nd = std::max<int64_t>(x.dim(), 1);  // a 0-dim tensor takes dim 0 or -1, as in PyTorch
  TRIDENT_CHECK(dim_in >= -nd && dim_in < nd, name, ": dim ", dim_in, " is out of range for a tensor of shape ", x.sizes(),
                " (expected ", -nd, " to ", nd - 1, ")");
  if (x.dim() == 0) return reshape(softmax_op(reshape(x, {1}), 0, log), {});
  const int64_t dim = dim_in < 0 ? dim_in + nd : dim_in;
  Tensor out = TRIDENT_KERNEL(softmax)(x.detach(), dim, log);
  if (autograd::any_requires_grad({x})) {
    // Backward needs only the output (not x): dx = y * (g - sum(g * y)) or g - exp(y) * sum(g).
    autograd::record(log ? "LogSoftmaxBackward" : "SoftmaxBackward", {x}, out,
                     [sy = SavedTensor(out), dim, log](const TensorList& g) {
                       if (recording_backward()) {  // the same formulas, recorded (NOTE [Higher-order gradients])
                         const Tensor y = sy.unpack();
                         if (log) return TensorList{sub(g[0], mul(exp(y), sum(g[0], {dim}, /*keepdim=*/true)))};
                         return TensorList{mul(y, sub(g[0], sum(mul(g[0], y), {dim}, /*keepdim=*/true)))};
                       }
                       return TensorList{TRIDENT_KERNEL(softmax_backward)(g[0], sy.unpack(), dim, log)};
                     }, kDifferentiable);
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_op(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_op(x, dim, true); }

}  // namespace trident
