#include "ops/copy.h"

#include "core/copy.h"
#include "core/factory.h"
#include "ops/common.h"

namespace trident {

using namespace ops_detail;

Tensor Tensor::clone() const {
  check_defined("clone", *this);
  Tensor out = empty(sizes(), TensorOptions(dtype()).device(device()));
  copy_(out, *this);
  if (autograd::any_requires_grad({*this}))
    autograd::record("CloneBackward", {*this}, out, [](const TensorList& g) { return g; }, kDifferentiable);
  return out;
}

Tensor Tensor::contiguous() const {
  check_defined("contiguous", *this);
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::to(DType dt) const {
  check_defined("to", *this);
  if (dt == dtype()) return *this;
  if (autograd::any_requires_grad({*this}))
    TRIDENT_CHECK(is_floating(dt), "to: cannot cast a tensor that requires grad to ", dt,
                  " (gradients only flow through floating types); detach() it first");
  Tensor out = empty(sizes(), TensorOptions(dt).device(device()));
  copy_(out, *this);
  if (autograd::any_requires_grad({*this}))
    autograd::record("ToDtypeBackward", {*this}, out, [src = dtype()](const TensorList& g) { return TensorList{g[0].to(src)}; }, kDifferentiable);
  return out;
}

Tensor Tensor::to(Device d) const {
  check_defined("to", *this);
  if (d == device()) return *this;
  Tensor out = empty(sizes(), TensorOptions(dtype()).device(d));
  copy_(out, *this);
  if (autograd::any_requires_grad({*this}))
    autograd::record("ToDeviceBackward", {*this}, out, [src = device()](const TensorList& g) { return TensorList{g[0].to(src)}; }, kDifferentiable);
  return out;
}

}  // namespace trident
