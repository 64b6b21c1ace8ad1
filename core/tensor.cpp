#include "core/tensor.h"

#include "core/copy.h"

namespace trident {

namespace detail {
void undefined_tensor_error(const char* what) {
  TRIDENT_FAIL(what, "() called on an undefined tensor (a default-constructed Tensor, or a gradient that was never computed)");
}
}  // namespace detail

Tensor make_tensor(std::shared_ptr<Storage> storage, DType dtype, Shape sizes, Shape strides, int64_t offset) {
  TRIDENT_CHECK(storage != nullptr, "make_tensor: null storage");
  TRIDENT_CHECK(sizes.size() == strides.size(), "make_tensor: sizes ", sizes, " and strides ", strides,
                " have different lengths");
  TRIDENT_CHECK(offset >= 0, "make_tensor: negative storage offset ", offset);
  const int64_t n = shape_numel(sizes);
  if (n > 0) {
    // The furthest element must lie inside the storage.
    int64_t max_off = offset;
    for (size_t i = 0; i < sizes.size(); ++i) {
      TRIDENT_CHECK(strides[i] >= 0, "make_tensor: negative stride in ", strides);
      max_off += (sizes[i] - 1) * strides[i];
    }
    const int64_t need = (max_off + 1) * static_cast<int64_t>(itemsize(dtype));
    TRIDENT_CHECK(need <= static_cast<int64_t>(storage->nbytes()), "view of sizes ", sizes, ", strides ", strides,
                  ", offset ", offset, " (", dtype, ") needs ", need, " bytes but the storage has ", storage->nbytes());
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->dtype = dtype;
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->numel = n;
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t d) const { return sizes()[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  const Shape& sz = sizes();
  const Shape& st = strides();
  int64_t expected = 1;
  for (size_t i = sz.size(); i-- > 0;) {
    if (sz[i] == 1) continue;
    if (sz[i] == 0) return true;
    if (st[i] != expected) return false;
    expected *= sz[i];
  }
  return true;
}

Tensor Tensor::as_strided(Shape sizes, Shape strides, int64_t offset) const {
  return make_tensor(storage(), dtype(), std::move(sizes), std::move(strides), offset);
}

void Tensor::set_data(const Tensor& other) {
  TRIDENT_CHECK(defined() && other.defined(), "set_data: undefined tensor");
  TRIDENT_CHECK(is_leaf(), "set_data: only leaf tensors can have their data replaced (this one was computed by an op)");
  if (requires_grad())
    TRIDENT_CHECK(is_floating(other.dtype()), "set_data: a tensor that requires grad cannot take ", other.dtype(), " data");
  TensorImpl& me = *impl_;
  const TensorImpl& src = *other.impl();
  const bool same_kind = me.dtype == src.dtype && me.sizes == src.sizes && me.storage->device() == src.storage->device();
  me.storage = src.storage;
  me.dtype = src.dtype;
  me.sizes = src.sizes;
  me.strides = src.strides;
  me.offset = src.offset;
  me.numel = src.numel;
  if (!same_kind && me.autograd) me.autograd->grad = Tensor();
}

Tensor Tensor::detach() const { return make_tensor(storage(), dtype(), sizes(), strides(), storage_offset()); }

bool Tensor::requires_grad() const { return impl_ && impl_->autograd && impl_->autograd->requires_grad; }

Tensor& Tensor::set_requires_grad(bool r) {
  TRIDENT_CHECK(defined(), "set_requires_grad on an undefined tensor");
  if (r) TRIDENT_CHECK(is_floating(dtype()), "only floating-point tensors can require grad, got ", dtype());
  TRIDENT_CHECK(is_leaf(), "set_requires_grad can only change leaf tensors; this one was computed by an op "
                           "(use detach() to make a new leaf)");
  impl_->autograd_meta().requires_grad = r;
  return *this;
}

bool Tensor::is_leaf() const { return !(impl_ && impl_->autograd && impl_->autograd->grad_fn); }

const Tensor& Tensor::grad() const {
  static const Tensor undefined;
  return impl_ && impl_->autograd ? impl_->autograd->grad : undefined;
}

void Tensor::set_grad(const Tensor& g) {
  TRIDENT_CHECK(defined(), "set_grad on an undefined tensor");
  if (g.defined()) {
    TRIDENT_CHECK(g.sizes() == sizes(), "set_grad: gradient shape ", g.sizes(), " does not match tensor shape ", sizes());
    TRIDENT_CHECK(g.dtype() == dtype(), "set_grad: gradient dtype ", g.dtype(), " does not match tensor dtype ", dtype());
    TRIDENT_CHECK(g.device() == device(), "set_grad: gradient on ", g.device(), " but tensor on ", device());
  }
  impl_->autograd_meta().grad = g;
}

void Tensor::zero_grad(bool set_to_none) {
  if (!impl_ || !impl_->autograd || !impl_->autograd->grad.defined()) return;
  if (set_to_none) {
    impl_->autograd->grad = Tensor();
  } else {
    fill_(impl_->autograd->grad, 0.0);
  }
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  return impl_ && impl_->autograd ? impl_->autograd->grad_fn : none;
}

uint32_t Tensor::output_nr() const { return impl_ && impl_->autograd ? impl_->autograd->output_nr : 0; }
uint32_t Tensor::version() const { return storage()->version(); }
void Tensor::bump_version() const { storage()->bump_version(); }

}  // namespace trident
