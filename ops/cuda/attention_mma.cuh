// Tensor-core building blocks of the f16/bf16 attention kernels (NOTE [Tensor-core attention] in
// ops/cuda/attention_mma_forward.cu): the mma.sync m16n8k16 instruction and the register
// layouts of its fragments, which the kernels index directly.
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

// The 32-bit word at a 16-bit element pointer (even element index: 4-byte aligned).
template <typename T>
__device__ __forceinline__ uint32_t word(const T* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// The A fragment of the 16 x 16 block of a row-major shared-memory matrix (row stride ld
// elements) whose element [0][0] is at `block`, for lane (g, t).
template <typename T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* block, int ld, int g, int t) {
  const T* p = block + g * ld + 2 * t;
  a[0] = word(p);
  a[1] = word(p + 8 * ld);
  a[2] = word(p + 8);
  a[3] = word(p + 8 * ld + 8);
}

// D += A B where B [k][n] is stored transposed, as rows n of a row-major shared-memory matrix
// (stride ld) whose row n holds B[0..15][n] from `block` on: the B fragment is two words of row
// g. This is how K (for Q K^T) and every transposed tile is read.
template <typename M, typename T>
__device__ __forceinline__ void mma_bt(float (&d)[4], const uint32_t (&a)[4], const T* block, int ld, int g, int t) {
  const T* p = block + g * ld + 2 * t;
  mma_16816<M>(d, a, word(p), word(p + 8));
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

constexpr int kMmaWarps = 4;
constexpr int kMmaThreads = 32 * kMmaWarps;  // 64 query rows, 16 per warp
constexpr int kLdV = kTile + 8;              // Vt row stride (elements): 36 words, conflict-free

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

// Rows [row0, row0 + 64) x D of one head into dst (row stride ld elements), 16 bytes at a time;
// rows past nrows are zeros.
template <int D>
__device__ __forceinline__ void load_rows(uint16_t* dst, int ld, const uint16_t* src, int64_t sr, int64_t row0,
                                          int64_t nrows) {
  constexpr int kChunks = D / 8;  // 16-byte pieces per row
  for (int x = static_cast<int>(threadIdx.x); x < kTile * kChunks; x += kMmaThreads) {
    const int r = x / kChunks, c = (x % kChunks) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row0 + r < nrows) v = *reinterpret_cast<const uint4*>(src + (row0 + r) * sr + c);
    *reinterpret_cast<uint4*>(dst + r * ld + c) = v;
  }
}

// The value tile transposed: dst[d][key] (row stride kLdV). Lanes run along the keys, so the
// 16-bit stores of a warp fall on consecutive halves of 16 words.
template <int D>
__device__ __forceinline__ void load_rows_transposed(uint16_t* dst, const uint16_t* src, int64_t sr, int64_t row0,
                                                     int64_t nrows) {
  constexpr int kChunks = D / 8;
  for (int x = static_cast<int>(threadIdx.x); x < kTile * kChunks; x += kMmaThreads) {
    const int r = x % kTile, c = (x / kTile) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row0 + r < nrows) v = *reinterpret_cast<const uint4*>(src + (row0 + r) * sr + c);
    const uint16_t* e = reinterpret_cast<const uint16_t*>(&v);
#pragma unroll
    for (int i = 0; i < 8; ++i) dst[(c + i) * kLdV + r] = e[i];
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
