// 8-lane f32 vectors (GCC vector extensions: AVX on x86-64-v3, pairs of SSE registers on the
// baseline) and the register-blocked GEMM micro-kernel shared by the Winograd and blocked
// im2col convolutions (ops/cpu/conv_winograd.cpp, ops/cpu/conv_blocked.cpp,
// ops/cpu/conv_winograd7.cpp); the direct kernels (ops/cpu/conv_direct.cpp) use its 16-lane
// type, the AVX-512 SGEMM (ops/cpu/sgemm_avx512.cpp) its 8 x 8 transpose, max_pool2d
// (ops/cpu/pool.cpp) its deinterleave2, the small-m SGEMM (ops/cpu/gemv.cpp) its vectors. Internal; call these only from functions compiled with
// TRIDENT_CPU_CLONES (NOTE [ISA clones]) or a target attribute, which inline them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/parallel.h"
#include "ops/cpu/isa.h"

// In a baseline (SSE2) build GCC notes that passing 32-byte vectors changes the ABI. Nothing
// here crosses a boundary between code built for different ISAs: these inline functions are
// only called from the same translation unit's clones or target functions, which inline them.
// (This header is included only by the CPU kernel files named above.)
#pragma GCC diagnostic ignored "-Wpsabi"

namespace trident::cpu::conv_simd {

using v8f = float __attribute__((vector_size(32)));
using v8i = int32_t __attribute__((vector_size(32)));

inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, const v8f& v) { std::memcpy(p, &v, sizeof v); }
inline v8f splat(float s) { return v8f{s, s, s, s, s, s, s, s}; }

// The even (Odd = 0) or odd (Odd = 1) elements of the 16 floats a, b, in order: a shuffle
// within 128-bit lanes, then one of 64-bit pairs across them (vshufps, vpermpd on AVX2: two
// shuffles, where the one-step __builtin_shuffle becomes two vpermd and a blend).
template <int Odd>
inline v8f alternate8(v8f a, v8f b) {
  using v4d = double __attribute__((vector_size(32)));
  const v8f t = __builtin_shufflevector(a, b, Odd, 2 + Odd, 8 + Odd, 10 + Odd, 4 + Odd, 6 + Odd, 12 + Odd, 14 + Odd);
  v4d d;
  std::memcpy(&d, &t, sizeof d);
  d = __builtin_shufflevector(d, d, 0, 2, 1, 3);
  v8f r;
  std::memcpy(&r, &d, sizeof r);
  return r;
}

// even[i] = src[2 i], odd[i] = src[2 i + 1] for the n elements of src: 16 at a time with two
// loads, four shuffles and two stores, then 8 with one of each, the last 7 at most one by one.
inline void deinterleave2(const float* src, int64_t n, float* even, float* odd) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const v8f a = load8(src + i), b = load8(src + i + 8);
    store8(even + i / 2, alternate8<0>(a, b));
    store8(odd + i / 2, alternate8<1>(a, b));
  }
  if (i + 8 <= n) {  // 8 more: evens to the low half, odds to the high half, 4 floats each
    const v8f v = load8(src + i);
    const v8f s = __builtin_shufflevector(v, v, 0, 2, 4, 6, 1, 3, 5, 7);
    float h[8];
    std::memcpy(h, &s, sizeof s);
    std::memcpy(even + i / 2, h, 4 * sizeof(float));
    std::memcpy(odd + i / 2, h + 4, 4 * sizeof(float));
    i += 8;
  }
  for (; i < n; ++i) (i % 2 == 0 ? even : odd)[i / 2] = src[i];
}

// The two-vector shuffles of the transposes below: interleave the low / high pairs of two
// vectors' 128-bit halves (unpack), take 64-bit pairs (shuffle), join 128-bit halves (permute).
// __builtin_shufflevector with constant lanes, which GCC (12 on) and Clang both have (GCC's
// __builtin_shuffle with a mask vector is GCC's alone); the same instructions either way.
inline v8f unpack_lo(v8f a, v8f b) { return __builtin_shufflevector(a, b, 0, 8, 1, 9, 4, 12, 5, 13); }
inline v8f unpack_hi(v8f a, v8f b) { return __builtin_shufflevector(a, b, 2, 10, 3, 11, 6, 14, 7, 15); }
inline v8f pairs02(v8f a, v8f b) { return __builtin_shufflevector(a, b, 0, 1, 8, 9, 4, 5, 12, 13); }
inline v8f pairs13(v8f a, v8f b) { return __builtin_shufflevector(a, b, 2, 3, 10, 11, 6, 7, 14, 15); }
inline v8f halves02(v8f a, v8f b) { return __builtin_shufflevector(a, b, 0, 1, 2, 3, 8, 9, 10, 11); }
inline v8f halves13(v8f a, v8f b) { return __builtin_shufflevector(a, b, 4, 5, 6, 7, 12, 13, 14, 15); }

// The 4 x 8 matrix v (4 rows of 8) stored column by column: d, 32 floats, holds v[0][j],
// v[1][j], v[2][j], v[3][j] for j = 0, 1, ..., 7 (d[q] columns 2q and 2q + 1).
inline void columns_of_4x8(const v8f* v, v8f* d) {
  const v8f t0 = unpack_lo(v[0], v[1]), t1 = unpack_hi(v[0], v[1]);
  const v8f t2 = unpack_lo(v[2], v[3]), t3 = unpack_hi(v[2], v[3]);
  const v8f u0 = pairs02(t0, t2), u1 = pairs13(t0, t2);  // columns 0 | 4, 1 | 5
  const v8f u2 = pairs02(t1, t3), u3 = pairs13(t1, t3);  // columns 2 | 6, 3 | 7
  d[0] = halves02(u0, u1);
  d[1] = halves02(u2, u3);
  d[2] = halves13(u0, u1);
  d[3] = halves13(u2, u3);
}

// d[j][q] = v[q][j]: the 8x8 transpose (unpack, shuffle and 128-bit permute steps).
inline void transpose_8x8(const v8f* v, v8f* d) {
  v8f t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = unpack_lo(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = unpack_hi(v[2 * i], v[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = pairs02(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = pairs13(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = pairs02(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = pairs13(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    d[j] = halves02(u[j], u[4 + j]);
    d[j + 4] = halves13(u[j], u[4 + j]);
  }
}

constexpr int kMR = 4;  // rows (output channels) of the micro-kernel

// NOTE [AVX-512 micro-kernel]: the kernel below is written for 8-lane (AVX2) vectors, and the
// blocks it fills are 8 NV = 8, 16 or 24 outputs wide (4 x 3 accumulators fill AVX2's 16
// registers). On a CPU with AVX-512 the same packed layouts go to gemm_kernel_avx512: each
// row's outputs in 16-lane accumulators, plus an 8-lane one for the last 8 when NV is odd
// (sharing its broadcast A entry: the low half of the same register). With 32 registers it can
// hold more, so there the Winograd and blocked convolutions use blocks of 48 outputs (NV = 6,
// conv_simd::widest_nv()) and take the output blocks two at a time (gemm_rows ->
// gemm_kernel_avx512 with Blocks = 2): 8 rows x 3 vectors = 24 accumulators, and per k step 3 loads of B
// and 8 broadcasts for 24 multiply-adds, where the AVX2 kernel does 3 and 4 for 12 half-width
// ones. Measured alone (one thread, K = 128, 32 output blocks of one B, an Emerald Rapids Xeon,
// best of 5, three runs agreeing within 5%): the AVX2 kernel at NV = 3 87 GFLOP/s; the 4-row
// AVX-512 one 97 / 110 / 143 / 165 at NV = 2 / 3 / 4 / 6; two blocks at a time 154 / 130 / 170
// / 171 (the 8-row form matters most when other work competes for L1: 135 against 121 at NV =
// 6 in an earlier, busier run). The functions are compiled for x86-64-v4 by their target
// attribute (never inlined into the AVX2 callers) and chosen at run time;
// set_cpu_avx512_kernels_enabled_for_testing(false) (ops/cpu/isa.h) forces the AVX2
// kernel and its block widths.
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
using v16f = float __attribute__((vector_size(64)));

// Blocks (1 or 2) blocks of 4 rows against the same B: A panels up0 (rows 0-3) and up1 (rows
// 4-7, Blocks = 2 only), rows 0-3 to mp0 and 4-7 to mp1 (each 4 rows 8 NV apart). With two,
// every B vector loaded serves 8 rows: at NV = 6 a k step is 3 loads and 8 broadcasts for 24
// multiply-adds with 24 accumulators.
template <int NV, bool Accumulate, int Blocks = 1>
__attribute__((TRIDENT_TARGET_V4, noinline)) void gemm_kernel_avx512(const float* __restrict up0, const float* __restrict up1,
                                                                            const float* __restrict vp, int64_t K,
                                                                            float* __restrict mp0, float* __restrict mp1) {
  constexpr int NR = 8 * NV, NZ = NV / 2, NY = NV % 2, R = Blocks * kMR;
  static_assert(Blocks == 1 || Blocks == 2, "one or two blocks of 4 rows");
  static_assert(R * (NZ + NY) <= 28, "the accumulators, B and the broadcast must fit in 32 registers");
  v16f accz[R][NZ > 0 ? NZ : 1];
  v8f accy[R];
  for (int r = 0; r < R; ++r) {
    const float* m = (r < kMR ? mp0 : mp1) + (r % kMR) * NR;
    for (int z = 0; z < NZ; ++z) {
      if (Accumulate) {
        std::memcpy(&accz[r][z], m + 16 * z, sizeof(v16f));
      } else {
        accz[r][z] = v16f{};
      }
    }
    accy[r] = NY && Accumulate ? load8(m + 16 * NZ) : v8f{};
  }
  for (int64_t k = 0; k < K; ++k) {
    v16f b[NZ > 0 ? NZ : 1];
    for (int z = 0; z < NZ; ++z) std::memcpy(&b[z], vp + k * NR + 16 * z, sizeof(v16f));
    const v8f y = NY ? load8(vp + k * NR + 16 * NZ) : v8f{};
    for (int r = 0; r < R; ++r) {
      // Written out lane by lane so that it is one broadcast load (v16f{} + s would add 0.0f).
      const float s = r < kMR ? up0[k * kMR + r] : up1[k * kMR + r - kMR];
      const v16f a = {s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s};
      for (int z = 0; z < NZ; ++z) accz[r][z] += a * b[z];
      if (NY) accy[r] += __builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7) * y;
    }
  }
  for (int r = 0; r < R; ++r) {
    float* m = (r < kMR ? mp0 : mp1) + (r % kMR) * NR;
    for (int z = 0; z < NZ; ++z) std::memcpy(m + 16 * z, &accz[r][z], sizeof(v16f));
    if (NY) store8(m + 16 * NZ, accy[r]);
  }
}
#endif

// mp[r][0, 8 NV) = sum over k < K of up[k kMR + r] * vp[k (8 NV) + 0 .. 8 NV), r < kMR: a
// kMR x 8 NV block of C = A B with A packed as K columns of kMR and B as K rows of 8 NV. The
// 4 NV accumulators stay in registers; per k it loads NV vectors of B and broadcasts kMR
// entries of A (7 loads for 12 multiply-adds at NV = 3). mp rows are 8 NV apart.
// With Accumulate, mp += instead of =. On AVX-512 CPUs gemm_kernel_avx512 runs instead.
template <int NV, bool Accumulate = false>
inline void gemm_kernel(const float* __restrict up, const float* __restrict vp, int64_t K, float* __restrict mp) {
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
  if (NV >= 2 && cpu_avx512_kernels()) return gemm_kernel_avx512<NV, Accumulate>(up, nullptr, vp, K, mp, nullptr);
#endif
  constexpr int NR = 8 * NV;
  v8f acc[kMR][NV];
  for (int r = 0; r < kMR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = Accumulate ? load8(mp + r * NR + 8 * v) : splat(0.0f);
  for (int64_t k = 0; k < K; ++k) {
    v8f b[NV];
    for (int v = 0; v < NV; ++v) b[v] = load8(vp + k * NR + 8 * v);
    for (int r = 0; r < kMR; ++r) {
      const v8f a = splat(up[k * kMR + r]);
      for (int v = 0; v < NV; ++v) acc[r][v] += a * b[v];
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kMR; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) store8(mp + r * NR + 8 * v, acc[r][v]);
}

// Blocks ob0 <= ob < ob1 of 4 rows against the same B (vp, K rows of 8 NV): A panel up(ob),
// result block mp(ob). With the AVX-512 kernel, two blocks at a time (gemm_kernel_avx512<.., 2>).
template <int NV, bool Accumulate, typename Up, typename Mp>
inline void gemm_rows(int64_t ob0, int64_t ob1, const float* vp, int64_t K, const Up& up, const Mp& mp) {
  int64_t ob = ob0;
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
  if (NV >= 2 && cpu_avx512_kernels())
    for (; ob + 1 < ob1; ob += 2) gemm_kernel_avx512<NV, Accumulate, 2>(up(ob), up(ob + 1), vp, K, mp(ob), mp(ob + 1));
#endif
  for (; ob < ob1; ++ob) gemm_kernel<NV, Accumulate>(up(ob), vp, K, mp(ob));
}

// The widest blocks the micro-kernel in use runs at full speed: 8 NV outputs with NV = 6 for
// the AVX-512 kernel (three 16-lane vectors per row), 3 for the AVX2 one (whose 16 registers
// hold 4 x 3 accumulators).
inline int widest_nv() {
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
  if (cpu_avx512_kernels()) return 6;
#endif
  return 3;
}

// ---- Either vector width: 8 lanes, or 16 in code compiled for AVX-512 ----------------------
// The depthwise and F(2, 7) kernels are written once over Vec = v8f or v16f; the v16f forms
// are called only from functions compiled for x86-64-v4 (TRIDENT_CPU_AVX512 or a target
// attribute), which inline them.
template <typename Vec>
constexpr int kLanes = static_cast<int>(sizeof(Vec) / sizeof(float));

template <typename Vec>
inline Vec vload(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename Vec>
inline void vstore(float* p, const Vec& v) {
  std::memcpy(p, &v, sizeof v);
}

template <typename Vec>
inline Vec vsplat(float s) {
  return splat(s);
}

// dst[0, n) = the first n lanes of v (0 < n < L).
template <typename Vec>
inline void store_first(float* dst, const Vec& v, int64_t n) {
  alignas(sizeof(Vec)) float tmp[kLanes<Vec>];
  std::memcpy(tmp, &v, sizeof v);
  for (int64_t i = 0; i < n; ++i) dst[i] = tmp[i];
}

// dst[0, n) = src[0, n), which do not overlap: whole vectors, then (16 lanes) one masked move.
// (GCC's own loop for a short row, 28 floats, guarded by an overlap check and ending in scalar
// moves, took a quarter of the 5x5 depthwise forward pass.)
template <typename Vec>
inline void copy_floats(float* __restrict dst, const float* __restrict src, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

// even[i] = src[2 i], odd[i] = src[2 i + 1] for the n elements of src (deinterleave2 above;
// 16 lanes: 32 elements per step, and a tail of masked moves).
template <typename Vec>
inline void deinterleave2_vec(const float* src, int64_t n, float* even, float* odd) {
  deinterleave2(src, n, even, odd);
}

// dst[0, n) = lanes [first, first + n) of the NV vectors y taken as one row of NV L floats.
template <typename Vec, int NV>
inline void store_lanes(float* dst, const Vec (&y)[NV], int64_t first, int64_t n) {
  alignas(sizeof(Vec)) float tmp[NV * kLanes<Vec>];
  std::memcpy(tmp, y, sizeof tmp);
  for (int64_t i = 0; i < n; ++i) dst[i] = tmp[first + i];
}

#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
// (From the intrinsic: GCC assembles a 16-lane initializer list of one variable lane by lane,
// 16 masked broadcasts.)
template <>
__attribute__((TRIDENT_TARGET_V4)) inline v16f vsplat<v16f>(float s) {
  const __m512 v = _mm512_set1_ps(s);
  v16f r;
  std::memcpy(&r, &v, sizeof r);
  return r;
}

template <>
__attribute__((TRIDENT_TARGET_V4)) inline void store_first<v16f>(float* dst, const v16f& v, int64_t n) {
  __m512 m;
  std::memcpy(&m, &v, sizeof m);
  _mm512_mask_storeu_ps(dst, static_cast<__mmask16>((1u << n) - 1), m);
}

// (The empty asm keeps GCC from recognizing the loop as a copy and calling memmove instead:
// a call and a vzeroupper for the one or two vectors of a typical row, 8% of the 5x5 depthwise
// forward pass.)
template <>
__attribute__((TRIDENT_TARGET_V4)) inline void copy_floats<v16f>(float* __restrict dst, const float* __restrict src,
                                                                        int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(dst + i, _mm512_loadu_ps(src + i));
    asm("" : "+r"(i));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_maskz_loadu_ps(m, src + i));
  }
}

// Two loads, two two-source permutes and two stores per 32 elements; the last 1 to 31 by the
// same with masked loads and stores (the 8-lane form takes 7 shuffles and 8 stores, its tail
// through a stack copy, for a 56-float row where this takes 4 of each). The copy is bound by
// its stores either way (17-19 cycles a 56-float row in L1 on Zen 4): no gain measured beyond
// the noise in the depthwise forward pass, kept for its fewer instructions.
template <>
__attribute__((TRIDENT_TARGET_V4)) inline void deinterleave2_vec<v16f>(const float* src, int64_t n, float* even,
                                                                         float* odd) {
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a = _mm512_loadu_ps(src + i), b = _mm512_loadu_ps(src + i + 16);
    _mm512_storeu_ps(even + i / 2, _mm512_permutex2var_ps(a, ev, b));
    _mm512_storeu_ps(odd + i / 2, _mm512_permutex2var_ps(a, od, b));
  }
  if (i < n) {
    const int64_t r = n - i;  // 1 to 31
    const auto mask = [](int64_t lanes) { return static_cast<__mmask16>((1u << lanes) - 1); };
    const __m512 a = _mm512_maskz_loadu_ps(mask(std::min<int64_t>(r, 16)), src + i);
    const __m512 b = _mm512_maskz_loadu_ps(mask(std::max<int64_t>(r - 16, 0)), src + i + 16);
    _mm512_mask_storeu_ps(even + i / 2, mask((r + 1) / 2), _mm512_permutex2var_ps(a, ev, b));
    _mm512_mask_storeu_ps(odd + i / 2, mask(r / 2), _mm512_permutex2var_ps(a, od, b));
  }
}

// Each 16 lanes from the two vectors they straddle by one two-source permute, then one masked
// store: no round trip through memory (a copy out of a stored row is a load across two stores,
// which store forwarding cannot serve).
template <int NV>
__attribute__((TRIDENT_TARGET_V4)) inline void store_lanes(float* dst, const v16f (&y)[NV], int64_t first, int64_t n) {
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t e = 0; e < n; e += 16) {
    const int64_t at = first + e, v = at / 16, shift = at % 16, left = std::min<int64_t>(16, n - e);
    __m512 lo, hi;
    std::memcpy(&lo, &y[v], sizeof lo);
    std::memcpy(&hi, &y[v + 1 < NV ? v + 1 : v], sizeof hi);
    const __m512 r = _mm512_permutex2var_ps(lo, _mm512_add_epi32(iota, _mm512_set1_epi32(static_cast<int>(shift))), hi);
    _mm512_mask_storeu_ps(dst + e, static_cast<__mmask16>((1u << left) - 1), r);
  }
}
#endif

}  // namespace trident::cpu::conv_simd
