#include "ops/shape.h"

#include <algorithm>

#include "ops/common.h"
#include "ops/reduce.h"

namespace trident {

using namespace ops_detail;

namespace {
// A view of x with new geometry, recorded with `backward` when x requires grad.
Tensor make_view(const Tensor& x, Shape sizes, Shape strides, int64_t offset, const char* name, autograd::BackwardFn backward) {
  Tensor out = x.as_strided(std::move(sizes), std::move(strides), offset);
  if (autograd::any_requires_grad({x})) autograd::record(name, {x}, out, std::move(backward), kDifferentiable);
  return out;
}
}  // namespace

Shape infer_size(const Shape& sizes, int64_t numel, const char* what) {
  Shape out = sizes;
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      TRIDENT_CHECK(infer < 0, what, ": only one dim can be -1, got ", sizes);
      infer = static_cast<int>(i);
    } else {
      TRIDENT_CHECK(sizes[i] >= 0, what, ": invalid size ", sizes[i], " in shape ", sizes);
      known *= sizes[i];
    }
  }
  if (infer >= 0) {
    TRIDENT_CHECK(known != 0 && numel % known == 0, what, ": shape ", sizes, " is invalid for a tensor of ", numel, " elements");
    out[static_cast<size_t>(infer)] = numel / known;
  } else {
    TRIDENT_CHECK(known == numel, what, ": shape ", sizes, " is invalid for a tensor of ", numel, " elements");
  }
  return out;
}

std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& new_sizes) {
  Shape ns(new_sizes.size(), 1);
  if (sizes.empty() || shape_numel(sizes) == 0) return contiguous_strides(new_sizes);
  // Walk both shapes from the innermost dim; each run of old dims that is contiguous in
  // memory ("chunk") must be matched by a run of new dims with the same element count.
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[static_cast<size_t>(d)];
    const bool chunk_ends = d == 0 || (sizes[static_cast<size_t>(d - 1)] != 1 &&
                                       strides[static_cast<size_t>(d - 1)] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[static_cast<size_t>(view_d)] == 1)) {
      ns[static_cast<size_t>(view_d)] = view_numel * chunk_base_stride;
      view_numel *= new_sizes[static_cast<size_t>(view_d)];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_base_stride = strides[static_cast<size_t>(d - 1)];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return ns;
}

Tensor view(const Tensor& x, const Shape& sizes_in) {
  check_defined("view", x);
  const Shape sizes = infer_size(sizes_in, x.numel(), "view");
  auto st = view_strides(x.sizes(), x.strides(), sizes);
  TRIDENT_CHECK(st.has_value(), "view: a tensor of shape ", x.sizes(), " and strides ", x.strides(),
                " cannot be viewed as ", sizes, " (its memory is not laid out for it); use reshape()");
  return make_view(x, sizes, *st, x.storage_offset(), "ViewBackward",
                   [in = x.sizes()](const TensorList& g) { return TensorList{reshape(g[0], in)}; });
}

Tensor reshape(const Tensor& x, const Shape& sizes_in) {
  check_defined("reshape", x);
  const Shape sizes = infer_size(sizes_in, x.numel(), "reshape");
  if (auto st = view_strides(x.sizes(), x.strides(), sizes)) {
    return make_view(x, sizes, *st, x.storage_offset(), "ReshapeBackward",
                     [in = x.sizes()](const TensorList& g) { return TensorList{reshape(g[0], in)}; });
  }
  return view(x.contiguous(), sizes);
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  check_defined("flatten", x);
  if (x.dim() == 0) return reshape(x, {1});
  const int64_t s = wrap_dim(start_dim, x.dim(), "flatten");
  const int64_t e = wrap_dim(end_dim, x.dim(), "flatten");
  TRIDENT_CHECK(s <= e, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim);
  Shape sizes;
  for (int64_t d = 0; d < s; ++d) sizes.push_back(x.size(d));
  int64_t merged = 1;
  for (int64_t d = s; d <= e; ++d) merged *= x.size(d);
  sizes.push_back(merged);
  for (int64_t d = e + 1; d < x.dim(); ++d) sizes.push_back(x.size(d));
  return reshape(x, sizes);
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  check_defined("transpose", x);
  if (x.dim() == 0) return make_view(x, {}, {}, x.storage_offset(), "TransposeBackward", [](const TensorList& g) { return g; });
  const int64_t a = wrap_dim(dim0, x.dim(), "transpose"), b = wrap_dim(dim1, x.dim(), "transpose");
  Shape sz = x.sizes(), st = x.strides();
  std::swap(sz[static_cast<size_t>(a)], sz[static_cast<size_t>(b)]);
  std::swap(st[static_cast<size_t>(a)], st[static_cast<size_t>(b)]);
  return make_view(x, sz, st, x.storage_offset(), "TransposeBackward",
                   [a, b](const TensorList& g) { return TensorList{transpose(g[0], a, b)}; });
}

Tensor t(const Tensor& x) {
  check_defined("t", x);
  TRIDENT_CHECK(x.dim() <= 2, "t: expected a tensor of at most 2 dims, got shape ", x.sizes(), "; use transpose()");
  return x.dim() < 2 ? transpose(x, 0, 0) : transpose(x, 0, 1);
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  check_defined("permute", x);
  TRIDENT_CHECK(static_cast<int64_t>(dims.size()) == x.dim(), "permute: got ", dims.size(), " dims ", dims,
                " for a tensor of ", x.dim(), " dims");
  std::vector<int64_t> perm(dims.size()), inverse(dims.size());
  std::vector<bool> seen(dims.size(), false);
  Shape sz(dims.size()), st(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], x.dim(), "permute");
    TRIDENT_CHECK(!seen[static_cast<size_t>(d)], "permute: dim ", d, " repeated in ", dims);
    seen[static_cast<size_t>(d)] = true;
    perm[i] = d;
    inverse[static_cast<size_t>(d)] = static_cast<int64_t>(i);
    sz[i] = x.sizes()[static_cast<size_t>(d)];
    st[i] = x.strides()[static_cast<size_t>(d)];
  }
  return make_view(x, sz, st, x.storage_offset(), "PermuteBackward",
                   [inverse](const TensorList& g) { return TensorList{permute(g[0], inverse)}; });
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  check_defined("unsqueeze", x);
  const int64_t d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape sz = x.sizes(), st = x.strides();
  const int64_t new_stride = d < x.dim() ? sz[static_cast<size_t>(d)] * st[static_cast<size_t>(d)] : 1;
  sz.insert(sz.begin() + d, 1);
  st.insert(st.begin() + d, new_stride);
  return make_view(x, sz, st, x.storage_offset(), "UnsqueezeBackward",
                   [in = x.sizes()](const TensorList& g) { return TensorList{reshape(g[0], in)}; });
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  check_defined("squeeze", x);
  if (x.dim() == 0) return reshape(x, {});
  const int64_t d = wrap_dim(dim, x.dim(), "squeeze");
  Shape sz = x.sizes(), st = x.strides();
  if (sz[static_cast<size_t>(d)] == 1) {
    sz.erase(sz.begin() + d);
    st.erase(st.begin() + d);
  }
  return make_view(x, sz, st, x.storage_offset(), "SqueezeBackward",
                   [in = x.sizes()](const TensorList& g) { return TensorList{reshape(g[0], in)}; });
}

Tensor squeeze(const Tensor& x) {
  check_defined("squeeze", x);
  Shape sz, st;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (x.size(d) == 1) continue;
    sz.push_back(x.size(d));
    st.push_back(x.stride(d));
  }
  return make_view(x, sz, st, x.storage_offset(), "SqueezeBackward",
                   [in = x.sizes()](const TensorList& g) { return TensorList{reshape(g[0], in)}; });
}

Tensor expand(const Tensor& x, const Shape& sizes) {
  check_defined("expand", x);
  TRIDENT_CHECK(sizes.size() >= static_cast<size_t>(x.dim()), "expand: the target shape ", sizes,
                " has fewer dims than the tensor's shape ", x.sizes());
  const size_t lead = sizes.size() - static_cast<size_t>(x.dim());
  Shape sz(sizes.size()), st(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i < lead) {
      TRIDENT_CHECK(sizes[i] >= 0, "expand: new leading dim ", i, " cannot be ", sizes[i], " (target ", sizes, ")");
      sz[i] = sizes[i];
      st[i] = 0;
      continue;
    }
    const int64_t have = x.sizes()[i - lead];
    const int64_t want = sizes[i] == -1 ? have : sizes[i];
    TRIDENT_CHECK(have == want || have == 1, "expand: the tensor of shape ", x.sizes(), " cannot be expanded to ", sizes,
                  " (dim ", i, ": ", have, " -> ", want, "; only size-1 dims expand)");
    sz[i] = want;
    st[i] = have == want ? x.strides()[i - lead] : 0;
  }
  return make_view(x, sz, st, x.storage_offset(), "ExpandBackward",
                   [in = x.sizes()](const TensorList& g) { return TensorList{sum_to(g[0], in)}; });
}

}  // namespace trident
