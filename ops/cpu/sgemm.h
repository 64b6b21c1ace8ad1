// Trident's own f32 GEMMs: one for AVX-512 CPUs whose OpenBLAS runs narrower kernels, whose
// cores have 2 MiB of L2, or that are Zen 4s (NOTE [AVX-512 SGEMM] in ops/cpu/sgemm_avx512.cpp),
// one for AVX2 CPUs' products with short sums (NOTE [AVX2 SGEMM] in ops/cpu/sgemm_avx2.cpp).
// Internal to ops/cpu: cpu::gemm (ops/cpu/linalg.cpp) chooses among them and OpenBLAS.
#pragma once

#include <cstdint>

namespace trident::cpu {

// C = alpha * op(A) @ op(B) + beta * C, row-major, on the calling thread, as cblas_sgemm with
// CblasRowMajor: op(A) is m x k, op(B) is k x n, lda/ldb/ldc the row strides of the stored
// matrices. With beta == 0, C is written without being read (NaN there does not propagate).
// Each needs its kernel available (below).
void sgemm_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void sgemm_avx2(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Whether this build has the kernel and the CPU runs it (the AVX-512 one: and tests have not
// turned the AVX-512 kernels off, set_cpu_avx512_kernels_enabled_for_testing in ops/cpu/isa.h;
// the AVX2 one: AVX2 and FMA, built for GCC or Clang on x86-64).
bool sgemm_avx512_available();
bool sgemm_avx2_available();

enum class Sgemm : uint8_t { OpenBlas, Avx512, Avx2 };

// Which kernel cpu::gemm<float> runs an m x n x k product on. The AVX-512 one where it is
// available and the product is not too thin for its 8 x 48 tiles, and either the environment
// variable TRIDENT_CPU_SGEMM says "trident" or it is unset (or "auto") and OpenBLAS's kernels here
// use no AVX-512, or they do but the product's 48-column tiles are at least 85% full and either
// each core has at least 2 MiB of L2 or the CPU is a Zen 4 (AMD family 0x19) and the product has
// at least 512 rows and 256 steps of k (where it measured faster than OpenBLAS's AVX-512
// kernels). On a CPU without the AVX-512 kernels (or with them turned off), the AVX2 one where it
// is available, the product has at least 4 rows, 8 columns and 8 steps of k, and either
// TRIDENT_CPU_SGEMM says "trident" or it is unset and OpenBLAS runs no AVX-512 kernels and k is
// at most 256 (NOTE [AVX2 SGEMM]). TRIDENT_CPU_SGEMM=openblas keeps every product on OpenBLAS.
Sgemm sgemm_kernel_for(int64_t m, int64_t n, int64_t k);

// TRIDENT_CPU_SGEMM's value (nullptr: unset) as a choice: 1 "trident", 0 "openblas", -1 "auto"
// or empty or unset; anything else is an error naming the variable and the values it takes.
int sgemm_choice_from_env(const char* value);

// Tests: 1 forces Trident's kernels wherever one is available (AVX-512 first), 0 forces
// OpenBLAS, -1 restores the choice above. Returns the previous mode. Not thread-safe: call it
// between ops.
int set_sgemm_preference_for_testing(int mode);

}  // namespace trident::cpu
