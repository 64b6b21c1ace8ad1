// The four communication functions tensor parallelism is built from (Megatron-LM, Shoeybi et
// al. 2019, section 3), plus the two of sequence parallelism (Korthikanti et al. 2022). Each is
// an autograd function whose backward is another's forward:
//
//   copy_to_region      forward: identity            backward: all-reduce (sum)
//   reduce_from_region  forward: all-reduce (sum)    backward: identity
//   scatter_to_region   forward: keep this rank's slice of `dim`   backward: all-gather along dim
//   gather_from_region  forward: all-gather along `dim`            backward: keep this rank's slice
//   gather_from_sequence_region   forward: all-gather along dim   backward: reduce-scatter along dim
//   reduce_scatter_to_sequence_region  forward: reduce-scatter    backward: all-gather
//
// NOTE [Tensor-parallel regions]: a "split region" is the part of a layer where each rank of the
// tp group holds a different slice of the activations (its heads, its share of the MLP width,
// its rows of the vocabulary). A column-parallel linear enters one with copy_to_region (every
// rank reads the whole input; the gradients of that input, each rank's partial sum over its
// output columns, are all-reduced in backward), a row-parallel linear leaves it with
// reduce_from_region (the partial products are summed in forward, and the gradient of the sum
// reaches each rank whole). So a transformer layer costs two all-reduces of the [B, T, C]
// activations forward and two backward. With sequence parallelism the activations outside the
// region are split along the sequence, and the all-reduces become an all-gather entering and a
// reduce-scatter leaving, the same bytes in total.
//
// Each backward is its conjugate applied as a function (NOTE [Tensor-parallel regions and
// higher-order gradients] in mappings.cpp), so a create_graph backward records it and the
// gradients can be differentiated again (Hessian-vector products of a split model).
//
// Every function is the identity (no communication, no node) when the group has one rank. The
// slice of rank r along `dim` of size n is [r n / tp, (r + 1) n / tp): `dim` must divide by the
// group's size (an error names the shape). Tensors: any floating dtype the communicator reduces,
// on its device; `dim` may be negative.
#pragma once

#include <memory>

#include "core/tensor.h"
#include "parallel/comm/communicator.h"

namespace trident::parallel::tp {

using CommPtr = std::shared_ptr<comm::Communicator>;

Tensor copy_to_region(const Tensor& x, const CommPtr& group);
Tensor reduce_from_region(const Tensor& x, const CommPtr& group);
Tensor scatter_to_region(const Tensor& x, const CommPtr& group, int64_t dim = -1);
Tensor gather_from_region(const Tensor& x, const CommPtr& group, int64_t dim = -1);
Tensor gather_from_sequence_region(const Tensor& x, const CommPtr& group, int64_t dim);
Tensor reduce_scatter_to_sequence_region(const Tensor& x, const CommPtr& group, int64_t dim);

// The communication itself, without autograd (the functions above and the checkpoint code use
// them): x gathered from every rank along dim (ranks in order), and the sum over ranks of x
// with this rank's slice of dim kept.
Tensor all_gather_along(const Tensor& x, comm::Communicator& group, int64_t dim);
Tensor reduce_scatter_along(const Tensor& x, comm::Communicator& group, int64_t dim);
// This rank's slice of dim (a view).
Tensor local_slice(const Tensor& x, int rank, int size, int64_t dim);

}  // namespace trident::parallel::tp
