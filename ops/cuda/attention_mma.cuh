// Tensor-core building blocks of the f16/bf16 attention kernels (NOTE [Tensor-core attention] in
// ops/cuda/attention_mma_forward.cu): the mma.sync m16n8k16 instruction and the register
// layouts of its fragments, which the kernels index directly; ldmatrix, which fills fragments
// from shared memory; cp.async, which fills shared memory from global memory. Each has its
// inline PTX on sm_80 and later and its CPU emulator call under TRIDENT_SIMT (tests/simt).
//
// PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type": in a warp, lane
// = 4 g + t (g = lane / 4 in 0..7, t = lane % 4 in 0..3). Each 32-bit register holds two 16-bit
// elements, the lower-indexed one in the low half.
//   A (16 x 16, row-major), 4 registers: a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1],
//                                         a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9]
//   B (16 x 8, "col": indexed [k][n]), 2 registers: b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g]
//   C, D (16 x 8, f32), 4 registers: c0, c1 = C[g][2t, 2t+1], c2, c3 = C[g+8][2t, 2t+1]
// So the accumulators of two n-adjacent 16 x 8 products, rounded to 16 bits, are exactly the A
// fragment of the 16 x 16 matrix they form: P = softmax(S) feeds P V without leaving registers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "ops/cuda/attention_common.cuh"

namespace trident::cuda::attn::mma {

// D = A B + D for one 16 x 8 x 16 product, f32 accumulators.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(std::is_same_v<T, __half>, "mma_16816: f16 or bf16 operands");
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#elif defined(TRIDENT_SIMT)
  ::simt::mma_m16n8k16(std::is_same_v<T, __nv_bfloat16>, d, a, b0, b1);  // the CPU emulator (tests/simt)
#else
  __trap();  // the host never launches these kernels below sm_80 (attention_mma_supported)
#endif
}

// ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16: four 8 x 8 matrices of 16-bit elements,
// lane 8 i + r giving the (16-byte aligned) address of row r of matrix i; r[i] receives lane
// (g, t)'s piece of matrix i: elements 2t, 2t + 1 of row g, or with Trans, element g of rows 2t
// and 2t + 1. One instruction in place of four 32-bit loads, and the transposed form reads a
// row-major tile along its columns.
template <bool Trans>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  }
#elif defined(TRIDENT_SIMT)
  ::simt::ldmatrix(4, Trans, r, row);
#else
  (void)r;
  (void)row;
  __trap();
#endif
}

// cp.async.cg.shared.global: 16 bytes from global src to shared dst (both 16-byte aligned)
// without passing through registers; when !full the destination gets zeros and src is not read.
// The copy lands once this thread's cp_async_wait covers its group (and other threads see it
// after a barrier behind that wait).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool full) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
               "l"(src), "r"(full ? 16 : 0)
               : "memory");
#elif defined(TRIDENT_SIMT)
  ::simt::cp_async16(dst, src, full ? 16 : 0);
#else
  (void)dst;
  (void)src;
  (void)full;
  __trap();
#endif
}
// cp.async.commit_group: the copies this thread issued since the last commit form a group (an
// empty one when there were none: the kernels commit on every path so that the counts of
// cp_async_wait hold on the last tile too).
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#elif defined(TRIDENT_SIMT)
  ::simt::cp_async_commit();
#endif
}
// cp.async.wait_group N: every group of this thread but the newest N has landed.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#elif defined(TRIDENT_SIMT)
  ::simt::cp_async_wait(N);
#endif
}

// The ldmatrix row each lane addresses for the fragments below, in a 16 x 16 block: A
// fragments (and B fragments read transposed) take matrices in the order (rows 0-7, cols 0-7),
// (8-15, 0-7), (0-7, 8-15), (8-15, 8-15); B fragments of B^T tiles take (0-7, 0-7), (0-7, 8-15),
// (8-15, 0-7), (8-15, 8-15).
__device__ __forceinline__ int a_row(int lane) { return (lane & 7) + (lane & 8); }
__device__ __forceinline__ int a_col(int lane) { return (lane >> 4) * 8; }
__device__ __forceinline__ int bt_row(int lane) { return (lane & 7) + ((lane >> 4) << 3); }
__device__ __forceinline__ int bt_col(int lane) { return lane & 8; }

// The A fragment (layout in the header comment) of the 16 x 16 block of a row-major
// shared-memory matrix (row stride ld elements, a multiple of 8) at `block`.
__device__ __forceinline__ void ldmatrix_a(uint32_t (&a)[4], const uint16_t* block, int ld, int lane) {
  ldmatrix_x4<false>(a, block + a_row(lane) * ld + a_col(lane));
}
// The B fragments of two n-adjacent 16 x 8 products whose B [k][n] is stored transposed, as rows
// n of a row-major matrix (B^T, as K is for Q K^T): b[0], b[1] for columns n 0-7, b[2], b[3] for
// 8-15; `block` is element (n 0, k 0).
__device__ __forceinline__ void ldmatrix_bt(uint32_t (&b)[4], const uint16_t* block, int ld, int lane) {
  ldmatrix_x4<false>(b, block + bt_row(lane) * ld + bt_col(lane));
}
// The same B fragments where B [k][n] is stored as it is, rows k of a row-major matrix (V for
// P V): read transposed; `block` is element (k 0, n 0).
__device__ __forceinline__ void ldmatrix_b(uint32_t (&b)[4], const uint16_t* block, int ld, int lane) {
  ldmatrix_x4<true>(b, block + a_row(lane) * ld + a_col(lane));
}

// Two f32 values rounded to T and packed, lo in the low half.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// The f32 accumulators of two n-adjacent 16 x 8 products (columns 0-7 and 8-15 of a 16 x 16
// block), rounded to M: the A fragment of that block (the layouts in the header comment).
template <typename M>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack2<M>(lo[0], lo[1]);
  a[1] = pack2<M>(lo[2], lo[3]);
  a[2] = pack2<M>(hi[0], hi[1]);
  a[3] = pack2<M>(hi[2], hi[3]);
}

}  // namespace trident::cuda::attn::mma

namespace trident::cuda::attn {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kMmaWarps = 4;
constexpr int kMmaThreads = 32 * kMmaWarps;  // the backward passes' blocks: 64 rows, 16 per warp

template <typename T>
struct MmaType;
template <>
struct MmaType<Half> {
  using type = __half;
};
template <>
struct MmaType<BFloat16> {
  using type = __nv_bfloat16;
};

// Rows [row0, row0 + Rows) x D of one head into dst (row stride ld elements) by cp.async, 16
// bytes at a time, by a block of Threads threads; rows past nrows are zeros. The caller commits
// the group and waits for it.
template <int D, int Rows = kTile, int Threads = kMmaThreads>
__device__ __forceinline__ void async_rows(uint16_t* dst, int ld, const uint16_t* src, int64_t sr, int64_t row0,
                                           int64_t nrows) {
  constexpr int kChunks = D / 8;  // 16-byte pieces per row
  for (int x = static_cast<int>(threadIdx.x); x < Rows * kChunks; x += Threads) {
    const int r = x / kChunks, c = (x % kChunks) * 8;
    const bool in = row0 + r < nrows;
    // A row past the end reads nothing; its address is row 0's, a valid one all the same.
    mma::cp_async16(dst + r * ld + c, src + (in ? (row0 + r) * sr : 0) + c, in);
  }
}

// t's [BH, rows, cols] storage for the kernels (f16/bf16 as raw 16-bit words).
inline Operand<uint16_t> raw_operand(const Tensor& t) {
  return {static_cast<const uint16_t*>(t.data_ptr()), t.stride(0), t.stride(1)};
}

// 16-byte loads need each row of each head to start on a 16-byte boundary.
inline bool aligned16(const Tensor& t) {
  return t.stride(2) == 1 && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && t.stride(1) % 8 == 0 &&
         (t.size(0) <= 1 || t.stride(0) % 8 == 0);
}

}  // namespace trident::cuda::attn
