// What the AMX kernels share (NOTE [AMX bf16 GEMM], NOTE [AMX direct convolution]): whether this
// build can have them (TRIDENT_HAVE_AMX), the tile configuration, and the AVX-512 shuffles that
// lay bf16 pairs out for TDPBF16PS. Internal to ops/cpu/bgemm_amx.cpp and ops/cpu/conv_amx.cpp.
#pragma once

#include <cstdint>

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__CUDACC__) && defined(__has_include)
#if __has_include(<amxtileintrin.h>)
#define TRIDENT_HAVE_AMX 1
#endif
#endif

#ifdef TRIDENT_HAVE_AMX
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
// GCC 12's AVX-512 shuffles pass an undefined vector as their unused merge operand, and its
// -Wmaybe-uninitialized reports that undefined value once inlined (GCC bug 105593, fixed in 13);
// the sanitizers' build reports it as -Wuninitialized (transpose16x16's unpacks).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#endif

#ifdef TRIDENT_HAVE_AMX
namespace trident::cpu::amx {

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

#define TRIDENT_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq")))

// Eight tiles of 16 rows x 64 bytes: 0-3 the f32 sums of a 32 x 32 block, 4-5 A's two 16-row
// halves, 6-7 B's two 16-column panels.
TRIDENT_AMX inline void load_tile_config() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  // GCC 12's _tile_loadconfig names too little of the struct as its input, so the stores of the
  // sizes were dropped as dead: name all 64 bytes.
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

TRIDENT_AMX inline void release_tiles() { _tile_release(); }

// The 32 x 32 f32 block in tiles 0-3 (rows 0-15 | 16-31 by columns 0-15 | 16-31), in memory at c
// with rows ld floats apart: zeroed, loaded, stored.
TRIDENT_AMX inline void zero_block() {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}
TRIDENT_AMX inline void load_block(const float* c, int64_t ld) {
  const int stride = static_cast<int>(ld * 4);
  _tile_loadd(0, c, stride);
  _tile_loadd(1, c + 16, stride);
  _tile_loadd(2, c + 16 * ld, stride);
  _tile_loadd(3, c + 16 * ld + 16, stride);
}
TRIDENT_AMX inline void store_block(float* c, int64_t ld) {
  const int stride = static_cast<int>(ld * 4);
  _tile_stored(0, c, stride);
  _tile_stored(1, c + 16, stride);
  _tile_stored(2, c + 16 * ld, stride);
  _tile_stored(3, c + 16 * ld + 16, stride);
}
// One step of 32 k: the block += A's two 16-row halves (a0, a1: rows of 32 bf16, a_stride bytes
// apart) times B's two 16-column panels (b0, b1: 16 rows of pairs, b_stride bytes apart).
TRIDENT_AMX inline void block_step(const uint16_t* a0, const uint16_t* a1, int64_t a_stride, const uint16_t* b0,
                                   const uint16_t* b1, int64_t b_stride) {
  _tile_loadd(4, a0, static_cast<int>(a_stride));
  _tile_loadd(5, a1, static_cast<int>(a_stride));
  _tile_loadd(6, b0, static_cast<int>(b_stride));
  _tile_loadd(7, b1, static_cast<int>(b_stride));
  _tile_dpbf16ps(0, 4, 6);
  _tile_dpbf16ps(1, 4, 7);
  _tile_dpbf16ps(2, 5, 6);
  _tile_dpbf16ps(3, 5, 7);
}

// 16 pairs (row k, row k + 1) of a row-major matrix, columns [0, cols) from `src` (16-bit
// elements, rows `ld` apart; row k + 1 only when has_hi): element j of the result holds column
// j's pair, row k in the low half.
TRIDENT_AMX inline __m512i interleave_rows(const uint16_t* src, int64_t ld, __mmask16 cols, bool has_hi) {
  // (The zero-masking forms: GCC 12 warns that the plain ones' undefined pass-through may be
  // used uninitialized.)
  const __m512i lo = _mm512_maskz_cvtepu16_epi32(cols, _mm256_maskz_loadu_epi16(cols, src));
  if (!has_hi) return lo;
  const __m512i hi = _mm512_maskz_cvtepu16_epi32(cols, _mm256_maskz_loadu_epi16(cols, src + ld));
  return _mm512_or_si512(lo, _mm512_maskz_slli_epi32(cols, hi, 16));
}
inline __mmask16 first_lanes(int64_t count) { return count >= 16 ? __mmask16(0xffff) : __mmask16((1u << count) - 1u); }

// v[i] element j -> v[j] element i, for 32-bit elements: pairs of rows interleaved, then groups
// of four, then the 128-bit lanes gathered.
TRIDENT_AMX inline void transpose16x16(__m512i v[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // u[i + c], lane L: column 4 L + c of rows i..i+3
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int c = 0; c < 4; ++c) {  // column 4 L + c: lane L of u[c], u[4 + c], u[8 + c], u[12 + c]
    const __m512i p_lo = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44), p_hi = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);
    const __m512i q_lo = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44), q_hi = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
    v[c] = _mm512_shuffle_i32x4(p_lo, q_lo, 0x88);
    v[4 + c] = _mm512_shuffle_i32x4(p_lo, q_lo, 0xDD);
    v[8 + c] = _mm512_shuffle_i32x4(p_hi, q_hi, 0x88);
    v[12 + c] = _mm512_shuffle_i32x4(p_hi, q_hi, 0xDD);
  }
}

}  // namespace trident::cpu::amx
#endif
