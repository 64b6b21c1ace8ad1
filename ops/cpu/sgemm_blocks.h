// The Goto/BLIS loop nest of Trident's own f32 GEMMs (NOTE [AVX-512 SGEMM] in
// ops/cpu/sgemm_avx512.cpp, NOTE [AVX2 SGEMM] in ops/cpu/sgemm_avx2.cpp), written once over the
// kernel set that packs and multiplies:
//
//   for each block of nc columns of C:
//     for each block of KC steps of k:           pack op(B)[kc x nc] as panels of NR columns
//       for each block of MC rows of C:          pack op(A)[mc x kc] as panels of MR rows
//         for each NR-column panel of B:         (read from L2 by each A panel)
//           for each MR-row panel of A:          (the A block stays in L2)
//             C[MR x NR] (+)= alpha * A panel @ B panel
//
// Panels past the edge of C are padded with zeros when packed, so the micro-kernel always runs
// whole tiles; only its stores are masked. The first k block applies beta (beta == 0 writes C
// without reading it, as BLAS does), later ones add. Each element of C is summed in the same
// order (k ascending, blocks of KC) whatever the panel it falls in, so splitting C across threads
// (cpu::gemm) does not change the result.
//
// A kernel set gives the tile (MR x NR), the blocks of k and of rows (KC, MC) and of columns
// (nc_max), and three functions: PackA(trans, a, lda, i0, mc, p0, kc, dst) and PackB(trans, b,
// ldb, p0, kc, j0, nc, dst) in the layouts above, Micro(kc, a_panel, b_panel, alpha, beta, c, ldc,
// mr, nr). Internal to ops/cpu.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <unistd.h>

#include "ops/cpu/conv_simd.h"

namespace trident::cpu::sgemm_detail {

// Whether each core's L2 holds at least 2 MiB (Intel's Xeons since Sapphire Rapids; AMD's Zen 4
// and 5 have 1 MiB); 0 or an error from sysconf counts as smaller.
inline bool large_l2() {
  static const bool large = sysconf(_SC_LEVEL2_CACHE_SIZE) >= (int64_t{2} << 20);
  return large;
}

// This thread's packing buffers for one kernel set, grown when needed, 64-byte aligned.
struct PackBuffers {
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> a, b;
  int64_t a_size = 0, b_size = 0;
  static float* ensure(std::unique_ptr<float, Free>& buf, int64_t& have, int64_t need) {
    if (have < need) {
      const size_t bytes = (static_cast<size_t>(need) * sizeof(float) + 63) / 64 * 64;
      buf.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
      if (!buf) throw std::bad_alloc();
      have = need;
    }
    return buf.get();
  }
};

// The kc x nc block of op(B) at (p0, j0) from B stored [n, k] (op(B)[p][j] = b[j ldb + p]) as
// panels of NR columns (NR a multiple of 8): NR rows of b read along p, written transposed in
// 8 x 8 blocks (8 columns j by 8 steps p); zeros past nc. Inline, so that each kernel's pack_b
// compiles it for its own ISA.
template <int64_t NR>
inline void pack_b_transposed(const float* b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0, int64_t nc, float* dst) {
  static_assert(NR % 8 == 0, "panels of whole 8 x 8 blocks");
  for (int64_t q = 0; q * NR < nc; ++q, dst += kc * NR) {
    const int64_t cols = std::min(NR, nc - q * NR), first = j0 + q * NR;
    int64_t p = 0;
    for (; p + 8 <= kc; p += 8) {
      for (int64_t jb = 0; jb < NR; jb += 8) {
        conv_simd::v8f v[8], t[8];
        for (int r = 0; r < 8; ++r) v[r] = jb + r < cols ? conv_simd::load8(b + (first + jb + r) * ldb + p0 + p) : conv_simd::v8f{};
        conv_simd::transpose_8x8(v, t);
        for (int r = 0; r < 8; ++r) conv_simd::store8(dst + (p + r) * NR + jb, t[r]);
      }
    }
    for (; p < kc; ++p)
      for (int64_t j = 0; j < NR; ++j) dst[p * NR + j] = j < cols ? b[(first + j) * ldb + p0 + p] : 0.0f;
  }
}

// C = alpha * op(A) @ op(B) + beta * C as cblas_sgemm with CblasRowMajor (m, n > 0 and k > 0 or
// alpha == 0 handled here: C = beta C, A and B unread, BLAS's rule).
template <int64_t MR, int64_t NR, int64_t KC, int64_t MC, auto PackA, auto PackB, auto Micro>
void sgemm_blocks(int64_t nc_max, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (alpha == 0.0f || k <= 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  thread_local PackBuffers bufs;
  const int64_t kc_max = std::min(KC, k);
  float* bp = PackBuffers::ensure(bufs.b, bufs.b_size, kc_max * (std::min(nc_max, n) + NR));
  float* ap = PackBuffers::ensure(bufs.a, bufs.a_size, kc_max * (std::min(MC, m) + MR));
  for (int64_t jc = 0; jc < n; jc += nc_max) {
    const int64_t nc = std::min(nc_max, n - jc);
    for (int64_t pc = 0; pc < k; pc += KC) {
      const int64_t kc = std::min(KC, k - pc);
      const float beta_here = pc == 0 ? beta : 1.0f;
      PackB(tb, b, ldb, pc, kc, jc, nc, bp);
      for (int64_t ic = 0; ic < m; ic += MC) {
        const int64_t mc = std::min(MC, m - ic);
        PackA(ta, a, lda, ic, mc, pc, kc, ap);
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const float* bpanel = bp + (jr / NR) * kc * NR;
          for (int64_t ir = 0; ir < mc; ir += MR) {
            Micro(kc, ap + (ir / MR) * kc * MR, bpanel, alpha, beta_here, c + (ic + ir) * ldc + jc + jr, ldc,
                            std::min(MR, mc - ir), std::min(NR, nc - jr));
          }
        }
      }
    }
  }
}

}  // namespace trident::cpu::sgemm_detail
