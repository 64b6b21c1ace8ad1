// Row-major GEMM on the CPU, for kernels that need a matrix product inside (matmul, linear,
// convolution via im2col): C = alpha * op(A) @ op(B) + beta * C, through OpenBLAS, or for f32 on
// an AVX-512 CPU whose OpenBLAS runs narrower kernels, or whose cores have 2 MiB of L2, or a Zen 4
// (products that fill its tiles; on Zen 4 large ones), through Trident's own (NOTE [AVX-512 SGEMM] in ops/cpu/sgemm_avx512.cpp),
// and on an AVX2 CPU products of at most 256 steps of k through its AVX2 one (NOTE [AVX2 SGEMM] in
// ops/cpu/sgemm_avx2.cpp); ops/cpu/sgemm.h chooses.
// Outside a parallel region a large product is split into panels across Trident's threads;
// inside one it runs on the calling thread (NOTE [Threads] in core/parallel.cpp).
#pragma once

#include <cstdint>

namespace trident::cpu {

// op(A) is m x k, op(B) is k x n, C is m x n; lda/ldb/ldc are row strides of the stored
// (untransposed) matrices. T is float or double.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc);

// Whether a batch of `count` GEMMs of m x n x k should run one per thread rather than one
// after another, each split across the threads (NOTE [Threads] in core/parallel.cpp).
bool gemm_batch_in_parallel(int64_t count, int64_t m, int64_t n, int64_t k);

}  // namespace trident::cpu
