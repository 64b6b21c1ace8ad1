// The loop under every CPU reduction. The input is split into kept dims (one output element
// each) and reduced dims. Two strategies:
//  - inner: each output element walks its reduced elements (the reduced dims are innermost,
//    e.g. a row sum); parallel over outputs;
//  - outer: the innermost kept dim is contiguous and the reduced dims lie outside it (e.g. a
//    column sum, a bias gradient); a block of adjacent outputs is accumulated together, row by
//    row, so memory is read sequentially and the loop vectorizes.
// When there are fewer outputs (or blocks) than threads, as in a full reduction, a reducer that
// can merge partial results also splits the reduced range across threads and merges the parts
// in order; the same merge lets the inner strategy keep kLanes independent accumulators on a
// contiguous run, so the loop is not one serial chain of dependent additions.
#pragma once

#include <algorithm>
#include <array>
#include <vector>

#include "core/factory.h"
#include "core/strided.h"

namespace trident::cpu {

struct ReduceGeometry {
  Shape kept_sizes, kept_strides, red_sizes, red_strides;
  int64_t nout = 1, nred = 1;

  ReduceGeometry(const Tensor& x, const std::vector<int64_t>& dims) {
    std::vector<bool> is_red(static_cast<size_t>(x.dim()), false);
    for (int64_t d : dims) is_red[static_cast<size_t>(d)] = true;
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (is_red[static_cast<size_t>(d)]) {
        red_sizes.push_back(x.size(d));
        red_strides.push_back(x.stride(d));
        nred *= x.size(d);
      } else {
        kept_sizes.push_back(x.size(d));
        kept_strides.push_back(x.stride(d));
        nout *= x.size(d);
      }
    }
  }
};

inline int64_t offset_of(int64_t flat, const Shape& sizes, const Shape& strides, size_t ndim) {
  int64_t off = 0;
  for (size_t d = ndim; d-- > 0;) {
    off += (flat % sizes[d]) * strides[d];
    flat /= sizes[d];
  }
  return off;
}

// A reducer R over elements of type In (read as C = compute_t<In>) provides:
//   using Acc = ...;                       the accumulator (default-constructible)
//   Acc init() const;                      the identity
//   Acc combine(Acc a, C v, int64_t o, int64_t k) const;
//                                          folds in element v of output o; k is v's flat index
//                                          among the output's reduced elements (row-major over
//                                          the reduced dims), for arg-reductions
//   void finish(int64_t o, Acc a) const;   writes output o (outputs are numbered row-major over
//                                          the kept dims)
// and optionally
//   Acc merge(Acc a, Acc b) const;         combines two partial results (a, b over disjoint
//                                          elements); enables lanes, row unrolling and split
//                                          ranges
//   Acc fold_run(Acc a, const In* p, int64_t n, int64_t o, int64_t k0) const;
//                                          folds the unit-stride run p[0, n) (flat indices k0..)
//                                          its own way (e.g. arg-reductions: find the extreme
//                                          with a vectorized pass, then its first position).
template <typename R>
concept MergeableReducer = requires(const R& r, typename R::Acc a) { r.merge(a, a); };
template <typename R, typename In>
concept RunReducer = requires(const R& r, typename R::Acc a, const In* p) { r.fold_run(a, p, int64_t{}, int64_t{}, int64_t{}); };

namespace reduce_detail {

inline constexpr int kLanes = 8;
inline constexpr int64_t kBlock = 256;     // outputs per block in the outer strategy
inline constexpr int64_t kGrain = 32768;   // elements per thread, at least

// Folds the reduced elements [kb, ke) of output o, whose first reduced element is at base.
template <typename In, typename R>
typename R::Acc fold_range(const R& r, const In* base, const StridedLoop<1>& red, int64_t o, int64_t kb, int64_t ke,
                           typename R::Acc acc) {
  using C = compute_t<In>;
  using Acc = typename R::Acc;
  int64_t k0 = kb;
  red.for_each_run(kb, ke, [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
    const In* p = base + off[0];
    const int64_t s = st[0];
    if constexpr (RunReducer<R, In>) {
      if (s == 1) {
        acc = r.fold_run(acc, p, n, o, k0);
        k0 += n;
        return;
      }
    }
    if constexpr (MergeableReducer<R>) {
      if (s == 1 && n >= 2 * kLanes) {
        Acc lanes[kLanes];
        for (int j = 0; j < kLanes; ++j) lanes[j] = r.init();
        int64_t i = 0;
        for (; i + kLanes <= n; i += kLanes)
          for (int j = 0; j < kLanes; ++j) lanes[j] = r.combine(lanes[j], static_cast<C>(p[i + j]), o, k0 + i + j);
        for (; i < n; ++i) lanes[0] = r.combine(lanes[0], static_cast<C>(p[i]), o, k0 + i);
        for (int j = 0; j < kLanes; ++j) acc = r.merge(acc, lanes[j]);
        k0 += n;
        return;
      }
    }
    if (s == 1) {
      for (int64_t i = 0; i < n; ++i) acc = r.combine(acc, static_cast<C>(p[i]), o, k0 + i);
    } else {
      for (int64_t i = 0; i < n; ++i) acc = r.combine(acc, static_cast<C>(p[i * s]), o, k0 + i);
    }
    k0 += n;
  });
  return acc;
}

// Folds the reduced rows [kb, ke) into acc[0, len): the accumulators of outputs o0 .. o0+len-1,
// which sit at base[0, len) in each row.
template <typename In, typename R>
void fold_rows(const R& r, const In* base, const StridedLoop<1>& red, int64_t o0, int64_t len, int64_t kb, int64_t ke,
               typename R::Acc* acc) {
  using C = compute_t<In>;
  using Acc = typename R::Acc;
  int64_t k = kb;
  red.for_each_run(kb, ke, [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
    int64_t i = 0;
    if constexpr (MergeableReducer<R>) {
      // Four rows folded together, then merged: a quarter of the loads and stores of acc.
      for (; i + 4 <= n; i += 4, k += 4) {
        const In* r0 = base + off[0] + i * st[0];
        const In* r1 = r0 + st[0];
        const In* r2 = r1 + st[0];
        const In* r3 = r2 + st[0];
        for (int64_t c = 0; c < len; ++c) {
          Acc t = r.combine(r.init(), static_cast<C>(r0[c]), o0 + c, k);
          t = r.combine(t, static_cast<C>(r1[c]), o0 + c, k + 1);
          t = r.combine(t, static_cast<C>(r2[c]), o0 + c, k + 2);
          t = r.combine(t, static_cast<C>(r3[c]), o0 + c, k + 3);
          acc[c] = r.merge(acc[c], t);
        }
      }
    }
    for (; i < n; ++i, ++k) {
      const In* row = base + off[0] + i * st[0];
      for (int64_t c = 0; c < len; ++c) acc[c] = r.combine(acc[c], static_cast<C>(row[c]), o0 + c, k);
    }
  });
}

}  // namespace reduce_detail

// Reduces x (elements of type In) over `dims` (sorted, unique, wrapped) with reducer r.
template <typename In, typename R>
void reduce_with(const Tensor& x, const std::vector<int64_t>& dims, const R& r) {
  using namespace reduce_detail;
  using Acc = typename R::Acc;
  const ReduceGeometry g(x, dims);
  const In* xp = static_cast<const In*>(x.data_ptr());
  if (g.nout == 0) return;
  if (g.nred == 0) {
    for (int64_t o = 0; o < g.nout; ++o) r.finish(o, r.init());
    return;
  }
  const StridedLoop<1> red(g.red_sizes, {g.red_strides});
  const size_t nk = g.kept_sizes.size();
  int64_t min_red_stride = INT64_MAX;
  for (size_t i = 0; i < g.red_sizes.size(); ++i)
    if (g.red_sizes[i] > 1) min_red_stride = std::min(min_red_stride, g.red_strides[i]);
  const bool outer = nk > 0 && g.kept_strides.back() == 1 && g.kept_sizes.back() >= 8 && min_red_stride > 1;

  // Outer: units are blocks of up to kBlock adjacent outputs; inner: units are outputs.
  const int64_t L = outer ? g.kept_sizes.back() : 1;
  const int64_t nblocks = outer ? (L + kBlock - 1) / kBlock : 1;
  const int64_t units = outer ? (g.nout / L) * nblocks : g.nout;
  const int64_t unit_width = outer ? std::min(L, kBlock) : 1;
  const int64_t work = g.nred * unit_width;  // elements per unit

  // Split the reduced range when there are fewer units than threads and enough work.
  int64_t splits = 1;
  if constexpr (MergeableReducer<R>) {
    const int64_t nt = get_num_threads();
    if (units < nt) splits = std::max<int64_t>(1, std::min({(nt + units - 1) / units, work / kGrain, g.nred}));
  }

  // Reduces unit u over the reduced range [kb, ke); emit(o, acc) receives each output's result.
  auto run_unit = [&](int64_t u, int64_t kb, int64_t ke, const auto& emit) {
    if (outer) {
      Acc acc[kBlock];
      const int64_t p = u / nblocks, c0 = (u % nblocks) * kBlock;
      const int64_t len = std::min(kBlock, L - c0);
      const In* base = xp + offset_of(p, g.kept_sizes, g.kept_strides, nk - 1) + c0;
      for (int64_t c = 0; c < len; ++c) acc[c] = r.init();
      fold_rows<In>(r, base, red, p * L + c0, len, kb, ke, acc);
      for (int64_t c = 0; c < len; ++c) emit(p * L + c0 + c, acc[c]);
    } else {
      const In* base = xp + offset_of(u, g.kept_sizes, g.kept_strides, nk);
      emit(u, fold_range<In>(r, base, red, u, kb, ke, r.init()));
    }
  };

  if (splits == 1) {
    const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(work, 1));
    parallel_for(0, units, grain, [&](int64_t b, int64_t e) {
      for (int64_t u = b; u < e; ++u) run_unit(u, 0, g.nred, [&](int64_t o, const Acc& a) { r.finish(o, a); });
    });
    return;
  }
  if constexpr (MergeableReducer<R>) {
    const int64_t chunk = (g.nred + splits - 1) / splits;
    std::vector<Acc> partial(static_cast<size_t>(splits * g.nout));
    parallel_for(0, units * splits, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t u = t / splits, s = t % splits;
        const int64_t kb = s * chunk, ke = std::min(g.nred, kb + chunk);
        run_unit(u, kb, std::max(kb, ke), [&](int64_t o, const Acc& a) { partial[static_cast<size_t>(s * g.nout + o)] = a; });
      }
    });
    for (int64_t o = 0; o < g.nout; ++o) {
      Acc a = partial[static_cast<size_t>(o)];
      for (int64_t s = 1; s < splits; ++s) a = r.merge(a, partial[static_cast<size_t>(s * g.nout + o)]);
      r.finish(o, a);
    }
  }
}

// The original interface: out (contiguous, one element per output) = finalize(fold(init, x
// over the reduced dims)), combine(Acc, C) -> Acc, finalize(Acc) -> Out. Without a merge it
// neither splits ranges nor uses lanes; prefer a reducer with merge for new kernels.
namespace reduce_detail {
template <typename In, typename Out, typename A, typename Combine, typename Finalize>
struct FoldReducer {
  using Acc = A;
  Out* out;
  A init_;
  const Combine* combine_;
  const Finalize* finalize_;
  A init() const { return init_; }
  A combine(A acc, compute_t<In> v, int64_t, int64_t) const { return (*combine_)(acc, v); }
  void finish(int64_t o, A acc) const { out[o] = (*finalize_)(acc); }
};
}  // namespace reduce_detail

template <typename In, typename Out, typename A, typename Combine, typename Finalize>
void reduce_loop(const Tensor& x, const std::vector<int64_t>& dims, Out* out, A init, const Combine& combine,
                 const Finalize& finalize) {
  reduce_with<In>(x, dims, reduce_detail::FoldReducer<In, Out, A, Combine, Finalize>{out, init, &combine, &finalize});
}

}  // namespace trident::cpu
