// Helpers for the row-wise CPU kernels of the nn function families (softmax, losses, norms):
// the [outer, L, inner] view of a tensor around one dim, and vectorizable row reductions.
//
// NOTE [Row accumulation]: f32 rows are summed in f32 SIMD lanes over blocks of kSumBlock
// elements, and the block sums are added in f64. Plain f32 accumulation over a 50304-wide row
// would lose about log2(50304) bits in the worst case; all-f64 accumulation halves the vector
// width of loops that are otherwise as fast as memory. Blocks keep the error of a row sum
// near that of a 256-term f32 sum, independent of the row's length. f64 rows sum in f64.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/tensor.h"

namespace trident::cpu {

// x viewed as [outer, len, inner] around `dim` (row-major; contiguous tensors only).
struct RowGeometry {
  int64_t outer = 1, len = 1, inner = 1;
  RowGeometry(const Shape& sizes, int64_t dim) {
    for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
      const int64_t s = sizes[static_cast<size_t>(d)];
      if (d < dim) outer *= s;
      else if (d == dim) len = s;
      else inner *= s;
    }
  }
};

inline constexpr int64_t kSumBlock = 256;
// Adjacent columns handled together by the kernels whose reduced dim is not innermost.
inline constexpr int64_t kColBlock = 64;

// Sum over i in [0, n) of f(i), where f returns C (float or double). NOTE [Row accumulation].
// f may have side effects (store what it computed); it is called once per i, in order within
// each block of SIMD lanes.
template <typename C, typename F>
inline double row_sum(int64_t n, const F& f) {
  if constexpr (std::is_same_v<C, double>) {
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += f(i);
    return s;
  } else {
    double total = 0;
    for (int64_t b = 0; b < n; b += kSumBlock) {
      const int64_t e = std::min(n, b + kSumBlock);
      float s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t i = b; i < e; ++i) s += f(i);
      total += static_cast<double>(s);
    }
    return total;
  }
}

// Two sums in one sweep: s1 += f1(i), s2 += f2(i) (same blocking as row_sum).
template <typename C, typename F1, typename F2>
inline void row_sum2(int64_t n, const F1& f1, const F2& f2, double& s1, double& s2) {
  s1 = 0;
  s2 = 0;
  if constexpr (std::is_same_v<C, double>) {
    double a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
    for (int64_t i = 0; i < n; ++i) {
      a += f1(i);
      b += f2(i);
    }
    s1 = a;
    s2 = b;
  } else {
    for (int64_t blk = 0; blk < n; blk += kSumBlock) {
      const int64_t e = std::min(n, blk + kSumBlock);
      float a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
      for (int64_t i = blk; i < e; ++i) {
        a += f1(i);
        b += f2(i);
      }
      s1 += static_cast<double>(a);
      s2 += static_cast<double>(b);
    }
  }
}

// max over x[0..n) (-inf for an empty row or one of -inf alone; NaN-free rows only: a NaN may or
// may not win, the NaN then reaches the output through x - max anyway). OpenMP starts the
// reduction's private copies at the least value of the type, which GCC takes to be -inf and
// Clang the lowest finite value: a row of -inf (a fully masked attention row) came out as
// -DBL_MAX under Clang, and its softmax as 0 / 0. A result of exactly that value is therefore
// checked again one element at a time (a rare row; the vectorized loop stays as fast).
template <typename C>
inline C row_max(const C* x, int64_t n) {
  C m = -std::numeric_limits<C>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  if (m == std::numeric_limits<C>::lowest()) {
    m = -std::numeric_limits<C>::infinity();
    for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  }
  return m;
}

// Rows per parallel chunk so a chunk does about `work` element operations.
inline int64_t rows_grain(int64_t len, int64_t work = 32768) { return std::max<int64_t>(1, work / std::max<int64_t>(len, 1)); }

}  // namespace trident::cpu
