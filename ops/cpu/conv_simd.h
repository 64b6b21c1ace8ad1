// 8-lane f32 vectors (GCC vector extensions: AVX on x86-64-v3, pairs of SSE registers on the
// baseline) and the register-blocked GEMM micro-kernel shared by the Winograd and blocked
// im2col convolutions (ops/cpu/conv_winograd.cpp, ops/cpu/conv_blocked.cpp). Internal; call
// these only from functions compiled with TRIDENT_CPU_CLONES (NOTE [ISA clones]), which
// inline them.
#pragma once

#include <cstdint>
#include <cstring>

// In a baseline (SSE2) build GCC notes that passing 32-byte vectors changes the ABI. Nothing
// here crosses a boundary between code built for different ISAs: these inline functions are
// only called from the same translation unit's clones, which inline them. (This header is
// included only by the conv kernel files.)
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

constexpr int kMR = 4;  // rows (output channels) of the micro-kernel

// mp[r][0, 8 NV) = sum over k < K of up[k kMR + r] * vp[k (8 NV) + 0 .. 8 NV), r < kMR: a
// kMR x 8 NV block of C = A B with A packed as K columns of kMR and B as K rows of 8 NV. The
// 4 NV accumulators stay in registers; per k it loads NV vectors of B and broadcasts kMR
// entries of A (7 loads for 12 multiply-adds at NV = 3). mp rows are 8 NV apart.
// With Accumulate, mp += instead of =.
template <int NV, bool Accumulate = false>
inline void gemm_kernel(const float* __restrict up, const float* __restrict vp, int64_t K, float* __restrict mp) {
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
  for (int r = 0; r < kMR; ++r)
    for (int v = 0; v < NV; ++v) store8(mp + r * NR + 8 * v, acc[r][v]);
}

}  // namespace trident::cpu::conv_simd
