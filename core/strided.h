// The loop under every CPU element-wise kernel: N operands that share one iteration shape,
// each with its own strides (0 on broadcast dims). Dims of size 1 are dropped and dims that
// are contiguous with their inner neighbour in every operand are merged, so most loops become
// one long run with unit strides that the compiler vectorizes.
#pragma once

#include <array>
#include <cstdint>

#include "core/error.h"
#include "core/parallel.h"
#include "core/shape.h"

namespace trident {

inline constexpr int kMaxLoopDims = 25;

template <int N>
struct StridedLoop {
  int ndim = 0;  // after coalescing; the innermost dim is ndim - 1
  int64_t numel = 1;
  std::array<int64_t, kMaxLoopDims> sizes{};
  std::array<std::array<int64_t, kMaxLoopDims>, N> strides{};  // in elements

  // Builds the loop over `sizes`, operand k read with strides[k] (already broadcast to sizes).
  StridedLoop(const Shape& shape, const std::array<Shape, N>& operand_strides) {
    TRIDENT_CHECK(shape.size() <= static_cast<size_t>(kMaxLoopDims), "tensors of more than ", kMaxLoopDims,
                  " dims are not supported, got shape ", shape);
    numel = shape_numel(shape);
    // Walk from the innermost dim outwards, merging when every operand allows it.
    int n = 0;
    std::array<int64_t, kMaxLoopDims> rs{};                           // sizes, innermost first
    std::array<std::array<int64_t, kMaxLoopDims>, N> rst{};           // strides, innermost first
    for (size_t i = shape.size(); i-- > 0;) {
      const int64_t sz = shape[i];
      if (sz == 1) continue;
      bool merge = n > 0;
      for (int k = 0; k < N && merge; ++k) merge = operand_strides[k][i] == rst[k][n - 1] * rs[n - 1];
      if (merge) {
        rs[n - 1] *= sz;
      } else {
        rs[n] = sz;
        for (int k = 0; k < N; ++k) rst[k][n] = operand_strides[k][i];
        ++n;
      }
    }
    ndim = n;
    for (int d = 0; d < n; ++d) {
      sizes[d] = rs[n - 1 - d];
      for (int k = 0; k < N; ++k) strides[k][d] = rst[k][n - 1 - d];
    }
  }

  // Calls f(offsets, len, inner_strides) for each run of the innermost dim that intersects
  // the flat range [begin, end): offsets[k] is operand k's element offset of the run's start.
  template <typename F>
  void for_each_run(int64_t begin, int64_t end, const F& f) const {
    std::array<int64_t, N> off{};
    std::array<int64_t, N> inner{};
    if (ndim == 0) {
      if (begin < end) f(off, int64_t{1}, inner);
      return;
    }
    const int last = ndim - 1;
    for (int k = 0; k < N; ++k) inner[k] = strides[k][last];
    std::array<int64_t, kMaxLoopDims> idx{};
    int64_t rem = begin;
    for (int d = last; d >= 0; --d) {
      idx[d] = rem % sizes[d];
      rem /= sizes[d];
    }
    int64_t pos = begin;
    while (pos < end) {
      for (int k = 0; k < N; ++k) {
        int64_t o = 0;
        for (int d = 0; d <= last; ++d) o += idx[d] * strides[k][d];
        off[k] = o;
      }
      const int64_t len = std::min(sizes[last] - idx[last], end - pos);
      f(off, len, inner);
      pos += len;
      idx[last] += len;
      for (int d = last; d > 0 && idx[d] >= sizes[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
      }
    }
  }

  // Runs for_each_run over all elements, split across threads.
  template <typename F>
  void run(const F& f, int64_t grain = 32768) const {
    parallel_for(0, numel, grain, [&](int64_t b, int64_t e) { for_each_run(b, e, f); });
  }
};

}  // namespace trident
