#include "ops/cpu/unary.h"

#include "core/factory.h"
#include "ops/cpu/loops.h"
#include "ops/math/unary.h"

namespace trident::cpu {

Tensor unary(UnaryOp op, const Tensor& x) {
  Tensor out = empty(x.sizes(), x.dtype());
  TRIDENT_DISPATCH_FLOATING(x.dtype(), "unary", [&] {
    switch (op) {
      case UnaryOp::Relu: unary_loop<scalar_t, scalar_t>(out, x, math::Relu{}); break;
      case UnaryOp::Tanh: unary_loop<scalar_t, scalar_t>(out, x, math::Tanh{}); break;
    }
  });
  return out;
}

Tensor unary_backward(UnaryOp op, const Tensor& g, const Tensor& saved) {
  Tensor out = empty(saved.sizes(), saved.dtype());
  TRIDENT_DISPATCH_FLOATING(saved.dtype(), "unary_backward", [&] {
    switch (op) {
      case UnaryOp::Relu: binary_loop<scalar_t, scalar_t>(out, g, saved, math::ReluBackward{}); break;
      case UnaryOp::Tanh: binary_loop<scalar_t, scalar_t>(out, g, saved, math::TanhBackward{}); break;
    }
  });
  return out;
}

}  // namespace trident::cpu
