// NOTE [AVX-512 SGEMM]: Trident's f32 GEMM for AVX-512 CPUs whose OpenBLAS runs narrower
// kernels, for most products on those whose cores have 2 MiB of L2, and for large ones on Zen 4
// (below). OpenBLAS picks
// its kernels by CPU model, and OPENBLAS_CORETYPE overrides that; some machines run its AVX2
// (Haswell) kernels on AVX-512 hardware: this workplace sets
// OPENBLAS_CORETYPE=Haswell on its AMD EPYC Zen 5 VMs, because older OpenBLAS builds crash or
// compute wrong results in their AVX-512 kernels there, and Trident keeps the user's choice
// (NOTE [OpenBLAS core] in core/parallel.cpp). Every f32 product (linear, matmul, attention's
// batched products, convolution's im2col) then ran at AVX2 speed. This GEMM is the Goto/BLIS
// loop nest (ops/cpu/sgemm_blocks.h, shared with NOTE [AVX2 SGEMM]) around an 8 x 48
// micro-kernel (8 rows of C, three 16-lane vectors each: 24 accumulators; per k step 3 loads of
// B and 8 broadcasts of A for 24 multiply-adds), the shape the convolutions' AVX-512
// micro-kernel measured best (NOTE [AVX-512 micro-kernel] in ops/cpu/conv_simd.h). Each element
// of C is summed in the same order whatever the panel it falls in, so splitting C across threads
// (cpu::gemm) does not change the result. Where OpenBLAS runs its own AVX-512 kernels
// (SkylakeX, Cooperlake, SapphireRapids), it keeps the product where each core's L2 is smaller
// than 2 MiB: on one Zen 5 thread (1 MiB L2) this GEMM runs at 1.3-2.1x OpenBLAS's Haswell
// kernels and 0.6-0.98x its SkylakeX ones. On a Xeon with 2 MiB of L2 it ran 1.04-1.15x the
// SkylakeX kernels on every product measured whose 48-column tiles were at least 85% full
// (1024^3 and linear's three products on two threads, attention's 256 x 256 x 64, pointwise
// convolutions, 512^3 on one), and 0.83-0.99x where they were not (n = 64, 200): so there it
// takes those products (docs/performance.md). On Zen 4, which executes AVX-512 as two 256-bit
// halves (1 MiB of L2), it ran 1.02-1.10x OpenBLAS's Cooperlake kernels on products of at least
// 512 rows and 256 steps of k with full tiles (1024^3, linear's three, 512^3, 1024 x 1024 x 256;
// one and two threads, the two alternating in one process) and 0.88-1.03x on smaller ones
// (256 x 784 x 256, the im2col and pointwise products of convolutions, attention's k = 64):
// so there it takes the former. TRIDENT_CPU_SGEMM=trident or openblas overrides the rule for
// every product.
#include "ops/cpu/sgemm.h"

#include <algorithm>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/cpu/conv_simd.h"
#include "ops/cpu/isa.h"
#include "ops/cpu/sgemm_blocks.h"

#if defined(TRIDENT_CPU_HAS_AVX512_KERNELS)
#include <immintrin.h>
#endif

namespace trident::cpu {
#if defined(TRIDENT_CPU_HAS_AVX512_KERNELS)
namespace {

constexpr int64_t kMR = 8, kNR = 48;  // the micro-kernel's tile of C
// Block sizes. kKC was measured on a Zen 5 EPYC (one thread, 1024 x 3072 x 768 with B
// transposed, best of 7, two runs each): kKC 128 / 192 / 256 / 384 / 512 gave 0.68-0.76 /
// 0.73-0.84 / 0.80-0.90 / 0.85-0.98 / 0.89-0.96 of OpenBLAS's SkylakeX kernels (768: one
// block at that k). At kKC = 384 a 48-column panel of B (72 KiB) is read from L2 for each of
// the kMC / 8 A panels (12 KiB each) and the kMC x kKC block of A (144 KiB) stays in L2. The
// kKC x nc block of B is 3072 columns (4.5 MiB, in L3) where L2 is smaller than 2 MiB (Zen 4
// and 5: 1 MiB), 768 (1.1 MiB, in L2) where it is at least 2 MiB, at the price of packing A
// once per 768 columns: on a 2 MiB-L2 Xeon (two threads, the two alternating every 0.1 s in one
// process) 1024 x 3072 x 768 with B transposed ran 2.4-2.8% faster at 768 (with the C prefetch
// in micro_kernel, 3.4-4.0%), 1024^3 the same. The k loop is unrolled 4 times.
constexpr int64_t kKC = 384, kMC = 96;
int64_t block_columns() { return sgemm_detail::large_l2() ? 768 : 3072; }
constexpr int kUnroll = 4;

#define TRIDENT_AVX512 __attribute__((TRIDENT_TARGET_V4))

// The mask of the first n (0 <= n <= 16) lanes.
TRIDENT_AVX512 inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << std::max<int64_t>(n, 0)) - 1);
}

// C[mr x nr] = alpha * (A panel @ B panel) + beta * C (beta == 0: C not read), the panels packed
// as kc steps of 8 A values and 48 B values.
TRIDENT_AVX512 __attribute__((noinline)) void micro_kernel(int64_t kc, const float* __restrict ap, const float* __restrict bp,
                                                          float alpha, float beta, float* c, int64_t ldc, int64_t mr,
                                                          int64_t nr) {
  // C's tile is read (beta != 0) and written only after the k loop; its lines (a row of 48 floats
  // spans 3 or 4 of them) are requested now so that the misses overlap the multiply-adds. Prefetches
  // never fault, so the last one of a row may point past the matrix.
  for (int64_t r = 0; r < mr; ++r) {
    const char* row = reinterpret_cast<const char*>(c + r * ldc);
    for (int line = 0; line < 4; ++line) _mm_prefetch(row + std::min(64 * line, 188), _MM_HINT_T0);
  }
  __m512 acc[kMR][3];
  for (int r = 0; r < kMR; ++r)
    for (int z = 0; z < 3; ++z) acc[r][z] = _mm512_setzero_ps();
#pragma GCC unroll kUnroll
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_loadu_ps(bp + p * kNR), b1 = _mm512_loadu_ps(bp + p * kNR + 16),
                 b2 = _mm512_loadu_ps(bp + p * kNR + 32);
    for (int r = 0; r < kMR; ++r) {
      const __m512 a = _mm512_set1_ps(ap[p * kMR + r]);
      acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(a, b2, acc[r][2]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  if (mr == kMR && nr == kNR) {
    for (int r = 0; r < kMR; ++r) {
      float* row = c + r * ldc;
      for (int z = 0; z < 3; ++z) {
        __m512 v = _mm512_mul_ps(va, acc[r][z]);
        if (beta != 0.0f) v = _mm512_fmadd_ps(vb, _mm512_loadu_ps(row + 16 * z), v);
        _mm512_storeu_ps(row + 16 * z, v);
      }
    }
    return;
  }
  const __mmask16 mask[3] = {first_lanes(nr), first_lanes(nr - 16), first_lanes(nr - 32)};
  for (int r = 0; r < mr; ++r) {
    float* row = c + r * ldc;
    for (int z = 0; z < 3; ++z) {
      if (mask[z] == 0) break;
      __m512 v = _mm512_mul_ps(va, acc[r][z]);
      if (beta != 0.0f) v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask[z], row + 16 * z), v);
      _mm512_mask_storeu_ps(row + 16 * z, mask[z], v);
    }
  }
}

// d[j * ld + i] = v[i][j] for the 8 x 8 block v: conv_simd's transpose, then 8 row stores.
TRIDENT_AVX512 inline void transpose_8x8(const conv_simd::v8f (&v)[8], float* d, int64_t ld) {
  conv_simd::v8f t[8];
  conv_simd::transpose_8x8(v, t);
  for (int r = 0; r < 8; ++r) conv_simd::store8(d + r * ld, t[r]);
}

// The mc x kc block of op(A) at (i0, p0) as panels of 8 rows: panel q holds, for each step p,
// the 8 values op(A)[i0 + 8 q + r][p0 + p] (zeros past mc).
TRIDENT_AVX512 void pack_a(bool trans, const float* a, int64_t lda, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                           float* dst) {
  for (int64_t q = 0; q * kMR < mc; ++q, dst += kc * kMR) {
    const int64_t rows = std::min(kMR, mc - q * kMR), first = i0 + q * kMR;
    if (trans) {  // op(A)[i][p] = a[p lda + i]: each step's 8 values are contiguous
      const __mmask16 m = first_lanes(rows);
      for (int64_t p = 0; p < kc; ++p) {
        const __m256 v = _mm256_maskz_loadu_ps(static_cast<__mmask8>(m), a + (p0 + p) * lda + first);
        _mm256_storeu_ps(dst + p * kMR, v);
      }
    } else {  // op(A)[i][p] = a[i lda + p]: 8 rows read along p, written transposed
      const float* src[kMR];
      for (int64_t r = 0; r < kMR; ++r) src[r] = r < rows ? a + (first + r) * lda + p0 : nullptr;
      int64_t p = 0;
      if (rows == kMR) {
        // 8 steps at a time: an 8 x 8 transpose of 8-lane vectors.
        for (; p + 8 <= kc; p += 8) {
          conv_simd::v8f v[8];
          for (int r = 0; r < 8; ++r) v[r] = conv_simd::load8(src[r] + p);
          transpose_8x8(v, dst + p * kMR, 8);
        }
      }
      for (; p < kc; ++p)
        for (int64_t r = 0; r < kMR; ++r) dst[p * kMR + r] = r < rows ? src[r][p] : 0.0f;
    }
  }
}

// The kc x nc block of op(B) at (p0, j0) as panels of 48 columns: panel q holds, for each step p,
// the 48 values op(B)[p0 + p][j0 + 48 q + j] (zeros past nc).
TRIDENT_AVX512 void pack_b(bool trans, const float* b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                           float* dst) {
  if (!trans) {
    // op(B)[p][j] = b[p ldb + j]: row by row, each row's nc values read in one sequential run
    // and dealt out to the panels (panel by panel, the reads jumped a row every 48 values, kc
    // interleaved streams: pack_b took nearly as long as the micro-kernel in the small-m GEMMs of
    // AmoebaNet's pointwise convolutions).
    const int64_t panels = (nc + kNR - 1) / kNR, last = nc - (panels - 1) * kNR;
    const __mmask16 m0 = first_lanes(last), m1 = first_lanes(last - 16), m2 = first_lanes(last - 32);
    for (int64_t p = 0; p < kc; ++p) {
      const float* s = b + (p0 + p) * ldb + j0;
      float* d = dst + p * kNR;
      for (int64_t q = 0; q + 1 < panels; ++q, s += kNR, d += kc * kNR) {
        _mm512_storeu_ps(d, _mm512_loadu_ps(s));
        _mm512_storeu_ps(d + 16, _mm512_loadu_ps(s + 16));
        _mm512_storeu_ps(d + 32, _mm512_loadu_ps(s + 32));
      }
      _mm512_storeu_ps(d, _mm512_maskz_loadu_ps(m0, s));
      _mm512_storeu_ps(d + 16, _mm512_maskz_loadu_ps(m1, s + 16));
      _mm512_storeu_ps(d + 32, _mm512_maskz_loadu_ps(m2, s + 32));
    }
    return;
  }
  sgemm_detail::pack_b_transposed<kNR>(b, ldb, p0, kc, j0, nc, dst);
}

}  // namespace

bool sgemm_avx512_available() { return cpu_avx512_kernels(); }

void sgemm_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  sgemm_detail::sgemm_blocks<kMR, kNR, kKC, kMC, pack_a, pack_b, micro_kernel>(block_columns(), trans_a, trans_b, m, n, k, alpha, a,
                                                                              lda, b, ldb, beta, c, ldc);
}

#else

bool sgemm_avx512_available() { return false; }
void sgemm_avx512(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float, float*,
                  int64_t) {
  TRIDENT_FAIL("sgemm_avx512: this build has no AVX-512 kernels");
}

#endif

}  // namespace trident::cpu
