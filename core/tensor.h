// Tensor: a cheap value handle to a reference-counted TensorImpl (storage, dtype, device,
// sizes, strides, element offset, and autograd state). Copying a Tensor copies the handle;
// views share storage. See docs/architecture.md, "Tensors".
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"
#include "core/storage.h"

namespace trident {

class Tensor;
struct TensorImpl;
namespace autograd {
struct Node;
struct SavedIdentity;
}

// Runs on the gradient flowing into a tensor during backward. Returning a defined tensor
// replaces the gradient (it must have the same shape); returning an undefined one keeps it.
using TensorHook = std::function<Tensor(const Tensor& grad)>;
// Runs on a leaf once its .grad holds the full gradient of this backward pass.
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

// How a factory makes a tensor. Implicit from a DType or a Device, so `zeros({2}, kF64)` works.
struct TensorOptions {
  DType dtype_ = DType::F32;
  Device device_ = Device::cpu();
  bool requires_grad_ = false;

  TensorOptions() = default;
  TensorOptions(DType d) : dtype_(d) {}    // NOLINT(google-explicit-constructor)
  TensorOptions(Device d) : device_(d) {}  // NOLINT(google-explicit-constructor)
  TensorOptions dtype(DType d) const { auto o = *this; o.dtype_ = d; return o; }
  TensorOptions device(Device d) const { auto o = *this; o.device_ = d; return o; }
  TensorOptions requires_grad(bool r = true) const { auto o = *this; o.requires_grad_ = r; return o; }
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  // Whether two handles refer to the same tensor (not merely equal values).
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // ---- metadata ----
  int64_t dim() const;
  const Shape& sizes() const;
  const Shape& strides() const;
  int64_t size(int64_t d) const;    // negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  int64_t storage_offset() const;
  size_t element_size() const { return itemsize(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const;

  // ---- data ----
  // Pointer to the first element. data<T>() checks that T matches the dtype.
  void* data_ptr() const;
  template <typename T>
  T* data() const {
    TRIDENT_CHECK(dtype_of<T> == dtype(), "data<", dtype_of<T>, ">() called on a tensor of dtype ", dtype());
    return static_cast<T*>(data_ptr());
  }
  // The single element, converted to T (copied from the device first when needed).
  template <typename T>
  T item() const;
  // All elements in row-major order, converted to T.
  template <typename T>
  std::vector<T> to_vector() const;

  // ---- raw views (no autograd: see ops/shape.h for the differentiable ones) ----
  Tensor as_strided(Shape sizes, Shape strides, int64_t storage_offset) const;
  // A tensor sharing this one's storage but outside the autograd graph.
  Tensor detach() const;
  // Makes this tensor (and every handle to it) refer to other's data: storage, dtype, shape and
  // strides; keeps requires_grad and hooks, drops .grad when it no longer matches. What
  // Module::to() uses, so optimizers holding the parameters see the moved values. Leaves only.
  void set_data(const Tensor& other);

  // ---- autograd (autograd/engine.cpp and autograd/node.cpp) ----
  bool requires_grad() const;
  // Only leaves may be marked, and only floating-point tensors.
  Tensor& set_requires_grad(bool r = true);
  bool is_leaf() const;
  const Tensor& grad() const;
  void set_grad(const Tensor& g);
  // PyTorch's default: drop the gradient (set_to_none); otherwise fill it with zeros.
  void zero_grad(bool set_to_none = true);
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  uint32_t output_nr() const;
  uint32_t version() const;
  // Marks an in-place write (see NOTE [Version counter]).
  void bump_version() const;
  void register_hook(TensorHook hook);
  void register_post_accumulate_grad_hook(PostAccumulateGradHook hook);
  // Keep .grad of a non-leaf tensor after backward, as leaves do.
  void retain_grad();
  // Backpropagates from this tensor. `gradient` may be omitted for a one-element tensor.
  // create_graph records the backward pass itself, so the gradients can be differentiated again
  // (NOTE [Higher-order gradients] in autograd/engine.h); it implies retain_graph.
  void backward(const Tensor& gradient = {}, bool retain_graph = false, bool create_graph = false) const;

  // ---- differentiable conversions (defined in ops/copy.cpp; NOTE [Tensor methods]) ----
  Tensor contiguous() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor clone() const;

  std::string str() const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// NOTE [Tensor methods]: the core declares the few methods users reach for on a tensor
// (contiguous, to, clone, backward), but they are differentiable and so are defined by the
// layers that know autograd: ops/copy.cpp and autograd/engine.cpp. Everything else is a free
// function in the ops headers (add, matmul, reshape, sum, ...), as in ggml and llm.c.

struct AutogradMeta {
  bool requires_grad = false;
  bool retains_grad = false;
  Tensor grad;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  uint32_t output_nr = 0;                   // which output of grad_fn this tensor is
  std::weak_ptr<autograd::Node> grad_accumulator;  // a leaf's AccumulateGrad, while a graph uses it
  std::vector<TensorHook> hooks;                   // leaves (a non-leaf's hooks live on its grad_fn)
  std::vector<PostAccumulateGradHook> post_accumulate_hooks;
  // Set when a SavedTensor keeps this tensor before it became an op's output: set_history fills
  // it with the node, so the saved tensor can rejoin the graph in a create_graph backward
  // (NOTE [Saved tensors and higher-order gradients] in autograd/node.h).
  std::shared_ptr<autograd::SavedIdentity> saved_identity;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  DType dtype = DType::F32;
  Shape sizes;
  Shape strides;
  int64_t offset = 0;  // in elements
  int64_t numel = 0;
  std::unique_ptr<AutogradMeta> autograd;  // created on first use

  AutogradMeta& autograd_meta() {
    if (!autograd) autograd = std::make_unique<AutogradMeta>();
    return *autograd;
  }
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Raw construction: a fresh tensor from a storage (no autograd). Throws if the view would
// read past the storage.
Tensor make_tensor(std::shared_ptr<Storage> storage, DType dtype, Shape sizes, Shape strides, int64_t offset);

// ---- inline definitions ----
namespace detail {
[[noreturn]] void undefined_tensor_error(const char* what);
}
#define TRIDENT_IMPL_OR_THROW(what) (impl_ ? *impl_ : (detail::undefined_tensor_error(what), *impl_))
inline int64_t Tensor::dim() const { return static_cast<int64_t>(TRIDENT_IMPL_OR_THROW("dim").sizes.size()); }
inline const Shape& Tensor::sizes() const { return TRIDENT_IMPL_OR_THROW("sizes").sizes; }
inline const Shape& Tensor::strides() const { return TRIDENT_IMPL_OR_THROW("strides").strides; }
inline int64_t Tensor::numel() const { return TRIDENT_IMPL_OR_THROW("numel").numel; }
inline DType Tensor::dtype() const { return TRIDENT_IMPL_OR_THROW("dtype").dtype; }
inline Device Tensor::device() const { return TRIDENT_IMPL_OR_THROW("device").storage->device(); }
inline int64_t Tensor::storage_offset() const { return TRIDENT_IMPL_OR_THROW("storage_offset").offset; }
inline const std::shared_ptr<Storage>& Tensor::storage() const { return TRIDENT_IMPL_OR_THROW("storage").storage; }
inline void* Tensor::data_ptr() const {
  const TensorImpl& i = TRIDENT_IMPL_OR_THROW("data_ptr");
  return static_cast<char*>(i.storage->data()) + i.offset * static_cast<int64_t>(itemsize(i.dtype));
}
#undef TRIDENT_IMPL_OR_THROW

template <typename T>
T Tensor::item() const {
  TRIDENT_CHECK(numel() == 1, "item() needs a tensor with one element, got shape ", sizes());
  if (!device().is_cpu()) return to(Device::cpu()).item<T>();
  return TRIDENT_DISPATCH_ALL(dtype(), "item", [&]() -> T {
    return static_cast<T>(static_cast<compute_t<scalar_t>>(*static_cast<const scalar_t*>(data_ptr())));
  });
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  if (!device().is_cpu()) return to(Device::cpu()).to_vector<T>();
  Tensor c = detach().contiguous();
  std::vector<T> out(static_cast<size_t>(c.numel()));
  TRIDENT_DISPATCH_ALL(c.dtype(), "to_vector", [&] {
    const scalar_t* p = static_cast<const scalar_t*>(c.data_ptr());
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(static_cast<compute_t<scalar_t>>(p[i]));
  });
  return out;
}

}  // namespace trident
