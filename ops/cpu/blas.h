// Row-major GEMM on the CPU through OpenBLAS, for kernels that need a matrix product inside
// (matmul, linear, convolution via im2col): C = alpha * op(A) @ op(B) + beta * C.
#pragma once

#include <cstdint>

namespace trident::cpu {

// op(A) is m x k, op(B) is k x n, C is m x n; lda/ldb/ldc are row strides of the stored
// (untransposed) matrices. T is float or double.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc);

}  // namespace trident::cpu
