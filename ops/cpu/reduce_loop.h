// The loop under every CPU reduction. The input is split into kept dims (one output element
// each) and reduced dims. Two strategies:
//  - inner: each output element walks its reduced elements (the reduced dims are innermost,
//    e.g. a row sum); parallel over outputs;
//  - outer: the innermost kept dim is contiguous and the reduced dims lie outside it (e.g. a
//    column sum, a bias gradient); a block of adjacent outputs is accumulated together, row by
//    row, so memory is read sequentially and the loop vectorizes.
#pragma once

#include <algorithm>
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

// out (contiguous, nout elements) = finalize(fold(init, x over the reduced dims)).
// combine(Acc, C) -> Acc; finalize(Acc) -> Out value.
template <typename In, typename Out, typename Acc, typename Combine, typename Finalize>
void reduce_loop(const Tensor& x, const std::vector<int64_t>& dims, Out* out, Acc init, const Combine& combine,
                 const Finalize& finalize) {
  using C = compute_t<In>;
  const ReduceGeometry g(x, dims);
  const In* xp = static_cast<const In*>(x.data_ptr());
  if (g.nout == 0) return;
  if (g.nred == 0) {
    for (int64_t o = 0; o < g.nout; ++o) out[o] = finalize(init);
    return;
  }
  const StridedLoop<1> red(g.red_sizes, {g.red_strides});
  const size_t nk = g.kept_sizes.size();
  int64_t min_red_stride = INT64_MAX;
  for (size_t i = 0; i < g.red_sizes.size(); ++i)
    if (g.red_sizes[i] > 1) min_red_stride = std::min(min_red_stride, g.red_strides[i]);
  const bool outer = nk > 0 && g.kept_strides.back() == 1 && g.kept_sizes.back() >= 8 && min_red_stride > 1;

  if (outer) {
    constexpr int64_t kBlock = 256;
    const int64_t L = g.kept_sizes.back();
    const int64_t nblocks = (L + kBlock - 1) / kBlock;
    const int64_t nprefix = g.nout / L;
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(g.nred * kBlock, 1));
    parallel_for(0, nprefix * nblocks, grain, [&](int64_t b, int64_t e) {
      Acc acc[kBlock];
      for (int64_t t = b; t < e; ++t) {
        const int64_t p = t / nblocks, c0 = (t % nblocks) * kBlock;
        const int64_t len = std::min(kBlock, L - c0);
        const In* base = xp + offset_of(p, g.kept_sizes, g.kept_strides, nk - 1) + c0;
        for (int64_t c = 0; c < len; ++c) acc[c] = init;
        red.for_each_run(0, g.nred, [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
          for (int64_t i = 0; i < n; ++i) {
            const In* row = base + off[0] + i * st[0];
            for (int64_t c = 0; c < len; ++c) acc[c] = combine(acc[c], static_cast<C>(row[c]));
          }
        });
        Out* o = out + p * L + c0;
        for (int64_t c = 0; c < len; ++c) o[c] = finalize(acc[c]);
      }
    });
    return;
  }

  const int64_t grain = std::max<int64_t>(1, 32768 / g.nred);
  parallel_for(0, g.nout, grain, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      const In* base = xp + offset_of(o, g.kept_sizes, g.kept_strides, nk);
      Acc acc = init;
      red.for_each_run(0, g.nred, [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
        const In* p = base + off[0];
        if (st[0] == 1) {
          for (int64_t i = 0; i < n; ++i) acc = combine(acc, static_cast<C>(p[i]));
        } else {
          for (int64_t i = 0; i < n; ++i) acc = combine(acc, static_cast<C>(p[i * st[0]]));
        }
      });
      out[o] = finalize(acc);
    }
  });
}

}  // namespace trident::cpu
