#include "ops/cpu/index.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/factory.h"
#include "core/parallel.h"
#include "core/strided.h"

namespace trident::cpu {

namespace {

constexpr int64_t kGrain = 32768;  // elements per thread, at least

// Moving data needs only the element size: one instantiation per size, not per dtype.
template <typename F>
void dispatch_by_size(size_t bytes, const F& f) {
  switch (bytes) {
    case 1: f(std::type_identity<uint8_t>{}); return;
    case 2: f(std::type_identity<uint16_t>{}); return;
    case 4: f(std::type_identity<uint32_t>{}); return;
    case 8: f(std::type_identity<uint64_t>{}); return;
    default: TRIDENT_ASSERT(false, "no element type of ", bytes, " bytes");
  }
}

// The element offset of row-major position `flat` in a tensor of `sizes` read with `strides`.
int64_t strided_offset(int64_t flat, const int64_t* sizes, const int64_t* strides, size_t ndim) {
  int64_t off = 0;
  for (size_t d = ndim; d-- > 0;) {
    off += (flat % sizes[d]) * strides[d];
    flat /= sizes[d];
  }
  return off;
}

// The offsets, under `strides`, of every position of the sizes [first, last) of `sizes`
// (row-major): the table that turns a flat outer or inner index into a memory offset.
std::vector<int64_t> offset_table(const Shape& sizes, const Shape& strides, size_t first, size_t last) {
  int64_t count = 1;
  for (size_t d = first; d < last; ++d) count *= sizes[d];
  std::vector<int64_t> t(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    t[static_cast<size_t>(i)] = strided_offset(i, sizes.data() + first, strides.data() + first, last - first);
  return t;
}

int64_t prod(const Shape& s, size_t first, size_t last) {
  int64_t n = 1;
  for (size_t d = first; d < last; ++d) n *= s[d];
  return n;
}

// Positions i of idx[0, n) (skipping entries equal to skip) ordered by destination idx[i], and
// by i within one destination, so each destination's entries are adjacent and summed in a fixed
// order. A counting sort when the destination range is not much larger than n, else a sort.
std::vector<int64_t> sorted_by_destination(const int64_t* idx, int64_t n, int64_t limit, int64_t skip) {
  std::vector<int64_t> order;
  if (limit <= 2 * n + 65536) {
    std::vector<int64_t> start(static_cast<size_t>(limit + 1), 0);
    for (int64_t i = 0; i < n; ++i)
      if (idx[i] != skip) ++start[static_cast<size_t>(idx[i] + 1)];
    for (int64_t r = 0; r < limit; ++r) start[static_cast<size_t>(r + 1)] += start[static_cast<size_t>(r)];
    order.resize(static_cast<size_t>(start[static_cast<size_t>(limit)]));
    for (int64_t i = 0; i < n; ++i)
      if (idx[i] != skip) order[static_cast<size_t>(start[static_cast<size_t>(idx[i])]++)] = i;
  } else {
    order.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      if (idx[i] != skip) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [idx](int64_t a, int64_t b) { return idx[a] < idx[b]; });
  }
  return order;
}

}  // namespace

void check_index_range(const char* op, const Tensor& index, int64_t limit, const std::string& range_of) {
  const int64_t n = index.numel();
  const int64_t* p = index.data<int64_t>();
  std::atomic<int64_t> first{n};
  parallel_for(0, n, 65536, [&](int64_t b, int64_t e) {
    // A branch-free pass first (the unsigned compare also catches negatives); search only on a hit.
    bool bad = false;
    for (int64_t i = b; i < e; ++i) bad |= static_cast<uint64_t>(p[i]) >= static_cast<uint64_t>(limit);
    if (!bad) return;
    int64_t i = b;
    while (static_cast<uint64_t>(p[i]) < static_cast<uint64_t>(limit)) ++i;
    int64_t cur = first.load();
    while (i < cur && !first.compare_exchange_weak(cur, i)) {
    }
  });
  const int64_t i = first.load();
  if (i == n) return;
  Shape pos(index.sizes().size());
  int64_t rem = i;
  for (size_t d = pos.size(); d-- > 0;) {
    pos[d] = rem % index.sizes()[d];
    rem /= index.sizes()[d];
  }
  if (limit == 0)
    TRIDENT_FAIL(op, ": index ", p[i], " at position ", pos, " of the index tensor (shape ", index.sizes(),
                 ") is out of range for ", range_of, ", which has no valid index");
  TRIDENT_FAIL(op, ": index ", p[i], " at position ", pos, " of the index tensor (shape ", index.sizes(),
               ") is out of range for ", range_of, ": valid indices are 0 to ", limit - 1);
}

int64_t max_index(const Tensor& index) {
  const int64_t* p = index.data<int64_t>();
  int64_t m = p[0];
  for (int64_t i = 1; i < index.numel(); ++i) m = std::max(m, p[i]);
  return m;
}

// ---- index_select and its backward ----

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  Shape osz = x.sizes();
  const auto d = static_cast<size_t>(dim);
  const int64_t n = index.numel();
  osz[d] = n;
  Tensor out = empty(osz, x.dtype());
  if (out.numel() == 0) return out;
  const int64_t* idx = index.data<int64_t>();
  const Shape& xs = x.sizes();
  const Shape& xst = x.strides();
  const int64_t inner = prod(xs, d + 1, xs.size());
  const Shape inner_sizes(xs.begin() + dim + 1, xs.end()), inner_strides(xst.begin() + dim + 1, xst.end());
  const StridedLoop<2> loop(inner_sizes, {contiguous_strides(inner_sizes), inner_strides});
  const bool contiguous_rows = loop.ndim == 0 || (loop.ndim == 1 && loop.strides[1][0] == 1);
  const int64_t xstride = xst[d];
  dispatch_by_size(x.element_size(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    parallel_for(0, out.numel() / inner, std::max<int64_t>(1, kGrain / inner), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t o = r / n, i = r % n;
        const T* src = xp + strided_offset(o, xs.data(), xst.data(), d) + idx[i] * xstride;
        T* dst = op + r * inner;
        if (contiguous_rows) {
          std::memcpy(dst, src, static_cast<size_t>(inner) * sizeof(T));
        } else {
          loop.for_each_run(0, inner, [&](const std::array<int64_t, 2>& off, int64_t len, const std::array<int64_t, 2>& st) {
            for (int64_t k = 0; k < len; ++k) dst[off[0] + k * st[0]] = src[off[1] + k * st[1]];
          });
        }
      }
    });
  });
  return out;
}

void index_add_(const Tensor& dest, int64_t dim, const Tensor& index, const Tensor& src, int64_t skip) {
  TRIDENT_ASSERT(dest.is_contiguous() && src.is_contiguous(), "index_add_ needs contiguous dest and src");
  const auto d = static_cast<size_t>(dim);
  const int64_t rows = dest.size(dim), n = index.numel();
  const int64_t outer = prod(dest.sizes(), 0, d), inner = prod(dest.sizes(), d + 1, dest.sizes().size());
  if (n == 0 || outer == 0 || inner == 0) return;
  const int64_t* idx = index.data<int64_t>();
  // Entries sorted by destination row; a task is a run of whole destination rows (within one
  // outer slice), so no two threads ever write one row and no atomics are needed.
  const std::vector<int64_t> order = sorted_by_destination(idx, n, rows, skip);
  const auto m = static_cast<int64_t>(order.size());
  if (m == 0) return;
  TRIDENT_DISPATCH_FLOATING(dest.dtype(), "index_add_", [&] {
    using T = scalar_t;
    using C = compute_t<T>;
    // Each destination row is summed in acc_t (f64 for f32): a frequent token's gradient adds up
    // thousands of rows; the loop is bound by reading them, so the wider sum is free.
    using A = acc_t<T>;
    T* dp = dest.data<T>();
    const T* sp = src.data<T>();
    const auto key = [&](int64_t t) { return std::pair<int64_t, int64_t>{t / m, idx[order[static_cast<size_t>(t % m)]]}; };
    parallel_for(0, outer * m, std::max<int64_t>(1, kGrain / inner), [&](int64_t b, int64_t e) {
      // Align the chunk to whole destination rows: a row belongs to the chunk where it starts.
      const int64_t total = outer * m;
      while (b > 0 && b < total && key(b) == key(b - 1)) ++b;
      while (e < total && key(e) == key(e - 1)) ++e;
      std::vector<A> acc(static_cast<size_t>(inner));
      for (int64_t t = b; t < e;) {
        const auto [o, r] = key(t);
        T* drow = dp + (o * rows + r) * inner;
        for (int64_t k = 0; k < inner; ++k) acc[static_cast<size_t>(k)] = static_cast<A>(static_cast<C>(drow[k]));
        for (; t < e && key(t) == std::pair<int64_t, int64_t>{o, r}; ++t) {
          const T* srow = sp + (o * n + order[static_cast<size_t>(t % m)]) * inner;
          for (int64_t k = 0; k < inner; ++k) acc[static_cast<size_t>(k)] += static_cast<A>(static_cast<C>(srow[k]));
        }
        for (int64_t k = 0; k < inner; ++k) drow[k] = static_cast<T>(acc[static_cast<size_t>(k)]);
      }
    });
  });
  dest.bump_version();
}

// ---- gather and scatter_add ----

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, bool* in_range) {
  *in_range = true;
  Tensor out = empty(index.sizes(), x.dtype());
  if (out.numel() == 0) return out;
  const auto limit = static_cast<uint64_t>(x.size(dim));
  std::atomic<bool> bad{false};
  const Shape& is = index.sizes();
  const auto d = static_cast<size_t>(dim);
  const int64_t n = is[d], inner = prod(is, d + 1, is.size());
  const std::vector<int64_t> xo = offset_table(is, x.strides(), 0, d);
  const std::vector<int64_t> xi = offset_table(is, x.strides(), d + 1, is.size());
  const int64_t xstride = x.stride(dim);
  const int64_t* idx = index.data<int64_t>();
  dispatch_by_size(x.element_size(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    // Rows r = (o, j) of inner elements; a chunk walks the rows of one outer slice at a time.
    parallel_for(0, out.numel() / inner, std::max<int64_t>(1, kGrain / inner), [&](int64_t b, int64_t e) {
      // Indices are checked as they are read (no separate pass over a large index tensor): an
      // entry out of range reads element 0 instead and is reported after the loop.
      bool miss = false;
      for (int64_t r = b; r < e;) {
        const int64_t o = r / n, j0 = r % n, j1 = std::min(n, j0 + (e - r));
        const T* xb = xp + xo[static_cast<size_t>(o)];
        if (inner == 1) {  // gathering along the last dim: one element per row
          const int64_t* ir = idx + o * n;
          T* orow = op + o * n;
          const T* xb0 = xb + xi[0];
          for (int64_t j = j0; j < j1; ++j) {
            const bool ok = static_cast<uint64_t>(ir[j]) < limit;
            miss |= !ok;
            orow[j] = xb0[(ok ? ir[j] : 0) * xstride];
          }
        } else {
          for (int64_t j = j0; j < j1; ++j) {
            const int64_t* ir = idx + (o * n + j) * inner;
            T* orow = op + (o * n + j) * inner;
            for (int64_t k = 0; k < inner; ++k) {
              const bool ok = static_cast<uint64_t>(ir[k]) < limit;
              miss |= !ok;
              orow[k] = xb[(ok ? ir[k] : 0) * xstride + xi[static_cast<size_t>(k)]];
            }
          }
        }
        r += j1 - j0;
      }
      if (miss) bad.store(true);
    });
  });
  *in_range = !bad.load();
  return out;
}

bool scatter_add_(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  const Shape& is = index.sizes();
  if (index.numel() == 0) return true;
  const auto limit = static_cast<uint64_t>(out.size(dim));
  std::atomic<bool> bad{false};
  const auto d = static_cast<size_t>(dim);
  const int64_t outer = prod(is, 0, d), n = is[d], inner = prod(is, d + 1, is.size());
  const std::vector<int64_t> oo = offset_table(is, out.strides(), 0, d), oi = offset_table(is, out.strides(), d + 1, is.size());
  const std::vector<int64_t> so = offset_table(is, src.strides(), 0, d), si = offset_table(is, src.strides(), d + 1, is.size());
  const int64_t ostride = out.stride(dim), sstride = src.stride(dim);
  const int64_t* idx = index.data<int64_t>();
  // Positions that differ outside dim never share a destination: a task owns one outer slice and
  // a range of inner positions, and walks dim serially (deterministic, no atomics).
  // Inner chunks of at most 4096, and enough of them to give every thread work.
  const int64_t want = std::max<int64_t>(1, (get_num_threads() + outer - 1) / std::max<int64_t>(outer, 1));
  const int64_t cs = std::clamp<int64_t>((inner + want - 1) / want, std::min<int64_t>(inner, 16), 4096);
  const int64_t nck = (inner + cs - 1) / cs;
  TRIDENT_DISPATCH_NUMERIC(out.dtype(), "scatter_add", [&] {
    using T = scalar_t;
    using C = compute_t<T>;
    T* op = out.data<T>();
    const T* sp = src.data<T>();
    parallel_for(0, outer * nck, std::max<int64_t>(1, kGrain / (n * cs)), [&](int64_t b, int64_t e) {
      // Indices are checked as they are read; an entry out of range is skipped and reported.
      bool miss = false;
      for (int64_t t = b; t < e; ++t) {
        const int64_t o = t / nck, kb = (t % nck) * cs, ke = std::min(inner, kb + cs);
        T* ob = op + oo[static_cast<size_t>(o)];
        if (inner == 1) {  // scattering along the last dim: one element per step of j
          const int64_t* ir = idx + o * n;
          T* ob0 = ob + oi[0];
          const T* sb0 = sp + so[static_cast<size_t>(o)] + si[0];
          for (int64_t j = 0; j < n; ++j) {
            if (static_cast<uint64_t>(ir[j]) >= limit) [[unlikely]] {
              miss = true;
              continue;
            }
            T& dst = ob0[ir[j] * ostride];
            dst = static_cast<T>(static_cast<C>(dst) + static_cast<C>(sb0[j * sstride]));
          }
          continue;
        }
        for (int64_t j = 0; j < n; ++j) {
          const int64_t* ir = idx + (o * n + j) * inner;
          const T* sb = sp + so[static_cast<size_t>(o)] + j * sstride;
          for (int64_t k = kb; k < ke; ++k) {
            if (static_cast<uint64_t>(ir[k]) >= limit) [[unlikely]] {
              miss = true;
              continue;
            }
            T& dst = ob[ir[k] * ostride + oi[static_cast<size_t>(k)]];
            dst = static_cast<T>(static_cast<C>(dst) + static_cast<C>(sb[si[static_cast<size_t>(k)]]));
          }
        }
      }
      if (miss) bad.store(true);
    });
  });
  out.bump_version();
  return !bad.load();
}

// ---- one_hot ----

Tensor one_hot(const Tensor& index, int64_t num_classes) {
  Shape s = index.sizes();
  s.push_back(num_classes);
  Tensor out = zeros(s, kI64);
  int64_t* op = out.data<int64_t>();
  const int64_t* idx = index.data<int64_t>();
  parallel_for(0, index.numel(), 65536, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) op[p * num_classes + idx[p]] = 1;
  });
  return out;
}

}  // namespace trident::cpu
