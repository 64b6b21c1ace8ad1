#include "parallel/tensor_parallel/sequence_parallel.h"

#include "ops/norm.h"

namespace trident::parallel::tp {

namespace {

void check_hidden(const Tensor& x, const CommPtr& g, const char* what) {
  TRIDENT_CHECK(g != nullptr, what, ": no tensor-parallel group (null communicator)");
  TRIDENT_CHECK(x.dim() == 3, what, ": sequence parallelism splits hidden states [B, T, C], got shape ", x.sizes());
}

}  // namespace

Tensor scatter_to_sequence(const Tensor& x, const CommPtr& g) {
  check_hidden(x, g, "sequence parallelism");
  TRIDENT_CHECK(x.size(kSequenceDim) % g->size() == 0, "sequence parallelism: the sequence length T = ", x.size(kSequenceDim),
                " of hidden states ", x.sizes(), " does not divide by tp = ", g->size(), " (", g->name(),
                "); use a sequence length divisible by tp or turn sequence parallelism off");
  return scatter_to_region(x, g, kSequenceDim);
}

Tensor gather_from_sequence(const Tensor& x, const CommPtr& g) {
  check_hidden(x, g, "sequence parallelism (gather)");
  return gather_from_region(x, g, kSequenceDim);
}

SequenceParallelLayerNorm::SequenceParallelLayerNorm(int64_t features, double eps, DType dtype, CommPtr group)
    : nn::LayerNorm(Shape{features}, eps, true, dtype), group_(std::move(group)) {
  TRIDENT_CHECK(group_ != nullptr, "SequenceParallelLayerNorm: no tensor-parallel group");
}

Tensor SequenceParallelLayerNorm::forward(const Tensor& x) {
  return layer_norm(x, normalized_shape, copy_to_region(weight, group_), copy_to_region(bias, group_), eps);
}

AddLayerNorm SequenceParallelLayerNorm::forward_add(const Tensor& x, const Tensor& residual) {
  return add_layer_norm(x, residual, normalized_shape, copy_to_region(weight, group_), copy_to_region(bias, group_), eps);
}

std::string SequenceParallelLayerNorm::extra_repr() const {
  return nn::LayerNorm::extra_repr() + ", sequence_parallel=true, tp=" + std::to_string(group_->size());
}

}  // namespace trident::parallel::tp
