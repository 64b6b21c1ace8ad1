// Tensor factories. Every factory takes TensorOptions (dtype, device, requires_grad); a DType
// or a Device converts to it implicitly: zeros({2, 3}, kF64).
#pragma once

#include <optional>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"

namespace trident {

Tensor empty(const Shape& sizes, TensorOptions opts = {});
Tensor zeros(const Shape& sizes, TensorOptions opts = {});
Tensor ones(const Shape& sizes, TensorOptions opts = {});
Tensor full(const Shape& sizes, double value, TensorOptions opts = {});
// A 0-dim tensor holding value.
Tensor scalar_tensor(double value, TensorOptions opts = {});
// `sizes` whose every element is one stored value (every stride 0: one element of memory), e.g.
// a pipeline stage's placeholder for another stage's tensor (NOTE [Stage-only model]).
Tensor broadcast_scalar(const Shape& sizes, double value, TensorOptions opts = {});
// Whether t is such a tensor: more than one element, every stride 0.
bool is_broadcast_scalar(const Tensor& t);
// NOTE [Stage-only model]: replaces t's data (every handle to t sees it) with its placeholder, a
// broadcast_scalar of t's shape, dtype and device holding NaN (0 for integer dtypes), and returns
// the bytes released; tensors of one element or none, and placeholders, are left alone (0).
int64_t release_to_placeholder(Tensor& t);
// [start, end) in steps of step (PyTorch's length: ceil((end - start) / step)).
Tensor arange(double start, double end, double step = 1.0, TensorOptions opts = {});
inline Tensor arange(double end, TensorOptions opts = {}) { return arange(0.0, end, 1.0, opts); }
// Uniform [0, 1) and standard normal, from `gen` (the default generator when null).
Tensor rand(const Shape& sizes, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor randn(const Shape& sizes, TensorOptions opts = {}, Generator* gen = nullptr);
// In place: fill t (contiguous, floating, on the CPU) with the values rand/randn(t.sizes(),
// t.dtype(), gen) return, without a temporary.
void rand_(const Tensor& t, Generator* gen = nullptr);
void randn_(const Tensor& t, Generator* gen = nullptr);
// Advances `gen` (the default generator when null) past the values rand or randn of `numel`
// elements of `dtype` would draw, drawing nothing (NOTE [Skipped draws] in nn/init.h).
void skip_random(int64_t numel, DType dtype, Generator* gen = nullptr);
// Uniform integers in [low, high).
Tensor randint(int64_t low, int64_t high, const Shape& sizes, TensorOptions opts = DType::I64, Generator* gen = nullptr);

// Copies values (row-major) into a new tensor of `sizes` (a 1-D tensor when sizes is empty
// and there is more than one value). The dtype defaults to T's; a different dtype converts.
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& sizes, TensorOptions opts);
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& sizes = {}) {
  return from_vector<T>(values, sizes, TensorOptions(dtype_of<T>));
}

Tensor empty_like(const Tensor& t, std::optional<DType> dtype = std::nullopt);
Tensor zeros_like(const Tensor& t, std::optional<DType> dtype = std::nullopt);
Tensor ones_like(const Tensor& t, std::optional<DType> dtype = std::nullopt);
Tensor full_like(const Tensor& t, double value, std::optional<DType> dtype = std::nullopt);
Tensor rand_like(const Tensor& t, Generator* gen = nullptr);
Tensor randn_like(const Tensor& t, Generator* gen = nullptr);

}  // namespace trident
