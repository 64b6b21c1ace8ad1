#include "ops/reduce.h"

#include <algorithm>

#include "ops/common.h"
#include "ops/cpu/reduce.h"
#include "ops/arith.h"
#include "ops/shape.h"

namespace trident {

using namespace ops_detail;

std::vector<int64_t> reduction_dims(const Tensor& x, const std::vector<int64_t>& dims, const char* what) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < x.dim(); ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) {
    if (x.dim() == 0) {
      wrap_dim(d, 0, what);  // accepts 0 and -1, throws otherwise
      continue;
    }
    out.push_back(wrap_dim(d, x.dim(), what));
  }
  std::sort(out.begin(), out.end());
  TRIDENT_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), what, ": dim repeated in ", dims);
  return out;
}

Shape reduced_shape(const Shape& sizes, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  size_t j = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    const bool red = j < dims.size() && dims[j] == static_cast<int64_t>(d);
    if (red) ++j;
    if (!red) {
      out.push_back(sizes[d]);
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

Tensor unsqueeze_reduced(const Tensor& g, const std::vector<int64_t>& dims, int64_t input_dim, bool keepdim) {
  if (keepdim || input_dim == 0) return g;
  Shape sz = g.sizes();
  for (int64_t d : dims) sz.insert(sz.begin() + d, 1);
  return reshape(g, sz);
}

namespace {

DType sum_dtype(DType t) { return is_floating(t) ? t : DType::I64; }

Tensor reduce_op(cpu::ReduceKind kind, const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim) {
  const char* name = kind == cpu::ReduceKind::Sum ? "sum" : "mean";
  check_defined(name, x);
  check_cpu(name, x);
  if (kind == cpu::ReduceKind::Mean)
    TRIDENT_CHECK(is_floating(x.dtype()), "mean: expected a floating-point tensor, got ", x.dtype(),
                  " (convert with .to(kF32) first)");
  const std::vector<int64_t> dims = reduction_dims(x, dims_in, name);
  Tensor out = cpu::reduce(kind, x, dims, keepdim, sum_dtype(x.dtype()));
  if (autograd::any_requires_grad({x})) {
    int64_t count = 1;
    for (int64_t d : dims) count *= x.size(d);
    autograd::record(kind == cpu::ReduceKind::Sum ? "SumBackward" : "MeanBackward", {x}, out,
                     [dims, keepdim, in = x.sizes(), kind, count](const TensorList& g) {
                       Tensor e = expand(unsqueeze_reduced(g[0], dims, static_cast<int64_t>(in.size()), keepdim), in);
                       if (kind == cpu::ReduceKind::Mean) e = div(e, static_cast<double>(count));
                       return TensorList{e};
                     });
  }
  return out;
}

}  // namespace

Tensor sum(const Tensor& x) { return reduce_op(cpu::ReduceKind::Sum, x, {}, false); }
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_op(cpu::ReduceKind::Sum, x, dims, keepdim);
}
Tensor mean(const Tensor& x) { return reduce_op(cpu::ReduceKind::Mean, x, {}, false); }
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_op(cpu::ReduceKind::Mean, x, dims, keepdim);
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.sizes() == shape) return x;
  TRIDENT_CHECK(static_cast<size_t>(x.dim()) >= shape.size(), "sum_to: cannot reduce shape ", x.sizes(), " to ", shape);
  const size_t lead = static_cast<size_t>(x.dim()) - shape.size();
  std::vector<int64_t> dims;
  for (size_t d = 0; d < static_cast<size_t>(x.dim()); ++d) {
    if (d < lead) {
      dims.push_back(static_cast<int64_t>(d));
    } else {
      TRIDENT_CHECK(shape[d - lead] == x.sizes()[d] || shape[d - lead] == 1, "sum_to: cannot reduce shape ", x.sizes(),
                    " to ", shape);
      if (shape[d - lead] == 1 && x.sizes()[d] != 1) dims.push_back(static_cast<int64_t>(d));
    }
  }
  Tensor r = dims.empty() ? x : sum(x, dims, /*keepdim=*/true);
  return reshape(r, shape);
}

}  // namespace trident
