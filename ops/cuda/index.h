// CUDA kernels of the indexing family: the contracts of ops/cpu/index.h, for tensors on a CUDA
// device. Index tensors are contiguous i64 on the same device (the wrapper, ops/index.cpp, makes
// them so). Data movement (index_select, gather) takes any dtype; index_add_ takes f32, f16 and
// bf16, scatter_add_ those and i32/i64, accumulating floats in f32 (NOTE [CUDA dtypes]).
//
// Host values: check_index_range, max_index, gather's *in_range and scatter_add_'s result are
// host values by contract, so each costs one device reduction (or flag) and one copy back,
// which synchronizes the stream (NOTE [Deterministic device totals] in ops/cuda/block_reduce.cuh).
//
// NOTE [Deterministic index_add_]: index_add_ (the backward of index_select and embedding) never
// uses atomics: the entries are sorted by destination with a stable radix sort (cub), and each
// destination row is summed by one block, in the order of the entries' positions, starting from
// its old value. So repeated indices never race and a gradient is bit-identical from run to run
// (the CPU kernel sums in the same order, in f64 for f32; here in f32). scatter_add_ is likewise
// atomic-free: positions that differ outside `dim` never share a destination, so one thread owns
// each of them and walks `dim` in order.
#pragma once

#include <string>

#include "core/tensor.h"

namespace trident::cuda {

void check_index_range(const char* op, const Tensor& index, int64_t limit, const std::string& range_of);
int64_t max_index(const Tensor& index);

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
void index_add_(const Tensor& dest, int64_t dim, const Tensor& index, const Tensor& src, int64_t skip);

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, bool* in_range);
bool scatter_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);

Tensor one_hot(const Tensor& index, int64_t num_classes);

}  // namespace trident::cuda
