// Tensor-parallel layers (Megatron-LM): each holds this rank's shard of the serial layer's
// parameters and produces, with the mappings of mappings.h (NOTE [Tensor-parallel regions]),
// exactly what the serial layer computes on the full parameters.
//
// NOTE [Parameter shards]: every split parameter is described by a ParamShard: the dim it is
// split along, the serial size of that dim, the padded size (a multiple of the group size, and
// of the fused parts; rows beyond the serial size are padding that starts at zero and is never
// used), and the number of fused parts (GPT-2's c_attn output is [q | k | v]: each part is split
// on its own, so rank r holds [q_r | k_r | v_r]). shard_of() cuts a full tensor into rank r's
// shard and gather_full() rebuilds the full tensor from every rank's shard; the checkpoint code
// (checkpoint.h) and the tests use them, so a split model's state is always expressible as the
// serial model's. A module with split parameters implements ShardedModule; parameters of other
// modules are whole on every rank of the tp group.
//
// Initialization: each layer creates the FULL weight, fills it with the spec's init function
// (drawing from the same generator, in the same order, as the serial model does) and keeps its
// shard, so a model built at any tp holds exactly the serial model's values.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "models/layer_factory.h"
#include "parallel/tensor_parallel/mappings.h"

namespace trident::parallel::tp {

struct ParamShard {
  int64_t dim = 0;          // the split dim
  int64_t full_size = 0;    // its serial size
  int64_t padded_size = 0;  // >= full_size, divisible by parts x group size
  int64_t parts = 1;        // fused blocks, each split on its own
};

// Rank `rank` of `size`'s shard of `full` (full.size(dim) == s.full_size). A copy.
Tensor shard_of(const Tensor& full, const ParamShard& s, int rank, int size);
// The full tensor [.., full_size, ..] from every rank's shard (collective over group).
Tensor gather_full(const Tensor& local, const ParamShard& s, comm::Communicator& group);

class ShardedModule {
 public:
  virtual ~ShardedModule() = default;
  // The split parameters of this module by their local names ("weight", "bias").
  virtual std::map<std::string, ParamShard> shards() const = 0;
};

// y[..., out / tp] = copy_to_region(x) W_r^T + b_r: this rank's output columns (of each fused
// part). A spec with input_in_region skips copy_to_region (the caller entered the region,
// LayerFactory::enter_split_region). With gather_output, the full [..., out] (all-gathered; not with fused parts).
// With sequence_parallel (NOTE [Sequence parallelism]) x is this rank's positions [B, T / tp, in]
// and enters through gather_from_sequence_region (all T positions) instead of copy_to_region.
// Parameters "weight" (the spec's layout, out dim split) and "bias" [out / tp].
class ColumnParallelLinear : public nn::UnaryModule, public ShardedModule {
 public:
  ColumnParallelLinear(const models::LinearSpec& spec, CommPtr group, bool gather_output = false,
                       bool sequence_parallel = false);
  Tensor forward(const Tensor& x) override;
  std::map<std::string, ParamShard> shards() const override;
  int64_t in_features, out_features, fused_parts;
  models::WeightLayout layout;
  bool gather_output, input_in_region, sequence_parallel;
  Tensor weight, bias;

 protected:
  std::string extra_repr() const override;

 private:
  CommPtr group_;
};

// x [..., in / tp] (already split, as a column-parallel layer leaves it): y = reduce_from_region(
// x W_r^T) + b, the full [..., out] on every rank, the bias added once after the sum. Parameters
// "weight" (in dim split) and "bias" [out] (whole). With sequence_parallel (NOTE [Sequence
// parallelism]) x is [B, T, in / tp] and the partial products are reduce-scattered along the
// sequence instead: y is this rank's positions [B, T / tp, out], the bias (entering through
// copy_to_region, as its gradient is then partial) added to them.
class RowParallelLinear : public nn::UnaryModule, public ShardedModule {
 public:
  RowParallelLinear(const models::LinearSpec& spec, CommPtr group, bool sequence_parallel = false);
  Tensor forward(const Tensor& x) override;
  std::map<std::string, ParamShard> shards() const override;
  int64_t in_features, out_features;
  bool sequence_parallel;
  models::WeightLayout layout;
  Tensor weight, bias;

 protected:
  std::string extra_repr() const override;

 private:
  CommPtr group_;
};

// Rows of the table split across ranks, the vocabulary padded to a multiple of pad_multiple x tp
// (padding rows are zero and never looked up). forward: ids outside this rank's rows give zero
// vectors, and reduce_from_region sums the ranks' lookups into the full embedding. Parameter
// "weight" [padded_rows / tp, dim].
class VocabParallelEmbedding : public nn::UnaryModule, public ShardedModule {
 public:
  VocabParallelEmbedding(const models::EmbeddingSpec& spec, CommPtr group, int64_t pad_multiple = 128);
  Tensor forward(const Tensor& ids) override;
  std::map<std::string, ParamShard> shards() const override;
  int64_t num_embeddings, embedding_dim, padded_rows, vocab_start, vocab_end;  // this rank: [start, end)
  std::optional<int64_t> padding_idx;
  Tensor weight;

 protected:
  std::string extra_repr() const override;

 private:
  CommPtr group_;
};

// The smallest multiple of multiple x tp that holds `rows`.
int64_t padded_vocab_rows(int64_t rows, int64_t multiple, int tp);

}  // namespace trident::parallel::tp
