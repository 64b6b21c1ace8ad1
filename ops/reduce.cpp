#include "ops/reduce.h"

#include <algorithm>

#include <cmath>

#include "core/factory.h"
#include "ops/arith.h"
#include "ops/autocast.h"
#include "ops/common.h"
#include "ops/compare.h"
#include "ops/unary.h"
#include "ops/cpu/reduce.h"
#include "ops/index.h"
#include "ops/shape.h"
#if TRIDENT_HAVE_CUDA
#include "ops/cuda/reduce.h"
#endif

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
  if (autocast::is_enabled()) {  // NOTE [Autocast]
    autocast::Suspend off;
    return reduce_op(kind, autocast::widen(x), dims_in, keepdim);
  }
  const char* name = kind == cpu::ReduceKind::Sum ? "sum" : "mean";
  check_defined(name, x);
  check_device(name, x);
  if (kind == cpu::ReduceKind::Mean)
    TRIDENT_CHECK(is_floating(x.dtype()), "mean: expected a floating-point tensor, got ", x.dtype(),
                  " (convert with .to(kF32) first)");
  const std::vector<int64_t> dims = reduction_dims(x, dims_in, name);
  Tensor out = TRIDENT_KERNEL(reduce)(kind, x, dims, keepdim, sum_dtype(x.dtype()));
  if (autograd::any_requires_grad({x})) {
    int64_t count = 1;
    for (int64_t d : dims) count *= x.size(d);
    autograd::record(kind == cpu::ReduceKind::Sum ? "SumBackward" : "MeanBackward", {x}, out,
                     [dims, keepdim, in = x.sizes(), kind, count](const TensorList& g) {
                       Tensor e = expand(unsqueeze_reduced(g[0], dims, static_cast<int64_t>(in.size()), keepdim), in);
                       if (kind == cpu::ReduceKind::Mean) e = div(e, static_cast<double>(count));
                       return TensorList{e};
                     }, kDifferentiable);
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

// ---- max, min, argmax, argmin ----

namespace {

// NOTE [Higher-order gradients]: the gradient of max, min or the inf norm as a recorded product:
// gk (the reduced gradient, broadcastable to x) times the share of each element (1 / ties at the
// extreme, times its sign for the norm), a constant.
Tensor shared_among_ties(const Tensor& x, const Tensor& v, const Tensor& gk, const std::vector<int64_t>& dims, bool abs_sign) {
  const Tensor share = TRIDENT_KERNEL(distribute_backward)(x.detach(), v.detach(), ones_like(gk), dims, abs_sign);
  return mul(expand(gk, x.sizes()), share);
}

void check_extreme_input(const char* name, const Tensor& x) {
  check_defined(name, x);
  check_device(name, x);
  TRIDENT_CHECK(x.dtype() != DType::Bool, name, ": not defined for bool tensors (convert with .to(kI64) first)");
}

// max, min and the inf norms have no identity: every reduced dim must hold elements.
void check_nonempty(const char* name, const Tensor& x, const std::vector<int64_t>& dims) {
  for (int64_t d : dims)
    TRIDENT_CHECK(x.size(d) != 0, name, ": cannot reduce over dim ", d, " of size 0 (input shape ", x.sizes(), "): ",
                  name, " of no elements is undefined");
}

Tensor extreme_values(bool is_max, const char* name, const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim) {
  check_extreme_input(name, x);
  const std::vector<int64_t> dims = reduction_dims(x, dims_in, name);
  check_nonempty(name, x, dims);
  Tensor out = TRIDENT_KERNEL(extreme)(is_max, x.detach(), dims, keepdim);
  if (autograd::any_requires_grad({x})) {
    // Shared evenly among ties, as PyTorch's evenly_distribute_backward: a subgradient that is
    // symmetric in the tied elements (the per-dim max instead picks the first, see below).
    autograd::record(is_max ? "MaxBackward" : "MinBackward", {x}, out,
                     [sx = SavedTensor(x), so = SavedTensor(out), dims, keepdim](const TensorList& g) {
                       const Tensor xv = sx.unpack();
                       const Tensor v = unsqueeze_reduced(so.unpack(), dims, xv.dim(), keepdim);
                       const Tensor gk = unsqueeze_reduced(g[0], dims, xv.dim(), keepdim);
                       if (recording_backward()) return TensorList{shared_among_ties(xv, v, gk, dims, false)};
                       return TensorList{TRIDENT_KERNEL(distribute_backward)(xv, v, gk, dims, /*abs_sign=*/false)};
                     }, kDifferentiable);
  }
  return out;
}

ValuesIndices extreme_dim(bool is_max, const char* name, const Tensor& x, int64_t dim, bool keepdim) {
  check_extreme_input(name, x);
  const std::vector<int64_t> dims = reduction_dims(x, {dim}, name);
  check_nonempty(name, x, dims);
  auto [values, indices] = TRIDENT_KERNEL(extreme_index)(is_max, x.detach(), dims, keepdim);
  if (autograd::any_requires_grad({x})) {
    // The gradient goes to the element the index names (the first on ties), as torch.max(dim).
    autograd::record(is_max ? "MaxBackward" : "MinBackward", {x}, values,
                     [si = SavedTensor(indices), in = x.sizes(), dims, keepdim](const TensorList& g) {
                       if (in.empty()) return TensorList{g[0]};  // a 0-dim input is its own max
                       // The zeros on the gradient's device: scatter_add takes one device.
                       const auto nd = static_cast<int64_t>(in.size());
                       const Tensor idx = unsqueeze_reduced(si.unpack(), dims, nd, keepdim);
                       const Tensor gk = unsqueeze_reduced(g[0], dims, nd, keepdim);
                       return TensorList{scatter_add(zeros(in, TensorOptions(g[0].dtype()).device(g[0].device())), dims[0], idx, gk)};
                     }, kDifferentiable);
  }
  return {values, indices};
}

Tensor arg_extreme(bool is_max, const char* name, const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  check_extreme_input(name, x);
  std::vector<int64_t> dims;
  if (dim.has_value()) {
    dims = reduction_dims(x, {*dim}, name);
    check_nonempty(name, x, dims);
  } else {
    dims = reduction_dims(x, {}, name);
    TRIDENT_CHECK(x.numel() > 0, name, ": the input of shape ", x.sizes(),
                  " is empty; the index of the extreme of no elements is undefined");
  }
  return TRIDENT_KERNEL(extreme_index)(is_max, x.detach(), dims, keepdim).second;
}

}  // namespace

Tensor max(const Tensor& x) { return extreme_values(true, "max", x, {}, false); }
Tensor min(const Tensor& x) { return extreme_values(false, "min", x, {}, false); }
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) { return extreme_dim(true, "max", x, dim, keepdim); }
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) { return extreme_dim(false, "min", x, dim, keepdim); }
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return extreme_values(true, "amax", x, dims, keepdim);
}
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return extreme_values(false, "amin", x, dims, keepdim);
}
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_extreme(true, "argmax", x, dim, keepdim);
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_extreme(false, "argmin", x, dim, keepdim);
}

// ---- var, std, logsumexp, norm ----

namespace {

void check_float_reduce(const char* name, const Tensor& x) {
  check_defined(name, x);
  check_device(name, x);
  TRIDENT_CHECK(is_floating(x.dtype()), name, ": expected a floating-point tensor, got ", x.dtype(),
                " (convert with .to(kF32) first)");
}

Tensor var_op(bool is_std, const Tensor& x, const std::vector<int64_t>& dims_in, double correction, bool keepdim) {
  if (autocast::is_enabled()) {  // NOTE [Autocast]
    autocast::Suspend off;
    return var_op(is_std, autocast::widen(x), dims_in, correction, keepdim);
  }
  const char* name = is_std ? "std_dev" : "var";
  check_float_reduce(name, x);
  const std::vector<int64_t> dims = reduction_dims(x, dims_in, name);
  Tensor out = TRIDENT_KERNEL(var)(x.detach(), dims, correction, keepdim, is_std);
  if (autograd::any_requires_grad({x})) {
    autograd::record(is_std ? "StdBackward" : "VarBackward", {x}, out,
                     [sx = SavedTensor(x), so = is_std ? SavedTensor(out) : SavedTensor(), dims, keepdim, correction,
                      is_std](const TensorList& g) {
                       const Tensor xv = sx.unpack();
                       const Tensor gk = unsqueeze_reduced(g[0], dims, xv.dim(), keepdim);
                       const Tensor ok = is_std ? unsqueeze_reduced(so.unpack(), dims, xv.dim(), keepdim) : gk;
                       if (recording_backward()) {  // NOTE [Higher-order gradients]
                         // d var = 2 (x - mean) / (N - correction); d std = (x - mean) / ((N - correction) std).
                         double n = 1;
                         for (int64_t d : dims) n *= static_cast<double>(xv.size(d));
                         const Tensor xm = sub(xv, mean(xv, dims, /*keepdim=*/true));
                         if (!is_std) return TensorList{mul(mul(gk, xm), 2.0 / (n - correction))};
                         return TensorList{div(mul(gk, xm), mul(ok, n - correction))};
                       }
                       return TensorList{TRIDENT_KERNEL(var_backward)(xv, gk, ok, dims, correction, is_std)};
                     }, kDifferentiable);
  }
  return out;
}

}  // namespace

Tensor var(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim) {
  return var_op(false, x, dims, correction, keepdim);
}
Tensor std_dev(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim) {
  return var_op(true, x, dims, correction, keepdim);
}

Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim) {
  if (autocast::is_enabled()) {  // NOTE [Autocast]
    autocast::Suspend off;
    return logsumexp(autocast::widen(x), dims_in, keepdim);
  }
  check_float_reduce("logsumexp", x);
  const std::vector<int64_t> dims = reduction_dims(x, dims_in, "logsumexp");
  Tensor out = TRIDENT_KERNEL(logsumexp)(x.detach(), dims, keepdim);
  if (autograd::any_requires_grad({x})) {
    autograd::record("LogsumexpBackward", {x}, out,
                     [sx = SavedTensor(x), so = SavedTensor(out), dims, keepdim](const TensorList& g) {
                       const Tensor xv = sx.unpack();
                       const Tensor gk = unsqueeze_reduced(g[0], dims, xv.dim(), keepdim);
                       const Tensor ok = unsqueeze_reduced(so.unpack(), dims, xv.dim(), keepdim);
                       if (recording_backward()) return TensorList{mul(gk, exp(sub(xv, ok)))};  // softmax(x) g
                       return TensorList{TRIDENT_KERNEL(logsumexp_backward)(xv, gk, ok)};
                     }, kDifferentiable);
  }
  return out;
}

Tensor norm(const Tensor& x, double p, const std::vector<int64_t>& dims_in, bool keepdim) {
  if (autocast::is_enabled()) {  // NOTE [Autocast]
    autocast::Suspend off;
    return norm(autocast::widen(x), p, dims_in, keepdim);
  }
  check_float_reduce("norm", x);
  TRIDENT_CHECK(p >= 0 || std::isinf(p), "norm: p must be >= 0 or +-inf, got ", p);
  const std::vector<int64_t> dims = reduction_dims(x, dims_in, "norm");
  if (std::isinf(p)) check_nonempty(p > 0 ? "norm(p=inf)" : "norm(p=-inf)", x, dims);
  Tensor out = TRIDENT_KERNEL(norm)(x.detach(), p, dims, keepdim);
  if (autograd::any_requires_grad({x})) {
    autograd::record("NormBackward", {x}, out,
                     [sx = SavedTensor(x), so = SavedTensor(out), dims, keepdim, p](const TensorList& g) {
                       const Tensor xv = sx.unpack();
                       if (p == 0.0) return TensorList{zeros_like(xv)};  // a count: piecewise constant
                       const Tensor gk = unsqueeze_reduced(g[0], dims, xv.dim(), keepdim);
                       const Tensor ok = unsqueeze_reduced(so.unpack(), dims, xv.dim(), keepdim);
                       if (recording_backward()) {  // NOTE [Higher-order gradients]
                         if (std::isinf(p)) return TensorList{shared_among_ties(xv, ok, gk, dims, true)};
                         // d ||x||_p = sign(x) |x|^(p-1) / ||x||^(p-1); p = 2: x / ||x||.
                         if (p == 2.0) return TensorList{mul(gk, div(xv, ok))};
                         const Tensor sign = sub(gt(xv, 0.0).to(xv.dtype()), lt(xv, 0.0).to(xv.dtype()));
                         if (p == 1.0) return TensorList{mul(expand(gk, xv.sizes()), sign)};
                         return TensorList{mul(gk, div(mul(sign, pow(abs(xv), p - 1)), pow(ok, p - 1)))};
                       }
                       if (std::isinf(p)) return TensorList{TRIDENT_KERNEL(distribute_backward)(xv, ok, gk, dims, /*abs_sign=*/true)};
                       return TensorList{TRIDENT_KERNEL(norm_backward)(xv, gk, ok, p)};
                     }, kDifferentiable);
  }
  return out;
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
