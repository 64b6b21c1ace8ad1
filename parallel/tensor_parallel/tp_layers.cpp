#include "parallel/tensor_parallel/tp_layers.h"

#include "core/factory.h"
#include "ops/compare.h"
#include "ops/index.h"
#include "ops/linalg.h"
#include "parallel/tensor_parallel/cross_entropy.h"
#include "parallel/tensor_parallel/layers.h"
#include "parallel/tensor_parallel/sequence_parallel.h"

namespace trident::parallel::tp {

TensorParallelLayers::TensorParallelLayers(CommPtr group, TensorParallelOptions options)
    : group_(std::move(group)), options_(options) {
  TRIDENT_CHECK(group_ != nullptr, "TensorParallelLayers: no tensor-parallel group");
  TRIDENT_CHECK(options_.vocab_pad_multiple > 0, "TensorParallelLayers: vocab_pad_multiple must be positive, got ",
                options_.vocab_pad_multiple);
  split_generator_ = std::make_unique<Generator>(options_.seed + 2718 + static_cast<uint64_t>(group_->rank()));
}

TensorParallelLayers::TensorParallelLayers(const Mesh& mesh, TensorParallelOptions options)
    : TensorParallelLayers(mesh.group_ptr(Axis::TP), options) {}

std::shared_ptr<nn::UnaryModule> TensorParallelLayers::linear(const models::LinearSpec& spec) const {
  switch (spec.kind) {
    case models::LinearKind::Column:
      return std::make_shared<ColumnParallelLinear>(spec, group_, false, options_.sequence_parallel);
    case models::LinearKind::Row: return std::make_shared<RowParallelLinear>(spec, group_, options_.sequence_parallel);
    case models::LinearKind::Replicated: break;
  }
  return std::make_shared<models::DenseLayer>(spec);
}

std::shared_ptr<nn::UnaryModule> TensorParallelLayers::vocab_embedding(const models::EmbeddingSpec& spec) const {
  return std::make_shared<VocabParallelEmbedding>(spec, group_, options_.vocab_pad_multiple);
}

Tensor TensorParallelLayers::tied_logits(const Tensor& hidden, const Tensor& weight, const Tensor& bias, int64_t vocab_size) const {
  return logits_in_region(copy_to_region(hidden, group_), weight, bias, vocab_size);
}

Tensor TensorParallelLayers::residual_tied_logits(const Tensor& hidden, const Tensor& weight, int64_t vocab_size) const {
  // NOTE [Sequence parallelism]: the output layer is a column layer over the vocabulary; it
  // gathers the positions as the blocks' column layers do.
  if (!options_.sequence_parallel) return tied_logits(hidden, weight, Tensor(), vocab_size);
  return logits_in_region(gather_from_sequence_region(hidden, group_, kSequenceDim), weight, Tensor(), vocab_size);
}

Tensor TensorParallelLayers::logits_in_region(const Tensor& hidden, const Tensor& weight, const Tensor& bias,
                                              int64_t vocab_size) const {
  TRIDENT_CHECK(weight.dim() == 2, "tied_logits: expected this rank's embedding shard [V / tp, C], got ", weight.sizes());
  const int64_t Vl = weight.size(0), start = group_->rank() * Vl;
  TRIDENT_CHECK(vocab_size > 0 && vocab_size <= Vl * group_->size(), "tied_logits: vocab_size ", vocab_size,
                " must be in [1, ", Vl * group_->size(), "] for shards of ", Vl, " rows on ", group_->size(), " ranks");
  vocab_size_ = vocab_size;
  Tensor b;
  if (bias.defined()) {
    // The model's bias covers its own rows (not the tp padding): this rank's part of them,
    // zero-extended to Vl.
    // A rank holding only padding still takes an (empty) slice of the bias, so that its backward
    // joins the all-reduce of copy_to_region like every other rank's.
    const Tensor whole = copy_to_region(bias, group_);
    const int64_t have = std::clamp<int64_t>(whole.size(0) - start, 0, Vl);
    const Tensor mine = narrow(whole, 0, std::min(start, whole.size(0)), have);
    b = have == Vl ? mine : pad(mine, {0, Vl - have});
  }
  Tensor logits = trident::linear(hidden, weight, b);
  if (start + Vl > vocab_size) {
    const Tensor col = arange(static_cast<double>(start), static_cast<double>(start + Vl), 1.0, DType::I64);
    logits = masked_fill(logits, ge(col, static_cast<double>(vocab_size)), -std::numeric_limits<double>::infinity());
  }
  return logits;
}

Tensor TensorParallelLayers::vocab_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                                 Reduction reduction) const {
  return vocab_parallel_cross_entropy(logits, targets, group_, ignore_index, reduction);
}

Tensor TensorParallelLayers::full_logits(const Tensor& logits) const {
  const Tensor all = gather_from_region(logits, group_, -1);
  const int64_t V = vocab_size_ > 0 ? std::min(vocab_size_, all.size(-1)) : all.size(-1);
  return V == all.size(-1) ? all : narrow(all, -1, 0, V);
}

Generator* TensorParallelLayers::dropout_generator(models::DropoutSite site, Generator* serial) const {
  switch (site) {
    case models::DropoutSite::Split: return split_generator_.get();
    case models::DropoutSite::Residual: return options_.sequence_parallel ? split_generator_.get() : serial;
    case models::DropoutSite::Replicated: break;
  }
  return serial;
}

Tensor TensorParallelLayers::enter_split_region(const Tensor& x) const {
  if (!options_.sequence_parallel) return copy_to_region(x, group_);
  TRIDENT_CHECK(x.dim() == 3, "sequence parallelism: a split region reads this rank's positions [B, T / tp, C], got shape ",
                x.sizes());
  return gather_from_sequence_region(x, group_, kSequenceDim);
}

Tensor TensorParallelLayers::scatter_sequence(const Tensor& x) const {
  return options_.sequence_parallel ? scatter_to_sequence(x, group_) : x;
}

Tensor TensorParallelLayers::gather_sequence(const Tensor& x) const {
  return options_.sequence_parallel ? gather_from_sequence(x, group_) : x;
}

std::shared_ptr<nn::LayerNorm> TensorParallelLayers::residual_layer_norm(int64_t features, double eps, DType dtype) const {
  if (!options_.sequence_parallel) return LayerFactory::residual_layer_norm(features, eps, dtype);
  return std::make_shared<SequenceParallelLayerNorm>(features, eps, dtype, group_);
}

std::shared_ptr<TensorParallelLayers> tensor_parallel_layers_for(int tp, TensorParallelOptions options) {
  const auto world = comm::Communicator::world();
  TRIDENT_CHECK(tp >= 1 && tp == world->size(), "--tp ", tp, " must equal the number of ranks (", world->size(),
                "): launch with mpirun -np ", tp, " (combining tp with dp or pp is not in the applications yet)");
  if (tp == 1) return nullptr;
  const Mesh mesh(world, MeshShape{.dp = 1, .pp = 1, .tp = tp});
  return std::make_shared<TensorParallelLayers>(mesh, options);
}

}  // namespace trident::parallel::tp
