#include "ops/index.h"

#include <algorithm>
#include <limits>

#include "core/copy.h"
#include "core/factory.h"
#include "ops/autocast.h"
#include "ops/common.h"
#include "ops/compare.h"
#include "ops/cpu/index.h"
#include "ops/shape.h"
#if TRIDENT_HAVE_CUDA
#include "ops/cuda/index.h"
#endif

namespace trident {

using namespace ops_detail;

namespace {

// ---- view geometry: the same function gives the forward view of x and, in backward, the
// region of a zero tensor of x's shape that the gradient is copied into ----

Tensor narrow_raw(const Tensor& t, int64_t dim, int64_t start, int64_t length, int64_t step = 1) {
  Shape sz = t.sizes(), st = t.strides();
  const auto d = static_cast<size_t>(dim);
  const int64_t offset = length > 0 ? t.storage_offset() + start * st[d] : t.storage_offset();
  sz[d] = length;
  st[d] *= step;
  return t.as_strided(sz, st, offset);
}

Tensor select_raw(const Tensor& t, int64_t dim, int64_t index) {
  Shape sz = t.sizes(), st = t.strides();
  const auto d = static_cast<size_t>(dim);
  const int64_t offset = t.storage_offset() + index * st[d];
  sz.erase(sz.begin() + dim);
  st.erase(st.begin() + dim);
  return t.as_strided(sz, st, offset);
}

Tensor zeros_for(const Shape& sizes, const Tensor& like) {
  return zeros(sizes, TensorOptions(like.dtype()).device(like.device()));
}

// Records `backward` for the view `out` of x when x requires grad (as ops/shape.cpp does).
Tensor record_view(const Tensor& x, Tensor out, const char* name, autograd::BackwardFn backward) {
  if (autograd::any_requires_grad({x})) autograd::record(name, {x}, out, std::move(backward), kDifferentiable);
  return out;
}

// NOTE [Higher-order gradients]: the adjoint of a strided view along dim d (positions start,
// start + step, ... of an input of shape `in`) as a recorded op, for a create_graph backward:
// scatter_add of g into zeros, whose own backward gathers those positions again.
Tensor scatter_into_zeros(const Tensor& g, const Shape& in, int64_t d, int64_t start, int64_t step) {
  Shape isz(g.sizes().size(), 1);
  isz[static_cast<size_t>(d)] = g.size(d);
  const Tensor pos = arange(static_cast<double>(start), static_cast<double>(start + step * g.size(d)),
                            static_cast<double>(step), TensorOptions(kI64).device(g.device()));
  const Tensor idx = expand(reshape(pos, isz), g.sizes()).contiguous();
  return scatter_add(zeros_for(in, g), d, idx, g);
}

Tensor slice_view(const Tensor& x, int64_t d, int64_t start, int64_t length, int64_t step, const char* name) {
  return record_view(x, narrow_raw(x, d, start, length, step), name,
                     [in = x.sizes(), d, start, length, step](const TensorList& g) {
                       if (recording_backward()) return TensorList{scatter_into_zeros(g[0], in, d, start, step)};
                       Tensor gx = zeros_for(in, g[0]);
                       copy_(narrow_raw(gx, d, start, length, step), g[0]);
                       return TensorList{gx};
                     });
}

int64_t wrap_index_dim(const char* op, const Tensor& x, int64_t dim) {
  TRIDENT_CHECK(x.dim() > 0, op, ": expected a tensor with at least 1 dim, got a 0-dim tensor");
  return wrap_dim(dim, x.dim(), op);
}

// A contiguous i64 copy (or alias) of an index tensor, checked to hold i64 or i32 (and to be on
// the device of `like`, when given).
Tensor index_i64(const char* op, const Tensor& index, const char* arg = "index", const Tensor& like = Tensor()) {
  check_defined(op, index, arg);
  check_device(op, index);
  if (like.defined())
    TRIDENT_CHECK(index.device() == like.device(), op, ": ", arg, " is on ", index.device(), " but the data is on ",
                  like.device(), "; move them to one device");
  TRIDENT_CHECK(index.dtype() == kI64 || index.dtype() == kI32, op, ": ", arg, " must be an i64 or i32 tensor, got ",
                index.dtype());
  return index.detach().to(kI64).contiguous();
}

std::string dim_desc(const Tensor& x, int64_t d, const char* what = "the input") {
  return detail::str("dim ", d, " of ", what, " (shape ", x.sizes(), ")");
}

}  // namespace

// ---- views ----

Tensor slice(const Tensor& x, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) {
  check_defined("slice", x);
  const int64_t d = wrap_index_dim("slice", x, dim);
  TRIDENT_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = x.size(d);
  // Python's rules: negative bounds count from the end, then both are clamped to [0, n].
  auto clamp = [n](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t{0}, n); };
  const int64_t s = start ? clamp(*start) : 0;
  const int64_t e = end ? clamp(*end) : n;
  const int64_t length = e > s ? (e - s + step - 1) / step : 0;
  return slice_view(x, d, s, length, step, "SliceBackward");
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  check_defined("narrow", x);
  const int64_t d = wrap_index_dim("narrow", x, dim);
  const int64_t n = x.size(d);
  TRIDENT_CHECK(start >= -n && start <= n, "narrow: start ", start, " is out of range for dim ", d, " of size ", n,
                " (expected ", -n, " to ", n, ")");
  const int64_t s = start < 0 ? start + n : start;
  TRIDENT_CHECK(length >= 0 && s + length <= n, "narrow: start ", s, " + length ", length, " exceeds dim ", d, " of size ",
                n, " (shape ", x.sizes(), ")");
  return slice_view(x, d, s, length, 1, "NarrowBackward");
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  check_defined("select", x);
  const int64_t d = wrap_index_dim("select", x, dim);
  const int64_t n = x.size(d);
  TRIDENT_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", d, " of size ", n,
                " (shape ", x.sizes(), "; expected ", -n, " to ", n - 1, ")");
  const int64_t i = index < 0 ? index + n : index;
  return record_view(x, select_raw(x, d, i), "SelectBackward", [in = x.sizes(), d, i](const TensorList& g) {
    if (recording_backward()) return TensorList{scatter_into_zeros(unsqueeze(g[0], d), in, d, i, 1)};
    Tensor gx = zeros_for(in, g[0]);
    copy_(select_raw(gx, d, i), g[0]);
    return TensorList{gx};
  });
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  check_defined("split", x);
  const int64_t d = wrap_index_dim("split", x, dim);
  int64_t total = 0;
  for (int64_t s : sizes) {
    TRIDENT_CHECK(s >= 0, "split: split sizes must be non-negative, got ", sizes);
    total += s;
  }
  TRIDENT_CHECK(total == x.size(d), "split: split sizes ", sizes, " sum to ", total, " but dim ", d, " of the input (shape ",
                x.sizes(), ") has size ", x.size(d));
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow_raw(x, d, start, s));
    start += s;
  }
  // One node for all pieces: its backward joins their gradients (zeros for unused pieces) with
  // a single cat instead of one full-size zero tensor per piece.
  if (autograd::any_requires_grad({x}))
    autograd::record("SplitBackward", {x}, out, [d](const TensorList& g) { return TensorList{cat(g, d)}; }, kDifferentiable);
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  check_defined("split", x);
  const int64_t d = wrap_index_dim("split", x, dim);
  const int64_t n = x.size(d);
  TRIDENT_CHECK(split_size > 0 || (split_size == 0 && n == 0), "split: split_size must be positive, got ", split_size,
                " for dim ", d, " of size ", n);
  std::vector<int64_t> sizes;
  if (n == 0) sizes.push_back(0);
  for (int64_t s = 0; s < n; s += split_size) sizes.push_back(std::min(split_size, n - s));
  return split(x, sizes, d);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  check_defined("chunk", x);
  TRIDENT_CHECK(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  const int64_t d = wrap_index_dim("chunk", x, dim);
  const int64_t n = x.size(d);
  if (n == 0) return split(x, std::vector<int64_t>(static_cast<size_t>(chunks), 0), d);
  return split(x, (n + chunks - 1) / chunks, d);
}

// ---- joining and padding ----

Tensor cat(const std::vector<Tensor>& tensors_in, int64_t dim) {
  const std::vector<Tensor> tensors = autocast::promote(tensors_in);  // NOTE [Autocast]
  TRIDENT_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i)
    TRIDENT_CHECK(tensors[i].defined(), "cat: tensor ", i, " is undefined");
  // PyTorch's legacy rule: 1-D tensors of shape [0] are skipped, whatever the others' shapes.
  auto skipped = [](const Tensor& t) { return t.dim() == 1 && t.size(0) == 0; };
  size_t ref = 0;
  while (ref < tensors.size() && skipped(tensors[ref])) ++ref;
  const Tensor& first = tensors[ref == tensors.size() ? 0 : ref];
  const int64_t d = ref == tensors.size() ? 0 : wrap_index_dim("cat", first, dim);
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    TRIDENT_CHECK(t.dtype() == first.dtype(), "cat: expected all tensors to have one dtype, but tensor ", i, " is ",
                  t.dtype(), " (shape ", t.sizes(), ") and tensor ", ref, " is ", first.dtype(), " (shape ", first.sizes(),
                  ")");
    TRIDENT_CHECK(t.device() == first.device(), "cat: tensor ", i, " is on ", t.device(), " but tensor ", ref, " is on ",
                  first.device());
    if (skipped(t) && ref != tensors.size()) continue;
    TRIDENT_CHECK(t.dim() == first.dim(), "cat: tensor ", i, " has ", t.dim(), " dims (shape ", t.sizes(), ") but tensor ",
                  ref, " has ", first.dim(), " (shape ", first.sizes(), ")");
    for (int64_t k = 0; k < t.dim(); ++k)
      TRIDENT_CHECK(k == d || t.size(k) == first.size(k), "cat: sizes must match except in dim ", d, ", but tensor ", i,
                    " has shape ", t.sizes(), " and tensor ", ref, " has shape ", first.sizes(), " (they differ in dim ", k,
                    ")");
    total += t.size(d);
  }
  Shape osz = first.sizes();
  if (ref != tensors.size()) osz[static_cast<size_t>(d)] = total;
  Tensor out = empty(osz, TensorOptions(first.dtype()).device(first.device()));
  std::vector<int64_t> starts(tensors.size(), -1);  // -1: skipped
  int64_t start = 0;
  for (size_t i = 0; i < tensors.size() && ref != tensors.size(); ++i) {
    if (skipped(tensors[i])) continue;
    starts[i] = start;
    copy_(narrow_raw(out, d, start, tensors[i].size(d)), tensors[i].detach());
    start += tensors[i].size(d);
  }
  if (autograd::any_requires_grad(tensors)) {
    std::vector<Shape> shapes;
    for (const Tensor& t : tensors) shapes.push_back(t.sizes());
    autograd::record("CatBackward", tensors, out, [d, starts, shapes](const TensorList& g) {
      TensorList r;
      const bool rec = recording_backward();
      for (size_t i = 0; i < shapes.size(); ++i) {
        const int64_t len = shapes[i][static_cast<size_t>(d)];
        r.push_back(starts[i] < 0 ? zeros_for(shapes[i], g[0])
                                  : rec ? narrow(g[0], d, starts[i], len) : narrow_raw(g[0], d, starts[i], len));
      }
      return r;
    }, kDifferentiable);
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors_in, int64_t dim) {
  const std::vector<Tensor> tensors = autocast::promote(tensors_in);  // NOTE [Autocast]
  TRIDENT_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) TRIDENT_CHECK(tensors[i].defined(), "stack: tensor ", i, " is undefined");
  const Tensor& first = tensors[0];
  for (size_t i = 1; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    TRIDENT_CHECK(t.sizes() == first.sizes(), "stack: expected all tensors to have one shape, but tensor ", i,
                  " has shape ", t.sizes(), " and tensor 0 has shape ", first.sizes());
    TRIDENT_CHECK(t.dtype() == first.dtype(), "stack: expected all tensors to have one dtype, but tensor ", i, " is ",
                  t.dtype(), " and tensor 0 is ", first.dtype());
    TRIDENT_CHECK(t.device() == first.device(), "stack: tensor ", i, " is on ", t.device(), " but tensor 0 is on ",
                  first.device());
  }
  const int64_t d = wrap_dim(dim, first.dim() + 1, "stack");
  Shape osz = first.sizes();
  osz.insert(osz.begin() + d, static_cast<int64_t>(tensors.size()));
  Tensor out = empty(osz, TensorOptions(first.dtype()).device(first.device()));
  for (size_t i = 0; i < tensors.size(); ++i) copy_(select_raw(out, d, static_cast<int64_t>(i)), tensors[i].detach());
  if (autograd::any_requires_grad(tensors)) {
    autograd::record("StackBackward", tensors, out, [d, count = tensors.size()](const TensorList& g) {
      TensorList r;
      const bool rec = recording_backward();
      for (size_t i = 0; i < count; ++i) {
        const auto k = static_cast<int64_t>(i);
        r.push_back(rec ? select(g[0], d, k) : select_raw(g[0], d, k));
      }
      return r;
    }, kDifferentiable);
  }
  return out;
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value) {
  check_defined("pad", x);
  TRIDENT_CHECK(pads.size() % 2 == 0, "pad: pads must have an even length ({left, right} per dim, last dim first), got ",
                pads);
  TRIDENT_CHECK(static_cast<int64_t>(pads.size() / 2) <= x.dim(), "pad: ", pads.size(), " pads ", pads, " address ",
                pads.size() / 2, " dims but the input (shape ", x.sizes(), ") has ", x.dim());
  Shape osz = x.sizes();
  Tensor src = x.detach();
  Shape dst_start(osz.size(), 0);
  for (size_t j = 0; j < pads.size() / 2; ++j) {
    const size_t d = osz.size() - 1 - j;
    const int64_t left = pads[2 * j], right = pads[2 * j + 1];
    const int64_t size = x.sizes()[d] + left + right;
    TRIDENT_CHECK(size >= 0, "pad: pads (", left, ", ", right, ") on dim ", d, " of size ", x.sizes()[d],
                  " give a negative size ", size, " (input shape ", x.sizes(), ", pads ", pads, ")");
    osz[d] = size;
    // The part of x that survives cropping, and where it lands in the output.
    const int64_t crop_l = std::max<int64_t>(0, -left), crop_r = std::max<int64_t>(0, -right);
    const int64_t keep = std::max<int64_t>(0, x.sizes()[d] - crop_l - crop_r);
    src = narrow_raw(src, static_cast<int64_t>(d), crop_l, keep);
    dst_start[d] = std::max<int64_t>(0, left);
  }
  Tensor out = full(osz, value, TensorOptions(x.dtype()).device(x.device()));
  if (src.numel() > 0) {
    Tensor dst = out;
    for (size_t d = 0; d < osz.size(); ++d)
      dst = narrow_raw(dst, static_cast<int64_t>(d), dst_start[d], src.sizes()[d]);
    copy_(dst, src);
  }
  if (autograd::any_requires_grad({x})) {
    // The adjoint of padding by (l, r) is padding by (-l, -r): crop what was added, restore
    // with zeros what was cropped.
    autograd::record("PadBackward", {x}, out, [pads](const TensorList& g) {
      std::vector<int64_t> neg(pads.size());
      for (size_t i = 0; i < pads.size(); ++i) neg[i] = -pads[i];
      return TensorList{pad(g[0], neg, 0.0)};
    }, kDifferentiable);
  }
  return out;
}

// ---- indexing ----

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  check_defined("index_select", x);
  check_device("index_select", x);
  const int64_t d = wrap_index_dim("index_select", x, dim);
  Tensor idx = index_i64("index_select", index, "index", x);
  TRIDENT_CHECK(idx.dim() <= 1, "index_select: index must be 1-D (or 0-D), got shape ", idx.sizes());
  idx = idx.as_strided({idx.numel()}, {1}, idx.storage_offset());
  TRIDENT_KERNEL(check_index_range)("index_select", idx, x.size(d), dim_desc(x, d));
  Tensor out = TRIDENT_KERNEL(index_select)(x.detach(), d, idx);
  if (autograd::any_requires_grad({x})) {
    autograd::record("IndexSelectBackward", {x}, out, [si = SavedTensor(idx), in = x.sizes(), d](const TensorList& g) {
      if (recording_backward()) {  // the adjoint as a recorded scatter_add (NOTE [Higher-order gradients])
        Shape isz(g[0].sizes().size(), 1);
        isz[static_cast<size_t>(d)] = g[0].size(d);
        const Tensor idx_full = expand(reshape(si.unpack(), isz), g[0].sizes()).contiguous();
        return TensorList{scatter_add(zeros_for(in, g[0]), d, idx_full, g[0])};
      }
      Tensor gx = zeros_for(in, g[0]);
      TRIDENT_KERNEL(index_add_)(gx, d, si.unpack(), g[0].contiguous(), -1);
      return TensorList{gx};
    }, kDifferentiable);
  }
  return out;
}

namespace {
void check_gather_shapes(const char* op, const Tensor& x, int64_t d, const Tensor& index, const Tensor* src) {
  TRIDENT_CHECK(index.dim() == x.dim(), op, ": index (shape ", index.sizes(), ") must have as many dims as the input (shape ",
                x.sizes(), ")");
  if (src) {
    TRIDENT_CHECK(src->dim() == x.dim(), op, ": src (shape ", src->sizes(), ") must have as many dims as the input (shape ",
                  x.sizes(), ")");
  }
  for (int64_t k = 0; k < x.dim(); ++k) {
    TRIDENT_CHECK(k == d || index.size(k) <= x.size(k), op, ": index (shape ", index.sizes(), ") is larger than the input (shape ",
                  x.sizes(), ") in dim ", k, " (only dim ", d, " may differ)");
    if (src)
      TRIDENT_CHECK(index.size(k) <= src->size(k), op, ": index (shape ", index.sizes(), ") is larger than src (shape ",
                    src->sizes(), ") in dim ", k);
  }
}
}  // namespace

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  check_defined("gather", x);
  check_device("gather", x);
  Tensor idx = index_i64("gather", index, "index", x);
  if (x.dim() == 0) {  // a scalar gathers like a 1-element vector
    TRIDENT_CHECK(idx.dim() <= 1, "gather: index (shape ", idx.sizes(), ") must have as many dims as the input (0-dim)");
    return reshape(gather(reshape(x, {1}), dim, reshape(idx, {idx.numel()})), idx.sizes());
  }
  const int64_t d = wrap_dim(dim, x.dim(), "gather");
  check_gather_shapes("gather", x, d, idx, nullptr);
  bool in_range = true;
  Tensor out = TRIDENT_KERNEL(gather)(x.detach(), d, idx, &in_range);
  if (!in_range) TRIDENT_KERNEL(check_index_range)("gather", idx, x.size(d), dim_desc(x, d));  // throws
  if (autograd::any_requires_grad({x})) {
    autograd::record("GatherBackward", {x}, out, [si = SavedTensor(idx), in = x.sizes(), d](const TensorList& g) {
      return TensorList{scatter_add(zeros_for(in, g[0]), d, si.unpack(), g[0])};
    }, kDifferentiable);
  }
  return out;
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  check_defined("scatter_add", x);
  check_defined("scatter_add", src, "src");
  check_device("scatter_add", x);
  check_same_dtype("scatter_add", x, src);
  check_same_device("scatter_add", x, src);
  TRIDENT_CHECK(x.dtype() != DType::Bool, "scatter_add: not defined for bool tensors");
  Tensor idx = index_i64("scatter_add", index, "index", x);
  if (x.dim() == 0) {
    TRIDENT_CHECK(idx.dim() <= 1 && src.dim() <= 1, "scatter_add: index (shape ", idx.sizes(), ") and src (shape ",
                  src.sizes(), ") must have as many dims as the input (0-dim)");
    return reshape(scatter_add(reshape(x, {1}), dim, reshape(idx, {idx.numel()}), reshape(src, {src.numel()})), {});
  }
  const int64_t d = wrap_dim(dim, x.dim(), "scatter_add");
  check_gather_shapes("scatter_add", x, d, idx, &src);
  Tensor out = empty(x.sizes(), TensorOptions(x.dtype()).device(x.device()));
  copy_(out, x.detach());
  if (!TRIDENT_KERNEL(scatter_add_)(out, d, idx, src.detach()))
    TRIDENT_KERNEL(check_index_range)("scatter_add", idx, x.size(d), dim_desc(x, d));  // throws
  if (autograd::any_requires_grad({x, src})) {
    autograd::record("ScatterAddBackward", {x, src}, out,
                     [si = SavedTensor(idx), zs = src.sizes(), d, gx = x.requires_grad(),
                      gs = src.requires_grad()](const TensorList& g) {
                       TensorList r(2);
                       if (gx) r[0] = g[0];
                       if (gs) {
                         const Tensor i = si.unpack();
                         Tensor part = gather(g[0], d, i);
                         if (part.sizes() == zs) {
                           r[1] = part;
                         } else {  // src positions index does not reach get no gradient: pad with zeros
                           std::vector<int64_t> pads;
                           for (int64_t k = i.dim(); k-- > 0;) pads.insert(pads.end(), {0, zs[static_cast<size_t>(k)] - i.size(k)});
                           r[1] = pad(part, pads, 0.0);
                         }
                       }
                       return r;
                     }, kDifferentiable);
  }
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx) {
  check_defined("embedding", weight, "weight");
  check_device("embedding", weight);
  TRIDENT_CHECK(weight.dim() == 2, "embedding: weight must be 2-D [num_embeddings, embedding_dim], got shape ",
                weight.sizes());
  const int64_t rows = weight.size(0), width = weight.size(1);
  int64_t pad_row = -1;
  if (padding_idx) {
    TRIDENT_CHECK(*padding_idx >= -rows && *padding_idx < rows, "embedding: padding_idx ", *padding_idx,
                  " is out of range for a weight of ", rows, " rows (expected ", -rows, " to ", rows - 1, ")");
    pad_row = *padding_idx < 0 ? *padding_idx + rows : *padding_idx;
  }
  const Tensor idx = index_i64("embedding", indices, "indices", weight);
  TRIDENT_KERNEL(check_index_range)("embedding", idx, rows, detail::str("a weight of ", rows, " rows"));
  const Tensor flat = idx.as_strided({idx.numel()}, {1}, idx.storage_offset());
  Shape osz = idx.sizes();
  osz.push_back(width);
  const Tensor rows_out = TRIDENT_KERNEL(index_select)(weight.detach(), 0, flat);
  Tensor out = rows_out.as_strided(osz, contiguous_strides(osz), 0);
  if (autograd::any_requires_grad({weight})) {
    autograd::record("EmbeddingBackward", {weight}, out,
                     [si = SavedTensor(flat), rows, width, pad_row](const TensorList& g) {
                       const Tensor i = si.unpack();
                       if (recording_backward()) {  // a recorded scatter_add (NOTE [Higher-order gradients])
                         Tensor g2 = reshape(g[0], {i.numel(), width});
                         if (pad_row >= 0) g2 = masked_fill(g2, unsqueeze(eq(i, static_cast<double>(pad_row)), 1), 0.0);
                         const Tensor idx_full = expand(unsqueeze(i, 1), {i.numel(), width}).contiguous();
                         return TensorList{scatter_add(zeros_for({rows, width}, g[0]), 0, idx_full, g2)};
                       }
                       Tensor gw = zeros_for({rows, width}, g[0]);
                       const Tensor gc = g[0].contiguous();
                       // Deterministic on every device (NOTE [Deterministic index_add_]): the
                       // gradient of a weight row is the same bits from run to run.
                       TRIDENT_KERNEL(index_add_)(gw, 0, i, gc.as_strided({i.numel(), width}, {width, 1}, gc.storage_offset()),
                                                  pad_row);
                       return TensorList{gw};
                     }, kDifferentiable);
  }
  return out;
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  const Tensor idx = index_i64("one_hot", indices, "indices");
  TRIDENT_CHECK(num_classes >= -1, "one_hot: num_classes must be -1 (infer) or >= 0, got ", num_classes);
  if (num_classes == -1) {
    TRIDENT_CHECK(idx.numel() > 0, "one_hot: cannot infer num_classes from empty indices (shape ", idx.sizes(),
                  "); pass num_classes");
    num_classes = std::max<int64_t>(TRIDENT_KERNEL(max_index)(idx) + 1, 0);  // on a GPU: a synchronization
  }
  TRIDENT_KERNEL(check_index_range)("one_hot", idx, num_classes, detail::str("num_classes ", num_classes));
  return TRIDENT_KERNEL(one_hot)(idx, num_classes);
}

}  // namespace trident
