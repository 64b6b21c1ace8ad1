#include "ops/cpu/gemv.h"

#include <algorithm>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/conv_simd.h"
#include "ops/cpu/isa.h"

namespace trident::cpu {
namespace {

using conv_simd::load8;
using conv_simd::splat;
using conv_simd::store8;
using conv_simd::v8f;
inline float hsum(const v8f& v) { return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7])); }

constexpr int kMaxRows = 4;
constexpr int64_t kBlockRows = 64;  // B's rows per partial sum (NoTrans): fixed, not per thread

// NoTrans: part[r][j] = sum over B's rows [i0, i1) of x[r][i] B[i, j], for all n columns; B's
// rows are read in order, 4 at a time, so each thread streams contiguous memory.
template <int M>
TRIDENT_CPU_CLONES void block_times_b(int64_t k, int64_t n, const float* x, const float* b, int64_t ldb, int64_t i0,
                                      int64_t i1, float* part) {
  const int64_t nv = n / 8 * 8;
  std::fill_n(part, M * n, 0.0f);
  int64_t i = i0;
  for (; i < i1; i += 4) {
    const int rows = static_cast<int>(std::min<int64_t>(4, i1 - i));
    const float* br[4];
    float xf[M][4];
    for (int q = 0; q < 4; ++q) {
      br[q] = b + (i + std::min(q, rows - 1)) * ldb;
      for (int r = 0; r < M; ++r) xf[r][q] = q < rows ? x[r * k + i + q] : 0.0f;  // a short step adds zeros
    }
    v8f xs[M][4];
    for (int r = 0; r < M; ++r)
      for (int q = 0; q < 4; ++q) xs[r][q] = splat(xf[r][q]);
    for (int64_t j = 0; j < nv; j += 8) {
      const v8f B0 = load8(br[0] + j), B1 = load8(br[1] + j), B2 = load8(br[2] + j), B3 = load8(br[3] + j);
      for (int r = 0; r < M; ++r) {
        float* pr = part + r * n + j;
        v8f s = load8(pr);
        s = xs[r][0] * B0 + s;
        s = xs[r][1] * B1 + s;
        s = xs[r][2] * B2 + s;
        s = xs[r][3] * B3 + s;
        store8(pr, s);
      }
    }
    for (int64_t j = nv; j < n; ++j)
      for (int r = 0; r < M; ++r) {
        float s = part[r * n + j];
        for (int q = 0; q < 4; ++q) s = xf[r][q] * br[q][j] + s;
        part[r * n + j] = s;
      }
  }
}

// B^T stored [n, k] (row j of it is column j of B): C's columns [j0, j1), one row of B^T at a
// time (a single stream per thread; several accumulators so the adds do not wait on each other).
template <int M>
TRIDENT_CPU_CLONES void times_bt(int64_t k, const float* x, const float* b, int64_t ldb, int64_t j0, int64_t j1, float alpha,
                                 float beta, float* c, int64_t ldc) {
  constexpr int A = M == 1 ? 4 : M == 2 ? 2 : 1;  // accumulators per row of x
  constexpr int64_t W = 8 * A;
  const int64_t kw = k / W * W, kv = k / 8 * 8;
  for (int64_t j = j0; j < j1; ++j) {
    const float* row = b + j * ldb;
    v8f acc[M][A] = {};
    for (int64_t i = 0; i < kw; i += W)
      for (int a = 0; a < A; ++a) {
        const v8f bv = load8(row + i + 8 * a);
        for (int r = 0; r < M; ++r) acc[r][a] = load8(x + r * k + i + 8 * a) * bv + acc[r][a];
      }
    for (int64_t i = kw; i < kv; i += 8) {
      const v8f bv = load8(row + i);
      for (int r = 0; r < M; ++r) acc[r][0] = load8(x + r * k + i) * bv + acc[r][0];
    }
    for (int r = 0; r < M; ++r) {
      v8f t = acc[r][0];
      for (int a = 1; a < A; ++a) t += acc[r][a];
      float s = hsum(t);
      for (int64_t i = kv; i < k; ++i) s = x[r * k + i] * row[i] + s;
      float* cr = c + r * ldc + j;
      *cr = beta == 0.0f ? alpha * s : alpha * s + beta * *cr;
    }
  }
}

bool share_among_threads(int64_t n, int64_t k) {
  return get_num_threads() > 1 && !omp_in_parallel() && static_cast<double>(n) * static_cast<double>(k) >= 65536.0;
}

template <int M>
void run_bt(int64_t n, int64_t k, const float* x, float alpha, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (!share_among_threads(n, k)) return times_bt<M>(k, x, b, ldb, 0, n, alpha, beta, c, ldc);
  const int64_t parts = std::min<int64_t>(get_num_threads(), (n + 15) / 16);
  const int64_t step = ((n + parts - 1) / parts + 15) / 16 * 16;
  parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t lo = p * step, hi = std::min(n, lo + step);
      if (lo < hi) times_bt<M>(k, x, b, ldb, lo, hi, alpha, beta, c, ldc);
    }
  });
}

template <int M>
void run_b(int64_t n, int64_t k, const float* x, float alpha, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  // Partial sums of fixed blocks of B's rows (the same blocks whatever the threads), then added
  // in block order.
  const int64_t blocks = (k + kBlockRows - 1) / kBlockRows;
  // Reused by the next product on this thread (each block zeroes its own part first). The
  // worker threads below reach it through `part`: naming a thread_local there would name theirs.
  static thread_local std::vector<float> buffer;
  if (buffer.size() < static_cast<size_t>(blocks * M * n)) buffer.resize(static_cast<size_t>(blocks * M * n));
  float* const part = buffer.data();
  const auto block = [&](int64_t q) {
    block_times_b<M>(k, n, x, b, ldb, q * kBlockRows, std::min(k, (q + 1) * kBlockRows), part + q * M * n);
  };
  const bool share = share_among_threads(n, k);
  if (share) {
    parallel_for(0, blocks, 1, [&](int64_t q0, int64_t q1) {
      for (int64_t q = q0; q < q1; ++q) block(q);
    });
  } else {
    for (int64_t q = 0; q < blocks; ++q) block(q);
  }
  const auto columns = [&](int64_t j0, int64_t j1) {
    for (int r = 0; r < M; ++r) {
      float* cr = c + r * ldc;
      for (int64_t j = j0; j < j1; ++j) {
        float s = part[r * n + j];
        for (int64_t q = 1; q < blocks; ++q) s += part[(q * M + r) * n + j];
        cr[j] = beta == 0.0f ? alpha * s : alpha * s + beta * cr[j];
      }
    }
  };
  if (share)
    parallel_for(0, n, 1024, columns);
  else
    columns(0, n);
}

}  // namespace

bool sgemm_small_m(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                   const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m < 1 || m > kMaxRows || n < 16 || k < 16) return false;
  // A's rows, contiguous: A itself when they are (one row, or rows k apart); otherwise a copy (A
  // may be stored transposed: element (r, i) at a[i lda + r]).
  std::vector<float> packed;
  const float* x = a;
  if (trans_a || (m > 1 && lda != k)) {
    packed.resize(static_cast<size_t>(m * k));
    for (int64_t r = 0; r < m; ++r)
      for (int64_t i = 0; i < k; ++i) packed[static_cast<size_t>(r * k + i)] = trans_a ? a[i * lda + r] : a[r * lda + i];
    x = packed.data();
  }
  const auto run = [&]<int M>() {
    if (trans_b)
      run_bt<M>(n, k, x, alpha, b, ldb, beta, c, ldc);
    else
      run_b<M>(n, k, x, alpha, b, ldb, beta, c, ldc);
  };
  switch (m) {
    case 1: run.template operator()<1>(); break;
    case 2: run.template operator()<2>(); break;
    case 3: run.template operator()<3>(); break;
    default: run.template operator()<4>(); break;
  }
  return true;
}

}  // namespace trident::cpu
