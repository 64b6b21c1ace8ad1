#include "ops/unary.h"

#include "ops/common.h"
#include "ops/cpu/unary.h"

namespace trident {

using namespace ops_detail;

namespace {
Tensor unary_op(cpu::UnaryOp op, const char* name, const char* backward_name, const Tensor& x, bool save_output) {
  check_defined(name, x);
  check_cpu(name, x);
  check_floating(name, x);
  Tensor out = cpu::unary(op, x.detach());
  if (autograd::any_requires_grad({x})) {
    autograd::record(backward_name, {x}, out, [op, s = SavedTensor(save_output ? out : x)](const TensorList& g) {
      return TensorList{cpu::unary_backward(op, g[0], s.unpack())};
    });
  }
  return out;
}
}  // namespace

Tensor relu(const Tensor& x) { return unary_op(cpu::UnaryOp::Relu, "relu", "ReluBackward", x, false); }
Tensor tanh(const Tensor& x) { return unary_op(cpu::UnaryOp::Tanh, "tanh", "TanhBackward", x, true); }

}  // namespace trident
