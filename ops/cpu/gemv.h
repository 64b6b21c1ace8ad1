// NOTE [Small-m SGEMM]: a product of at most four rows by a matrix, C = alpha A B + beta C with
// A [m, k], m <= 4: the shape of token-by-token generation, where each step runs every weight
// matrix of the model against one position per sequence. Such a product reads each element of
// B once for at most 4 multiply-adds, so its speed is the memory bandwidth's; OpenBLAS's GEMM
// packs B first (reading it, writing a copy, reading that), and its time per token was 3x what
// streaming B once takes (GPT-2 124M on 2 threads: 40 ms, the weights read at 12 GB/s where
// a sum reads 39 GB/s; docs/performance.md). Here B is streamed once, in the order it is stored:
//  - B [k, n] (not transposed): each thread takes a range of columns and walks B's rows in order,
//    adding 4 rows' contributions at a time to sums for 512 columns held in L1;
//  - B^T stored [n, k] (a Linear layer's [out, in] weight): each thread takes a range of B's rows,
//    each a dot product with every row of A, 8 lanes wide.
// Every element of C is summed in an order fixed by k alone (lanes, then 4-row steps), never by
// the thread count or the column range, so the result does not depend on the threads.
#pragma once

#include <cstdint>

namespace trident::cpu {

// Computes the product and returns true when m is 1 to 4 (and the product is worth it);
// otherwise leaves C alone and returns false. Row-major, like gemm<float> (ops/cpu/linalg.h).
bool sgemm_small_m(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                   const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace trident::cpu
