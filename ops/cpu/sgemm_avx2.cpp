// NOTE [AVX2 SGEMM]: Trident's f32 GEMM for CPUs without the AVX-512 kernels, for products of at
// most 256 steps of k. OpenBLAS's AVX2 kernels (Haswell, Zen) are near the core's peak on large
// products, but on short sums they spend a large share of their time outside the micro-kernel:
// with beta = 0 they first zero C in a pass of its own (sgemm_beta: 4-5% of AmoebaNet-D(6, 32)'s
// fp32 training step on a Zen 4 whose AVX-512 is hidden, where OpenBLAS was 40% of the step), and
// they pack both operands whatever their shapes. This is the loop nest of ops/cpu/sgemm_blocks.h
// (shared with NOTE [AVX-512 SGEMM]) around a 4 x 24 micro-kernel: 4 rows of C, three 8-lane
// vectors each (12 accumulators, with the three B vectors and the broadcast A value 16
// registers), per k step 3 loads of B and 4 broadcasts of A for 12 multiply-adds, the shape of
// the convolutions' AVX2 micro-kernel (NOTE [AVX-512 micro-kernel] in ops/cpu/conv_simd.h). C is
// written from the registers once per k block, alpha and beta applied there (beta = 0: not read).
// Measured on that Zen 4 (one thread, best of 100-2000 calls, both in one process, OpenBLAS
// 0.3.21 with its Zen kernels): pointwise convolutions' products 64 x 900 x 64 1.12x OpenBLAS,
// A transposed 1.13x, 8 x 900 x 8 2.1x, 16 x 900 x 32 1.29x, 32 x 225 x 64 1.17x, 64 x 3136 x 64
// 1.20x, 256 x 784 x 256 1.01-1.02x; GPT-2 tiny's 512 x 768 x 256 with B transposed 1.06x,
// 1024 x 256 x 256 1.04x; attention's 128 x 128 x 64 1.07x, 128 x 64 x 128 0.98x; and with
// longer sums, where OpenBLAS keeps the product: 1024^3 0.94x, 1024 x 3072 x 768 0.93x,
// the pointwise weight gradient's 64 x 64 x 900 (B transposed) 0.81x (through cpu::gemm on two
// threads such products ran 0.96-1.11x: no rule there either way).
// TRIDENT_CPU_SGEMM=trident or openblas overrides the rule for every product.
#include "ops/cpu/sgemm.h"

#include <algorithm>

#include "core/error.h"
#include "ops/cpu/sgemm_blocks.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define TRIDENT_CPU_HAS_AVX2_SGEMM 1
#include <immintrin.h>
// Compiled for AVX2 and FMA whatever the build's ISA (NOTE [CPU ISA]); called only where the
// CPU has both (sgemm_avx2_available).
#define TRIDENT_AVX2 __attribute__((target("avx2,fma")))
#endif

namespace trident::cpu {
#if defined(TRIDENT_CPU_HAS_AVX2_SGEMM)
namespace {

constexpr int64_t kMR = 4, kNR = 24;  // the micro-kernel's tile of C
// kKC, kMC and the column block as the AVX-512 GEMM's where L2 is 1 MiB: a 24-column panel of B
// (36 KiB at kKC = 384) is read from L2 by each of the kMC / 4 A panels, the kMC x kKC block of A
// (144 KiB) stays in L2.
constexpr int64_t kKC = 384, kMC = 96, kNC = 3072;

// The mask of the first n (0 <= n <= 8) lanes, for maskload / maskstore.
TRIDENT_AVX2 inline __m256i first_lanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::clamp<int64_t>(n, 0, 8))),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// C[mr x nr] = alpha * (A panel @ B panel) + beta * C (beta == 0: C not read), the panels packed
// as kc steps of 4 A values and 24 B values. The loops are unrolled by pragma so that GCC keeps
// the accumulators in registers (an array it indexes at run time goes to the stack).
TRIDENT_AVX2 __attribute__((noinline)) void micro_kernel(int64_t kc, const float* __restrict ap, const float* __restrict bp,
                                                        float alpha, float beta, float* c, int64_t ldc, int64_t mr,
                                                        int64_t nr) {
  // C's lines, requested now so that the misses overlap the multiply-adds (NOTE [AVX-512 SGEMM]).
  for (int64_t r = 0; r < mr; ++r) {
    const char* row = reinterpret_cast<const char*>(c + r * ldc);
    _mm_prefetch(row, _MM_HINT_T0);
    _mm_prefetch(row + 64, _MM_HINT_T0);
  }
  __m256 acc[kMR][3];
#pragma GCC unroll 4
  for (int r = 0; r < kMR; ++r)
#pragma GCC unroll 3
    for (int z = 0; z < 3; ++z) acc[r][z] = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int64_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_loadu_ps(bp + p * kNR), b1 = _mm256_loadu_ps(bp + p * kNR + 8), b2 = _mm256_loadu_ps(bp + p * kNR + 16);
#pragma GCC unroll 4
    for (int r = 0; r < kMR; ++r) {
      const __m256 a = _mm256_broadcast_ss(ap + p * kMR + r);
      acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
      acc[r][2] = _mm256_fmadd_ps(a, b2, acc[r][2]);
    }
  }
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  if (mr == kMR && nr == kNR) {
#pragma GCC unroll 4
    for (int r = 0; r < kMR; ++r) {
      float* row = c + r * ldc;
#pragma GCC unroll 3
      for (int z = 0; z < 3; ++z) {
        __m256 v = _mm256_mul_ps(va, acc[r][z]);
        if (beta != 0.0f) v = _mm256_fmadd_ps(vb, _mm256_loadu_ps(row + 8 * z), v);
        _mm256_storeu_ps(row + 8 * z, v);
      }
    }
    return;
  }
  const __m256i mask[3] = {first_lanes(nr), first_lanes(nr - 8), first_lanes(nr - 16)};
#pragma GCC unroll 4
  for (int r = 0; r < kMR; ++r) {
    if (r >= mr) break;
    float* row = c + r * ldc;
#pragma GCC unroll 3
    for (int z = 0; z < 3; ++z) {
      if (8 * z >= nr) break;
      __m256 v = _mm256_mul_ps(va, acc[r][z]);
      if (beta != 0.0f) v = _mm256_fmadd_ps(vb, _mm256_maskload_ps(row + 8 * z, mask[z]), v);
      _mm256_maskstore_ps(row + 8 * z, mask[z], v);
    }
  }
}

// The mc x kc block of op(A) at (i0, p0) as panels of 4 rows: panel q holds, for each step p,
// the 4 values op(A)[i0 + 4 q + r][p0 + p] (zeros past mc).
TRIDENT_AVX2 void pack_a(bool trans, const float* a, int64_t lda, int64_t i0, int64_t mc, int64_t p0, int64_t kc, float* dst) {
  for (int64_t q = 0; q * kMR < mc; ++q, dst += kc * kMR) {
    const int64_t rows = std::min(kMR, mc - q * kMR), first = i0 + q * kMR;
    if (trans) {  // op(A)[i][p] = a[p lda + i]: each step's 4 values are contiguous
      const __m128i m = _mm256_castsi256_si128(first_lanes(rows));
      for (int64_t p = 0; p < kc; ++p) _mm_storeu_ps(dst + p * kMR, _mm_maskload_ps(a + (p0 + p) * lda + first, m));
      continue;
    }
    // op(A)[i][p] = a[i lda + p]: 4 rows read along p, written transposed 4 steps at a time.
    const float* src = a + first * lda + p0;
    int64_t p = 0;
    if (rows == kMR) {
      for (; p + 4 <= kc; p += 4) {
        __m128 x0 = _mm_loadu_ps(src + p), x1 = _mm_loadu_ps(src + lda + p), x2 = _mm_loadu_ps(src + 2 * lda + p),
               x3 = _mm_loadu_ps(src + 3 * lda + p);
        _MM_TRANSPOSE4_PS(x0, x1, x2, x3);
        _mm_storeu_ps(dst + p * kMR, x0);
        _mm_storeu_ps(dst + p * kMR + 4, x1);
        _mm_storeu_ps(dst + p * kMR + 8, x2);
        _mm_storeu_ps(dst + p * kMR + 12, x3);
      }
    }
    for (; p < kc; ++p)
      for (int64_t r = 0; r < kMR; ++r) dst[p * kMR + r] = r < rows ? src[r * lda + p] : 0.0f;
  }
}

// The kc x nc block of op(B) at (p0, j0) as panels of 24 columns: panel q holds, for each step p,
// the 24 values op(B)[p0 + p][j0 + 24 q + j] (zeros past nc).
TRIDENT_AVX2 void pack_b(bool trans, const float* b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0, int64_t nc, float* dst) {
  const int64_t panels = (nc + kNR - 1) / kNR, last = nc - (panels - 1) * kNR;
  if (!trans) {
    // op(B)[p][j] = b[p ldb + j]: row by row, each row's nc values read in one sequential run and
    // dealt out to the panels (NOTE [AVX-512 SGEMM]'s pack_b says why).
    const __m256i m0 = first_lanes(last), m1 = first_lanes(last - 8), m2 = first_lanes(last - 16);
    for (int64_t p = 0; p < kc; ++p) {
      const float* s = b + (p0 + p) * ldb + j0;
      float* d = dst + p * kNR;
      for (int64_t q = 0; q + 1 < panels; ++q, s += kNR, d += kc * kNR) {
        _mm256_storeu_ps(d, _mm256_loadu_ps(s));
        _mm256_storeu_ps(d + 8, _mm256_loadu_ps(s + 8));
        _mm256_storeu_ps(d + 16, _mm256_loadu_ps(s + 16));
      }
      _mm256_storeu_ps(d, _mm256_maskload_ps(s, m0));
      _mm256_storeu_ps(d + 8, _mm256_maskload_ps(s + 8, m1));
      _mm256_storeu_ps(d + 16, _mm256_maskload_ps(s + 16, m2));
    }
    return;
  }
  sgemm_detail::pack_b_transposed<kNR>(b, ldb, p0, kc, j0, nc, dst);
}

}  // namespace

bool sgemm_avx2_available() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

void sgemm_avx2(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  TRIDENT_CHECK(sgemm_avx2_available(), "sgemm_avx2: this CPU has no AVX2 and FMA");
  sgemm_detail::sgemm_blocks<kMR, kNR, kKC, kMC, pack_a, pack_b, micro_kernel>(kNC, trans_a, trans_b, m, n, k, alpha, a, lda, b,
                                                                             ldb, beta, c, ldc);
}

#else

bool sgemm_avx2_available() { return false; }
void sgemm_avx2(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float, float*, int64_t) {
  TRIDENT_FAIL("sgemm_avx2: this build has no AVX2 kernels (x86-64 with GCC or Clang only)");
}

#endif
}  // namespace trident::cpu
