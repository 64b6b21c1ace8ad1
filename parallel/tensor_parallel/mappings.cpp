#include "parallel/tensor_parallel/mappings.h"

#include <optional>

#include "autograd/function.h"
#include "core/copy.h"
#include "core/factory.h"
#include "ops/index.h"
#include "ops/shape.h"

namespace trident::parallel::tp {

using autograd::TensorList;

namespace {

int64_t wrap_dim(const Tensor& x, int64_t dim, const char* what) {
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  TRIDENT_CHECK(d >= 0 && d < x.dim(), what, ": dim ", dim, " out of range for a tensor of shape ", x.sizes());
  return d;
}

Tensor all_reduce_copy(const Tensor& x, comm::Communicator& g) {
  Tensor y = x.contiguous().clone();
  g.all_reduce(y).wait();
  return y;
}

// NOTE [Tensor-parallel regions and higher-order gradients]: each function's backward is its
// conjugate applied as a function (copy <-> reduce, scatter <-> gather, sequence gather <->
// reduce-scatter), whose own backward is the first one again. With grad mode off (a first-order
// backward) that is just the collective; under a create_graph backward it records the conjugate,
// so the gradients can be differentiated again and the second-order pass makes the collectives
// Megatron's rules ask for: the backward of reduce_from_region (identity, a replicated gradient
// going to each rank's different partial sum) must all-reduce in its own backward, which is what
// copy_to_region does.
struct CopyToRegion;
struct ReduceFromRegion;
struct ScatterToRegion;
struct GatherFromRegion;
struct GatherFromSequenceRegion;
struct ReduceScatterToSequenceRegion;

// Saves the group (and the dim) and declares the backward differentiable.
void keep(FunctionCtx& ctx, const CommPtr& g, std::optional<int64_t> dim = std::nullopt) {
  ctx.save("group", g);
  if (dim) ctx.save("dim", *dim);
  ctx.set_differentiable_backward();
}

struct CopyToRegion : autograd::Function<CopyToRegion> {
  static constexpr const char* name = "CopyToTensorParallelRegion";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, const CommPtr& g) {
    keep(ctx, g);
    return x;
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads);
};

struct ReduceFromRegion : autograd::Function<ReduceFromRegion> {
  static constexpr const char* name = "ReduceFromTensorParallelRegion";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, const CommPtr& g) {
    keep(ctx, g);
    return all_reduce_copy(x, *g);
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads);
};

struct ScatterToRegion : autograd::Function<ScatterToRegion> {
  static constexpr const char* name = "ScatterToTensorParallelRegion";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, const CommPtr& g, int64_t dim) {
    keep(ctx, g, dim);
    return local_slice(x, g->rank(), g->size(), dim).contiguous();
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads);
};

struct GatherFromRegion : autograd::Function<GatherFromRegion> {
  static constexpr const char* name = "GatherFromTensorParallelRegion";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, const CommPtr& g, int64_t dim) {
    keep(ctx, g, dim);
    return all_gather_along(x, *g, dim);
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads);
};

struct GatherFromSequenceRegion : autograd::Function<GatherFromSequenceRegion> {
  static constexpr const char* name = "GatherFromSequenceParallelRegion";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, const CommPtr& g, int64_t dim) {
    keep(ctx, g, dim);
    return all_gather_along(x, *g, dim);
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads);
};

struct ReduceScatterToSequenceRegion : autograd::Function<ReduceScatterToSequenceRegion> {
  static constexpr const char* name = "ReduceScatterToSequenceParallelRegion";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, const CommPtr& g, int64_t dim) {
    keep(ctx, g, dim);
    return reduce_scatter_along(x, *g, dim);
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads);
};

const CommPtr& group_of(const FunctionCtx& ctx) { return ctx.get<CommPtr>("group"); }
int64_t dim_of(const FunctionCtx& ctx) { return ctx.get<int64_t>("dim"); }

TensorList CopyToRegion::backward(FunctionCtx& ctx, const TensorList& grads) {
  return {ReduceFromRegion::apply(grads[0], group_of(ctx))};
}
TensorList ReduceFromRegion::backward(FunctionCtx& ctx, const TensorList& grads) {
  return {CopyToRegion::apply(grads[0], group_of(ctx))};
}
TensorList ScatterToRegion::backward(FunctionCtx& ctx, const TensorList& grads) {
  return {GatherFromRegion::apply(grads[0], group_of(ctx), dim_of(ctx))};
}
TensorList GatherFromRegion::backward(FunctionCtx& ctx, const TensorList& grads) {
  return {ScatterToRegion::apply(grads[0], group_of(ctx), dim_of(ctx))};
}
TensorList GatherFromSequenceRegion::backward(FunctionCtx& ctx, const TensorList& grads) {
  return {ReduceScatterToSequenceRegion::apply(grads[0], group_of(ctx), dim_of(ctx))};
}
TensorList ReduceScatterToSequenceRegion::backward(FunctionCtx& ctx, const TensorList& grads) {
  return {GatherFromSequenceRegion::apply(grads[0], group_of(ctx), dim_of(ctx))};
}

void check_group(const CommPtr& g, const char* what) {
  TRIDENT_CHECK(g != nullptr, what, ": no tensor-parallel group (null communicator)");
}

}  // namespace

Tensor local_slice(const Tensor& x, int rank, int size, int64_t dim) {
  const int64_t d = wrap_dim(x, dim, "tensor-parallel slice");
  TRIDENT_CHECK(x.size(d) % size == 0, "tensor parallelism: dim ", d, " of shape ", x.sizes(), " does not divide by the ",
                size, " ranks of the tensor-parallel group");
  const int64_t n = x.size(d) / size;
  return narrow(x, d, rank * n, n);
}

Tensor all_gather_along(const Tensor& x, comm::Communicator& g, int64_t dim) {
  const int64_t d = wrap_dim(x, dim, "tensor-parallel all-gather");
  if (g.size() == 1) return x;
  Shape s = x.sizes();
  s.insert(s.begin(), g.size());
  const Tensor out = empty(s, TensorOptions(x.dtype()).device(x.device()));
  g.all_gather(out, x.contiguous()).wait();
  if (d == 0) return reshape(out, [&] { Shape r = x.sizes(); r[0] *= g.size(); return r; }());
  std::vector<Tensor> parts;
  for (int r = 0; r < g.size(); ++r) parts.push_back(select(out, 0, r));
  return cat(parts, d);
}

Tensor reduce_scatter_along(const Tensor& x, comm::Communicator& g, int64_t dim) {
  const int64_t d = wrap_dim(x, dim, "tensor-parallel reduce-scatter");
  if (g.size() == 1) return x;
  TRIDENT_CHECK(x.size(d) % g.size() == 0, "tensor-parallel reduce-scatter: dim ", d, " of shape ", x.sizes(),
                " does not divide by the ", g.size(), " ranks of ", g.name());
  // Rank r's slice of dim must be slot r of the buffer: move dim's blocks to the front.
  const Tensor in = d == 0 ? x.contiguous() : stack(chunk(x, g.size(), d), 0).contiguous();
  Shape s = x.sizes();
  s[static_cast<size_t>(d)] /= g.size();
  const Tensor out = empty(s, TensorOptions(x.dtype()).device(x.device()));
  g.reduce_scatter(out, in).wait();
  return out;
}

Tensor copy_to_region(const Tensor& x, const CommPtr& g) {
  check_group(g, "copy_to_region");
  return g->size() == 1 ? x : CopyToRegion::apply(x, g);
}
Tensor reduce_from_region(const Tensor& x, const CommPtr& g) {
  check_group(g, "reduce_from_region");
  return g->size() == 1 ? x : ReduceFromRegion::apply(x, g);
}
Tensor scatter_to_region(const Tensor& x, const CommPtr& g, int64_t dim) {
  check_group(g, "scatter_to_region");
  return g->size() == 1 ? x : ScatterToRegion::apply(x, g, wrap_dim(x, dim, "scatter_to_region"));
}
Tensor gather_from_region(const Tensor& x, const CommPtr& g, int64_t dim) {
  check_group(g, "gather_from_region");
  return g->size() == 1 ? x : GatherFromRegion::apply(x, g, wrap_dim(x, dim, "gather_from_region"));
}
Tensor gather_from_sequence_region(const Tensor& x, const CommPtr& g, int64_t dim) {
  check_group(g, "gather_from_sequence_region");
  return g->size() == 1 ? x : GatherFromSequenceRegion::apply(x, g, wrap_dim(x, dim, "gather_from_sequence_region"));
}
Tensor reduce_scatter_to_sequence_region(const Tensor& x, const CommPtr& g, int64_t dim) {
  check_group(g, "reduce_scatter_to_sequence_region");
  return g->size() == 1 ? x
                        : ReduceScatterToSequenceRegion::apply(x, g, wrap_dim(x, dim, "reduce_scatter_to_sequence_region"));
}

}  // namespace trident::parallel::tp
