#include "ops/copy.h"

#include <algorithm>
#include <optional>
#include <vector>

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

namespace {

// NOTE [Casts keep the layout]: to(dtype) of a tensor whose elements fill a run of its storage
// once, in some order of its dims (a transpose or permutation of a contiguous tensor), returns
// a tensor laid out the same way, as PyTorch's preserve_format does: the conversion runs over
// the storage in order (a contiguous copy, not a strided one), and what reads the result sees
// the strides it would have seen in the source. Autocast casts Hugging Face's [in, out] Conv1D
// weights, which GPT-2 passes to linear transposed; the products read either layout in place,
// and linear's weight gradient comes out in the weight's layout, so the gradient's cast back to
// f32 and its accumulation are contiguous too. (GPT-2 tiny's bf16 step spent 4.6 ms casting
// the transposed weights element by element and 2.4 ms transposing their f32 gradients.) Any
// other tensor (overlapping, with gaps, or contiguous) becomes contiguous.
// Returns the dims of such a tensor from the largest stride to the smallest (permuting by them
// gives a contiguous view), or nothing.
std::optional<std::vector<int64_t>> dense_order(const Tensor& t) {
  if (t.is_contiguous() || t.numel() <= 1) return std::nullopt;
  const int64_t n = t.dim();
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  int64_t expected = 1;
  for (int64_t i = n; i-- > 0;) {
    const int64_t d = order[static_cast<size_t>(i)];
    if (t.size(d) == 1) continue;
    if (t.stride(d) != expected) return std::nullopt;
    expected *= t.size(d);
  }
  return order;
}

}  // namespace

Tensor Tensor::to(DType dt) const {
  check_defined("to", *this);
  if (dt == dtype()) return *this;
  if (autograd::any_requires_grad({*this}))
    TRIDENT_CHECK(is_floating(dt), "to: cannot cast a tensor that requires grad to ", dt,
                  " (gradients only flow through floating types); detach() it first");
  Tensor out;
  if (const auto order = dense_order(*this)) {  // NOTE [Casts keep the layout]
    Shape sizes_in_order, strides_in_order;
    for (const int64_t d : *order) {
      sizes_in_order.push_back(size(d));
      strides_in_order.push_back(stride(d));
    }
    const Tensor flat = empty(sizes_in_order, TensorOptions(dt).device(device()));
    copy_(flat, detach().as_strided(sizes_in_order, strides_in_order, storage_offset()));
    Shape out_strides(sizes().size());
    const Shape flat_strides = flat.strides();
    for (size_t i = 0; i < order->size(); ++i) out_strides[static_cast<size_t>((*order)[i])] = flat_strides[i];
    out = flat.as_strided(sizes(), out_strides, 0);
  } else {
    out = empty(sizes(), TensorOptions(dt).device(device()));
    copy_(out, *this);
  }
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
