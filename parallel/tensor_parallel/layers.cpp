#include "parallel/tensor_parallel/layers.h"

#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "core/factory.h"
#include "ops/arith.h"
#include "ops/compare.h"
#include "ops/index.h"
#include "ops/linalg.h"
#include "ops/shape.h"
#include "parallel/tensor_parallel/sequence_parallel.h"

namespace trident::parallel::tp {

using models::WeightLayout;

Tensor shard_of(const Tensor& full, const ParamShard& s, int rank, int size) {
  TRIDENT_CHECK(s.dim >= 0 && s.dim < full.dim() && full.size(s.dim) == s.full_size, "tensor-parallel shard: a tensor of shape ",
                full.sizes(), " does not have ", s.full_size, " entries along dim ", s.dim);
  TRIDENT_CHECK(s.padded_size >= s.full_size && s.padded_size % (s.parts * size) == 0, "tensor-parallel shard: padded size ",
                s.padded_size, " is not a multiple of ", s.parts, " parts x ", size, " ranks");
  Tensor t = full;
  if (s.padded_size > s.full_size) {
    Shape z = full.sizes();
    z[static_cast<size_t>(s.dim)] = s.padded_size - s.full_size;
    t = cat({full, zeros(z, TensorOptions(full.dtype()).device(full.device()))}, s.dim);
  }
  std::vector<Tensor> pieces;
  for (const Tensor& part : chunk(t, s.parts, s.dim)) pieces.push_back(local_slice(part, rank, size, s.dim));
  return cat(pieces, s.dim).contiguous();
}

Tensor gather_full(const Tensor& local, const ParamShard& s, comm::Communicator& group) {
  const int size = group.size();
  TRIDENT_CHECK(local.size(s.dim) * size == s.padded_size, "tensor-parallel gather: a shard of shape ", local.sizes(),
                " on ", size, " ranks does not make ", s.padded_size, " entries along dim ", s.dim);
  // Every rank's shard in one buffer [size, shard...], then each rank's block of each part copied
  // straight to its place in the result (part p's rows of rank r start at p padded / parts +
  // r block), the padding past full_size left out: the buffer and the result are all this holds,
  // twice the entry (NOTE [Streamed checkpoints] in parallel/checkpoint.h).
  Shape gathered = local.sizes();
  gathered.insert(gathered.begin(), size);
  Tensor all = empty(gathered, TensorOptions(local.dtype()).device(local.device()));
  group.all_gather(all, local.detach().contiguous()).wait();
  Shape full = local.sizes();
  full[static_cast<size_t>(s.dim)] = s.full_size;
  Tensor out = empty(full, TensorOptions(local.dtype()).device(local.device()));
  const int64_t block = local.size(s.dim) / s.parts, part = s.padded_size / s.parts;
  NoGradGuard no_grad;
  for (int r = 0; r < size; ++r) {
    const Tensor mine = select(all, 0, r);
    for (int64_t p = 0; p < s.parts; ++p) {
      const int64_t at = p * part + r * block, n = std::min(block, s.full_size - at);
      if (n > 0) copy_(narrow(out, s.dim, at, n), narrow(mine, s.dim, p * block, n));
    }
  }
  return out;
}

int64_t padded_vocab_rows(int64_t rows, int64_t multiple, int tp) {
  TRIDENT_CHECK(rows > 0 && multiple > 0 && tp > 0, "padded_vocab_rows: rows ", rows, ", multiple ", multiple, ", tp ", tp,
                " must be positive");
  const int64_t m = multiple * tp;
  return (rows + m - 1) / m * m;
}

namespace {

Shape weight_shape(WeightLayout layout, int64_t in, int64_t out) {
  return layout == WeightLayout::InOut ? Shape{in, out} : Shape{out, in};
}
int64_t out_dim(WeightLayout l) { return l == WeightLayout::InOut ? 1 : 0; }
int64_t in_dim(WeightLayout l) { return l == WeightLayout::InOut ? 0 : 1; }

// The full weight, initialized as the serial layer initializes it.
Tensor full_weight(const models::LinearSpec& s) {
  TRIDENT_CHECK(s.in_features > 0 && s.out_features > 0, "linear layer ", s.name, ": feature counts must be positive, got in=",
                s.in_features, ", out=", s.out_features);
  Tensor w = zeros(weight_shape(s.layout, s.in_features, s.out_features), s.dtype);
  if (s.init_weight) {
    NoGradGuard no_grad;
    s.init_weight(w);
  }
  return w;
}

Tensor apply_linear(const Tensor& x, const Tensor& w, WeightLayout layout, const Tensor& bias) {
  return linear(x, layout == WeightLayout::InOut ? transpose(w, 0, 1) : w, bias);
}

}  // namespace

// ---- column ----

ColumnParallelLinear::ColumnParallelLinear(const models::LinearSpec& s, CommPtr group, bool gather, bool seq)
    : nn::UnaryModule("ColumnParallelLinear"),
      in_features(s.in_features),
      out_features(s.out_features),
      fused_parts(s.fused_parts),
      layout(s.layout),
      gather_output(gather),
      input_in_region(s.input_in_region),
      sequence_parallel(seq),
      group_(std::move(group)) {
  TRIDENT_CHECK(group_ != nullptr, "ColumnParallelLinear ", s.name, ": no tensor-parallel group");
  const int tp = group_->size();
  TRIDENT_CHECK(s.fused_parts >= 1 && s.out_features % (s.fused_parts * tp) == 0, "ColumnParallelLinear ", s.name,
                ": out_features ", s.out_features, " in ", s.fused_parts, " fused parts does not divide by tp = ", tp);
  TRIDENT_CHECK(!gather || s.fused_parts == 1, "ColumnParallelLinear ", s.name,
                ": gather_output with fused parts would interleave them; gather each part instead");
  const Tensor w = full_weight(s);
  weight = register_parameter("weight", shard_of(w, shards().at("weight"), group_->rank(), tp));
  if (s.bias) bias = register_parameter("bias", zeros({s.out_features / tp}, s.dtype));
}

std::map<std::string, ParamShard> ColumnParallelLinear::shards() const {
  std::map<std::string, ParamShard> m;
  m["weight"] = {out_dim(layout), out_features, out_features, fused_parts};
  m["bias"] = {0, out_features, out_features, fused_parts};
  if (!bias.defined()) m.erase("bias");
  return m;
}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  Tensor in = x;
  TRIDENT_CHECK(!sequence_parallel || input_in_region || x.dim() == 3,
                "ColumnParallelLinear: sequence parallelism expects this rank's positions [B, T / tp, in], got shape ", x.sizes());
  if (!input_in_region) in = sequence_parallel ? gather_from_sequence_region(x, group_, kSequenceDim) : copy_to_region(x, group_);
  const Tensor y = apply_linear(in, weight, layout, bias);
  return gather_output ? gather_from_region(y, group_, -1) : y;
}

std::string ColumnParallelLinear::extra_repr() const {
  return detail::str("in_features=", in_features, ", out_features=", out_features, ", tp=", group_->size(),
                     ", fused_parts=", fused_parts, ", gather_output=", gather_output ? "true" : "false",
                     sequence_parallel ? ", sequence_parallel=true" : "");
}

// ---- row ----

RowParallelLinear::RowParallelLinear(const models::LinearSpec& s, CommPtr group, bool seq)
    : nn::UnaryModule("RowParallelLinear"),
      in_features(s.in_features),
      out_features(s.out_features),
      sequence_parallel(seq),
      layout(s.layout),
      group_(std::move(group)) {
  TRIDENT_CHECK(group_ != nullptr, "RowParallelLinear ", s.name, ": no tensor-parallel group");
  const int tp = group_->size();
  TRIDENT_CHECK(s.fused_parts == 1, "RowParallelLinear ", s.name, ": fused parts are for column-parallel layers");
  TRIDENT_CHECK(s.in_features % tp == 0, "RowParallelLinear ", s.name, ": in_features ", s.in_features,
                " does not divide by tp = ", tp);
  const Tensor w = full_weight(s);
  weight = register_parameter("weight", shard_of(w, shards().at("weight"), group_->rank(), tp));
  if (s.bias) bias = register_parameter("bias", zeros({s.out_features}, s.dtype));
}

std::map<std::string, ParamShard> RowParallelLinear::shards() const {
  return {{"weight", {in_dim(layout), in_features, in_features, 1}}};
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  const Tensor partial = apply_linear(x, weight, layout, Tensor());
  if (sequence_parallel) {
    TRIDENT_CHECK(partial.dim() == 3, "RowParallelLinear: sequence parallelism expects input [B, T, in / tp], got shape ",
                  x.sizes());
    const Tensor y = reduce_scatter_to_sequence_region(partial, group_, kSequenceDim);
    return bias.defined() ? add(y, copy_to_region(bias, group_)) : y;
  }
  const Tensor y = reduce_from_region(partial, group_);
  return bias.defined() ? add(y, bias) : y;
}

std::string RowParallelLinear::extra_repr() const {
  return detail::str("in_features=", in_features, ", out_features=", out_features, ", tp=", group_->size(),
                     sequence_parallel ? ", sequence_parallel=true" : "");
}

// ---- vocabulary ----

VocabParallelEmbedding::VocabParallelEmbedding(const models::EmbeddingSpec& s, CommPtr group, int64_t pad_multiple)
    : nn::UnaryModule("VocabParallelEmbedding"),
      num_embeddings(s.num_embeddings),
      embedding_dim(s.embedding_dim),
      padding_idx(s.padding_idx),
      group_(std::move(group)) {
  TRIDENT_CHECK(group_ != nullptr, "VocabParallelEmbedding ", s.name, ": no tensor-parallel group");
  TRIDENT_CHECK(s.num_embeddings > 0 && s.embedding_dim > 0, "VocabParallelEmbedding ", s.name, ": sizes must be positive, got ",
                s.num_embeddings, " x ", s.embedding_dim);
  TRIDENT_CHECK(!s.padding_idx || (*s.padding_idx >= 0 && *s.padding_idx < s.num_embeddings), "VocabParallelEmbedding ",
                s.name, ": padding_idx ", s.padding_idx.value_or(0), " out of range for ", s.num_embeddings, " rows");
  const int tp = group_->size();
  padded_rows = padded_vocab_rows(s.num_embeddings, pad_multiple, tp);
  const int64_t per_rank = padded_rows / tp;
  vocab_start = group_->rank() * per_rank;
  vocab_end = vocab_start + per_rank;
  Tensor full = zeros({s.num_embeddings, s.embedding_dim}, s.dtype);
  {
    NoGradGuard no_grad;
    if (s.init_weight) s.init_weight(full);
    if (s.padding_idx) fill_(select(full, 0, *s.padding_idx), 0.0);
  }
  weight = register_parameter("weight", shard_of(full, shards().at("weight"), group_->rank(), tp));
}

std::map<std::string, ParamShard> VocabParallelEmbedding::shards() const {
  return {{"weight", {0, num_embeddings, padded_rows, 1}}};
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids) {
  TRIDENT_CHECK(ids.dtype() == DType::I64 || ids.dtype() == DType::I32, "VocabParallelEmbedding: ids must be i64 or i32, got ",
                ids.dtype());
  if (group_->size() == 1) return embedding(weight, ids, padding_idx);
  const Tensor id = ids.to(DType::I64);
  const Tensor outside = logical_or(lt(id, static_cast<double>(vocab_start)), ge(id, static_cast<double>(vocab_end)));
  const Tensor local = masked_fill(sub(id, static_cast<double>(vocab_start)), outside, 0.0);
  std::optional<int64_t> pad;
  if (padding_idx && *padding_idx >= vocab_start && *padding_idx < vocab_end) pad = *padding_idx - vocab_start;
  const Tensor e = masked_fill(embedding(weight, local, pad), unsqueeze(outside, -1), 0.0);
  return reduce_from_region(e, group_);
}

std::string VocabParallelEmbedding::extra_repr() const {
  return detail::str(num_embeddings, ", ", embedding_dim, ", padded_rows=", padded_rows, ", rows=[", vocab_start, ", ",
                     vocab_end, ")");
}

}  // namespace trident::parallel::tp
