#include "parallel/tensor_parallel/mappings.h"

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

struct CopyToRegion : autograd::Function<CopyToRegion> {
  static constexpr const char* name = "CopyToTensorParallelRegion";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, const CommPtr& g) {
    ctx.save("group", g);
    return x;
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads) {
    return {all_reduce_copy(grads[0], *ctx.get<CommPtr>("group"))};
  }
};

struct ReduceFromRegion : autograd::Function<ReduceFromRegion> {
  static constexpr const char* name = "ReduceFromTensorParallelRegion";
  static Tensor forward(FunctionCtx&, const Tensor& x, const CommPtr& g) { return all_reduce_copy(x, *g); }
  static TensorList backward(FunctionCtx&, const TensorList& grads) { return {grads[0]}; }
};

struct ScatterToRegion : autograd::Function<ScatterToRegion> {
  static constexpr const char* name = "ScatterToTensorParallelRegion";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, const CommPtr& g, int64_t dim) {
    ctx.save("group", g);
    ctx.save("dim", dim);
    return local_slice(x, g->rank(), g->size(), dim).contiguous();
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads) {
    return {all_gather_along(grads[0], *ctx.get<CommPtr>("group"), ctx.get<int64_t>("dim"))};
  }
};

struct GatherFromRegion : autograd::Function<GatherFromRegion> {
  static constexpr const char* name = "GatherFromTensorParallelRegion";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, const CommPtr& g, int64_t dim) {
    ctx.save("group", g);
    ctx.save("dim", dim);
    return all_gather_along(x, *g, dim);
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads) {
    const CommPtr& g = ctx.get<CommPtr>("group");
    return {local_slice(grads[0], g->rank(), g->size(), ctx.get<int64_t>("dim")).contiguous()};
  }
};

struct GatherFromSequenceRegion : autograd::Function<GatherFromSequenceRegion> {
  static constexpr const char* name = "GatherFromSequenceParallelRegion";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, const CommPtr& g, int64_t dim) {
    ctx.save("group", g);
    ctx.save("dim", dim);
    return all_gather_along(x, *g, dim);
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads) {
    return {reduce_scatter_along(grads[0], *ctx.get<CommPtr>("group"), ctx.get<int64_t>("dim"))};
  }
};

struct ReduceScatterToSequenceRegion : autograd::Function<ReduceScatterToSequenceRegion> {
  static constexpr const char* name = "ReduceScatterToSequenceParallelRegion";
  static Tensor forward(FunctionCtx& ctx, const Tensor& x, const CommPtr& g, int64_t dim) {
    ctx.save("group", g);
    ctx.save("dim", dim);
    return reduce_scatter_along(x, *g, dim);
  }
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads) {
    return {all_gather_along(grads[0], *ctx.get<CommPtr>("group"), ctx.get<int64_t>("dim"))};
  }
};

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
