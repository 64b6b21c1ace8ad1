// NOTE [Small-m SGEMM]: a product of at most four rows by a matrix, C = alpha A B + beta C with
// A [m, k], m <= 4: the shape of token-by-token generation, where each step runs every weight
// matrix of the model against one position per sequence. Such a product reads each element of
// B once for at most 4 multiply-adds, so its speed is the memory bandwidth's; OpenBLAS's GEMM
// packs B first (reading it, writing a copy, reading that): GPT-2 124M took 43 ms per token on 2
// threads, the weights read at 11 GB/s where a sum reads 39 GB/s (docs/performance.md). Here
// B is read once, in the order it is stored, 8 lanes wide:
//  - B [k, n] (not transposed; GPT-2's [in, out] weights): B's rows in fixed blocks of 64, each
//    block's partial sums over all n columns (4 rows added per step), the blocks shared among
//    the threads so that each streams contiguous memory; then the partials added in block order;
//  - B^T stored [n, k] (a Linear layer's [out, in] weight, GPT-2's output layer): C's columns
//    shared among the threads, each one row of B^T at a time (a single stream), its dot product
//    with every row of A in several accumulators.
// Every element of C is summed in an order fixed by k alone (lanes, accumulators, blocks), never
// by the thread count or the columns a thread takes, so the result does not depend on threads.
// 22 ms per token after (half); per product 21-30 GB/s.
#pragma once

#include <cstdint>

namespace trident::cpu {

// Computes the product and returns true when m is 1 to 4 and n and k are at least 16;
// otherwise leaves C alone and returns false. Row-major, like gemm<float> (ops/cpu/blas.h).
bool sgemm_small_m(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                   const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace trident::cpu
