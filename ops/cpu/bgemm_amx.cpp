#include "ops/cpu/bgemm_amx.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>

#include "core/error.h"
#include "core/half.h"
#include "core/parallel.h"

#include "ops/cpu/amx_internal.h"

namespace trident::cpu {
namespace {
// TRIDENT_CPU_BF16_GEMM: auto (also empty or unset), amx, avx512bf16 or off, parsed once; a bad
// value, or a kernel this CPU lacks, is an error from every bf16 product.
enum class Bf16Choice : uint8_t { Auto, Amx, Avx512Bf16, Off };
Bf16Choice bf16_choice_from_env() {
  const char* v = std::getenv("TRIDENT_CPU_BF16_GEMM");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return Bf16Choice::Auto;
  if (std::strcmp(v, "amx") == 0) return Bf16Choice::Amx;
  if (std::strcmp(v, "avx512bf16") == 0) return Bf16Choice::Avx512Bf16;
  if (std::strcmp(v, "off") == 0) return Bf16Choice::Off;
  TRIDENT_FAIL("TRIDENT_CPU_BF16_GEMM=", v, ": expected auto, amx, avx512bf16 or off (NOTE [AMX bf16 GEMM])");
}
}  // namespace

#ifdef TRIDENT_HAVE_AMX
namespace {
using namespace amx;

constexpr int64_t kBlock = 32;           // C by 32 x 32 blocks: four 16 x 16 f32 tiles
// k in steps of 256 inside each 32 x 32 block: the 32 rows of A and the pair of B panels over
// that range (16 KiB each) stay in L1 while the block's sums run; a row block of A then meets
// kGroup column blocks, whose sums wait in a 16 KiB buffer between the k steps. (The first
// version ran each k step over the whole of C, its partial sums in an f32 buffer of C's size:
// 51 MB for GPT-2's [50304, 256] weight gradient, and DRAM-bound.)
constexpr int64_t kKc = 256, kGroup = 4;
// k beyond this is cut into outer blocks of about this length, the sums kept in f32 between
// them: packed B for one covers at least 256 columns (GPT-2's [1024, 50304] x [50304, 256]
// input gradient read its A eight times over, 1.7x slower, when a column block held all of k).
constexpr int64_t kOuterKc = 2048;
constexpr int64_t kPackedBBytes = int64_t{1} << 20;  // packed B per column block: stays in L2

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

bool cpu_and_kernel_allow_amx() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  if (!(d & (1u << 22)) || !(d & (1u << 24))) return false;  // AMX-BF16, AMX-TILE
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return false;  // the OS saves XTILECFG and XTILEDATA
  // Linux hands out the tile data state on request (arch_prctl(ARCH_REQ_XCOMP_PERM,
  // XFEATURE_XTILEDATA)); the first tile instruction without it kills the process.
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
}

int g_kernel_override = -1;  // set_bf16_gemm_kernel_for_testing: a Bf16Gemm; -1 the default

// Rows [r0, r0 + 32) of A (zero beyond m) and columns [k0, k0 + kc) into dst [32][kcp], zero
// beyond kc.
TRIDENT_AMX void pack_a(bool trans_a, const uint16_t* a, int64_t lda, int64_t m, int64_t r0, int64_t k0, int64_t kc,
                        int64_t kcp, uint16_t* dst) {
  // Only what no copy below writes is zeroed: the columns past kc, the rows past m (zeroing the
  // whole block first wrote each element twice).
  const int64_t rows = std::min(kBlock, m - r0);
  if (!trans_a) {
    for (int64_t i = 0; i < rows; ++i) {
      std::memcpy(dst + i * kcp, a + (r0 + i) * lda + k0, static_cast<size_t>(kc) * sizeof(uint16_t));
      std::memset(dst + i * kcp + kc, 0, static_cast<size_t>(kcp - kc) * sizeof(uint16_t));
    }
    std::memset(dst + rows * kcp, 0, static_cast<size_t>((kBlock - rows) * kcp) * sizeof(uint16_t));
    return;
  }
  // Each half of 16 rows with any row of A is stored whole over k in [0, kcp) (kcp a multiple of
  // 32; zeros past m and kc); a half past m is zeroed.
  if (rows <= 16) std::memset(dst + 16 * kcp, 0, static_cast<size_t>(16 * kcp) * sizeof(uint16_t));
  // A [k, m]: rows k and k + 1 of the stored matrix give, for 16 rows of A at once, the pair each
  // row's tile row holds at k; 16 such pairs (32 values of k) are a 16 x 16 matrix of 32-bit
  // pairs, transposed in registers into 16 tile rows of 64 bytes.
  for (int64_t half = 0; half < 2 && half * 16 < rows; ++half) {
    const __mmask16 valid = first_lanes(rows - half * 16);
    uint16_t* d = dst + half * 16 * kcp;
    for (int64_t k32 = 0; k32 < kc; k32 += 32) {
      __m512i v[16];
      for (int p = 0; p < 16; ++p) {
        const int64_t kk = k32 + 2 * p;
        v[p] = kk < kc ? interleave_rows(a + (k0 + kk) * lda + r0 + half * 16, lda, valid, kk + 1 < kc) : _mm512_setzero_si512();
      }
      transpose16x16(v);
      for (int i = 0; i < 16; ++i) _mm512_store_si512(d + i * kcp + k32, v[i]);
    }
  }
}

// Columns [j0, j0 + 16) of B (zero beyond n) over k in [k0, k0 + kc) into the layout TDPBF16PS
// reads: dst [kcp / 2][16][2], B[k, j] at ((k / 2) * 16 + j) * 2 + k % 2; zero beyond kc.
TRIDENT_AMX void pack_b_panel(bool trans_b, const uint16_t* b, int64_t ldb, int64_t n, int64_t j0, int64_t k0, int64_t kc,
                              int64_t kcp, uint16_t* dst) {
  // Every pair row below kc is stored whole (zeros in the lanes past n), so only the rows from
  // the last pair (an odd kc's, written in part) on are zeroed first (zeroing the whole panel was
  // 3% of a 1024x768 -> 3072 linear).
  const int64_t cols = std::min<int64_t>(16, n - j0);
  const int64_t zero_from = cols > 0 ? (kc & ~int64_t{1}) * 16 : 0;
  std::memset(dst + zero_from, 0, static_cast<size_t>(16 * kcp - zero_from) * sizeof(uint16_t));
  if (cols <= 0) return;
  const __mmask16 valid = first_lanes(cols);
  if (trans_b) {  // B [n, k]: column j of the product is row j of the stored matrix, its pairs adjacent
    const __m512i col_offsets = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                   _mm512_set1_epi32(static_cast<int>(ldb * 2)));
    const uint16_t* src = b + j0 * ldb + k0;
    int64_t kk = 0;
    for (; kk + 1 < kc; kk += 2)
      _mm512_store_si512(dst + kk * 16, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, col_offsets, src + kk, 1));
    for (int64_t jj = 0; kk < kc && jj < cols; ++jj) dst[kk * 16 + jj * 2] = src[jj * ldb + kk];  // an odd k's last
    return;
  }
  for (int64_t kk = 0; kk < kc; kk += 2)
    _mm512_store_si512(dst + kk * 16, interleave_rows(b + (k0 + kk) * ldb + j0, ldb, valid, kk + 1 < kc));
}

// acc [32 x 32 f32, row stride ld floats] (+)= A block [32][s0, s1) x B over the same k, from
// A packed with rows a_ld elements apart and the two packed B panels (k pairs from k = 0).
TRIDENT_AMX void block_product(const uint16_t* ap, int64_t a_ld, const uint16_t* bp0, const uint16_t* bp1, int64_t s0,
                               int64_t s1, float* acc, int64_t ld, bool load_acc) {
  if (load_acc) {
    load_block(acc, ld);
  } else {
    zero_block();
  }
  const int64_t a_bytes = a_ld * static_cast<int64_t>(sizeof(uint16_t));
  for (int64_t s = s0; s < s1; s += 32) block_step(ap + s, ap + 16 * a_ld + s, a_bytes, bp0 + s * 16, bp1 + s * 16, 64);
  store_block(acc, ld);
}

// NOTE [AVX512-BF16 GEMM]: the same 32 x 32 block from the same packed operands with
// VDPBF16PS (Zen 4 and 5, Cooper Lake and later Xeons): four groups of 8 rows x 32 columns, 16
// accumulators of 16 lanes; per pair of k, the two 64-byte pair rows of B and each row's pair of
// A broadcast. The products and sums as AMX's (exact products, f32 sums; subnormals flushed).
#define TRIDENT_DPBF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
TRIDENT_DPBF16 void block_product_dp(const uint16_t* ap, int64_t a_ld, const uint16_t* bp0, const uint16_t* bp1, int64_t s0,
                                     int64_t s1, float* acc, int64_t ld, bool load_acc) {
  for (int64_t rg = 0; rg < kBlock; rg += 8) {
    __m512 c[8][2];
    for (int r = 0; r < 8; ++r) {
      float* row = acc + (rg + r) * ld;
      c[r][0] = load_acc ? _mm512_loadu_ps(row) : _mm512_setzero_ps();
      c[r][1] = load_acc ? _mm512_loadu_ps(row + 16) : _mm512_setzero_ps();
    }
    const uint16_t* a = ap + rg * a_ld;
    for (int64_t s = s0; s < s1; s += 2) {
      const __m512bh b0 = reinterpret_cast<__m512bh>(_mm512_load_si512(bp0 + s * 16));
      const __m512bh b1 = reinterpret_cast<__m512bh>(_mm512_load_si512(bp1 + s * 16));
      for (int r = 0; r < 8; ++r) {
        uint32_t pair;
        std::memcpy(&pair, a + r * a_ld + s, sizeof pair);
        const __m512bh av = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
        c[r][0] = _mm512_dpbf16_ps(c[r][0], av, b0);
        c[r][1] = _mm512_dpbf16_ps(c[r][1], av, b1);
      }
    }
    for (int r = 0; r < 8; ++r) {
      float* row = acc + (rg + r) * ld;
      _mm512_storeu_ps(row, c[r][0]);
      _mm512_storeu_ps(row + 16, c[r][1]);
    }
  }
}

inline void put(float v, float* c) { *c = v; }
inline void put(float v, uint16_t* c) { *c = detail::f32_to_bf16_bits(v); }

// C's rows [r0, r0 + rows) and columns [j0, j0 + cols) from the sums (+ bias), converted once;
// added to C's values when accumulating (f32 C only).
template <typename Out>
TRIDENT_AMX void write_block(const float* acc, int64_t ld, int64_t rows, int64_t cols, const float* bias, Out* c, int64_t ldc,
                             bool accumulate) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* s = acc + i * ld;
    Out* d = c + i * ldc;
    if constexpr (std::is_same_v<Out, float>) {
      if (accumulate) {
        for (int64_t j = 0; j < cols; ++j) d[j] += bias != nullptr ? s[j] + bias[j] : s[j];
        continue;
      }
    }
    if (bias != nullptr) {
      for (int64_t j = 0; j < cols; ++j) put(s[j] + bias[j], d + j);
    } else {
      for (int64_t j = 0; j < cols; ++j) put(s[j], d + j);
    }
  }
}

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
template <typename T>
std::unique_ptr<T[], AlignedFree> aligned_buffer(int64_t count) {
  const size_t bytes = static_cast<size_t>(round_up(count * static_cast<int64_t>(sizeof(T)), 64));
  auto* p = static_cast<T*>(std::aligned_alloc(64, bytes));
  TRIDENT_CHECK(p != nullptr, "gemm_bf16: could not allocate ", bytes, " bytes");
  return std::unique_ptr<T[], AlignedFree>(p);
}

// This thread's packing buffers (packed B, packed A), grown when needed, 64-byte aligned: kept
// between calls, because the small products (attention's, per head and block of queries) would
// otherwise allocate and free them once each, and glibc's trimming of the freed memory (madvise,
// brk) costs TLB shootdowns across the cores.
struct PackBuffers {
  std::unique_ptr<uint16_t[], AlignedFree> buf[2];
  int64_t have[2] = {0, 0};
  uint16_t* get(int slot, int64_t count) {
    if (have[slot] < count) {
      buf[slot].reset();
      buf[slot] = aligned_buffer<uint16_t>(count);
      have[slot] = count;
    }
    return buf[slot].get();
  }
};
thread_local PackBuffers t_pack;

// The blocks of k and of B's columns one call packs B by (NOTE [AMX bf16 GEMM]): outer blocks of
// k of kc_step (a column block of packed B covers one, so a long k would otherwise shrink the
// column blocks and make A stream from memory once per 32 columns), column blocks of nc_step.
struct BBlocks {
  int64_t outer, kc_step, nc_step;
};
BBlocks b_blocks(int64_t n, int64_t k) {
  const int64_t outer = (k + kOuterKc - 1) / kOuterKc;
  const int64_t kc_step = round_up((k + outer - 1) / outer, 32);
  return {outer, kc_step, std::clamp<int64_t>(kPackedBBytes / (kc_step * 2) / kBlock * kBlock, kBlock, round_up(n, kBlock))};
}

// `prepacked`: B already packed (PackedBf16B), one block of k and of columns.
template <bool Amx, typename Out>
void gemm_impl(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
               int64_t ldb, const float* bias, Out* c, int64_t ldc, bool accumulate, const uint16_t* prepacked = nullptr) {
  TRIDENT_CHECK(m > 0 && n > 0 && k > 0, "gemm_bf16: empty product (", m, " x ", k, " x ", n, ")");
  const auto [outer, kc_step, nc_step] = b_blocks(n, k);
  TRIDENT_ASSERT(prepacked == nullptr || (outer == 1 && nc_step >= n), "gemm_bf16: a packed B of ", k, " x ", n,
                 " is not one block");
  uint16_t* const packed_b = prepacked != nullptr ? nullptr : t_pack.get(0, nc_step * kc_step);
  // With several outer blocks, the sums of a column block wait between them in f32 [m][ncp].
  std::unique_ptr<float[], AlignedFree> partial;
  if (outer > 1) partial = aligned_buffer<float>(round_up(m, kBlock) * nc_step);
  const int64_t row_blocks = (m + kBlock - 1) / kBlock;
  for (int64_t j0 = 0; j0 < n; j0 += nc_step) {
    const int64_t nc = std::min(nc_step, n - j0), ncp = round_up(nc, kBlock), col_blocks = ncp / kBlock;
    const int64_t groups = (col_blocks + kGroup - 1) / kGroup;
    for (int64_t ob = 0; ob < outer; ++ob) {
      const int64_t k0 = ob * kc_step, kc = std::min(kc_step, k - k0), kcp = round_up(kc, 32);
      const bool first = ob == 0, last = ob + 1 == outer;
      const uint16_t* pb = prepacked;
      if (pb == nullptr) {
        uint16_t* dst = packed_b;
        parallel_for(0, ncp / 16, 4, [&](int64_t p0, int64_t p1) {
          for (int64_t p = p0; p < p1; ++p) pack_b_panel(trans_b, b, ldb, n, j0 + p * 16, k0, kc, kcp, dst + p * 16 * kcp);
        });
        pb = dst;
      }
      // Items (row block, group of column blocks), row by row: A's rows are packed once per row
      // block a thread meets.
      parallel_for(0, row_blocks * groups, 1, [&](int64_t i0, int64_t i1) {
        uint16_t* const pa = t_pack.get(1, kBlock * kcp);
        alignas(64) float local[kGroup * kBlock * kBlock];
        if constexpr (Amx) load_tile_config();
        int64_t packed_row = -1;
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t rb = i / groups, g = i % groups, r0 = rb * kBlock;
          // A row-major with whole 32-row blocks and k steps is read where it is; otherwise its
          // rows are copied (transposed, zero-padded) once per row block a thread meets.
          const bool direct = !trans_a && kc == kcp && r0 + kBlock <= m;
          const uint16_t* ap = direct ? a + r0 * lda + k0 : pa;
          const int64_t a_ld = direct ? lda : kcp;
          if (!direct && rb != packed_row) {
            pack_a(trans_a, a, lda, m, r0, k0, kc, kcp, pa);
            packed_row = rb;
          }
          const int64_t cb0 = g * kGroup, count = std::min(kGroup, col_blocks - cb0);
          // The group's sums: in `local` with one outer block, else in `partial`.
          float* sums = outer > 1 ? partial.get() + r0 * nc_step + cb0 * kBlock : local;
          const int64_t ld = outer > 1 ? nc_step : count * kBlock;
          // An f32 C without bias, one outer block, a whole 32 x 32 block: the tiles sum into C
          // itself (starting from C's values when accumulating), no copy through `local`.
          const auto c_direct = [&](int64_t c0) {
            if constexpr (std::is_same_v<Out, float>) return outer == 1 && bias == nullptr && r0 + kBlock <= m && c0 + kBlock <= nc;
            return false;
          };
          for (int64_t s0 = 0; s0 < kcp; s0 += kKc) {
            const int64_t s1 = std::min(kcp, s0 + kKc);
            for (int64_t cb = 0; cb < count; ++cb) {
              const int64_t c0 = (cb0 + cb) * kBlock;
              const bool to_c = c_direct(c0);
              float* acc = sums + cb * kBlock;
              int64_t acc_ld = ld;
              if constexpr (std::is_same_v<Out, float>) {
                if (to_c) {
                  acc = c + r0 * ldc + j0 + c0;
                  acc_ld = ldc;
                }
              }
              const bool load = s0 > 0 || !first || (to_c && accumulate);
              if constexpr (Amx) {
                block_product(ap, a_ld, pb + c0 * kcp, pb + (c0 + 16) * kcp, s0, s1, acc, acc_ld, load);
              } else {
                block_product_dp(ap, a_ld, pb + c0 * kcp, pb + (c0 + 16) * kcp, s0, s1, acc, acc_ld, load);
              }
            }
          }
          if (!last) continue;
          for (int64_t cb = 0; cb < count; ++cb) {
            const int64_t c0 = (cb0 + cb) * kBlock;
            if (c_direct(c0)) continue;
            const int64_t rows = std::min(kBlock, m - r0), cols = std::min(kBlock, nc - c0);
            write_block(sums + cb * kBlock, ld, rows, cols, bias != nullptr ? bias + j0 + c0 : nullptr, c + r0 * ldc + j0 + c0,
                        ldc, accumulate);
          }
        }
        if constexpr (Amx) release_tiles();
      });
    }
  }
}

}  // namespace

bool amx_bf16_available() {
  static const bool ok = cpu_and_kernel_allow_amx();
  return ok;
}
bool avx512_bf16_available() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  static const bool ok = cpu_has_avx512() && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));  // AVX512_BF16
  return ok;
}

Bf16Gemm bf16_gemm_kernel() {
  if (g_kernel_override >= 0) return static_cast<Bf16Gemm>(g_kernel_override);
  // A bad TRIDENT_CPU_BF16_GEMM throws here, from every bf16 product (the static is set on
  // success only).
  static const Bf16Gemm chosen = [] {
    switch (bf16_choice_from_env()) {
      case Bf16Choice::Off: return Bf16Gemm::None;
      case Bf16Choice::Amx:
        TRIDENT_CHECK(amx_bf16_available(), "TRIDENT_CPU_BF16_GEMM=amx: this CPU or kernel does not allow AMX-BF16");
        return Bf16Gemm::Amx;
      case Bf16Choice::Avx512Bf16:
        TRIDENT_CHECK(avx512_bf16_available(), "TRIDENT_CPU_BF16_GEMM=avx512bf16: this CPU has no AVX512-BF16");
        return Bf16Gemm::Avx512Bf16;
      case Bf16Choice::Auto: break;
    }
    // AVX512-BF16 only when asked for (NOTE [AVX512-BF16 GEMM]: not yet measured faster than the
    // f32 conversion where it would be chosen).
    return amx_bf16_available() ? Bf16Gemm::Amx : Bf16Gemm::None;
  }();
  return chosen;
}
Bf16Gemm set_bf16_gemm_kernel_for_testing(Bf16Gemm kernel) {
  const Bf16Gemm prev = bf16_gemm_kernel();
  const bool ok = kernel == Bf16Gemm::None || (kernel == Bf16Gemm::Amx && amx_bf16_available()) ||
                  (kernel == Bf16Gemm::Avx512Bf16 && avx512_bf16_available());
  g_kernel_override = static_cast<int>(ok ? kernel : Bf16Gemm::None);
  return prev;
}

namespace {
template <typename Out>
void gemm_dispatch(Bf16Gemm kernel, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a,
                   int64_t lda, const uint16_t* b, int64_t ldb, const float* bias, Out* c, int64_t ldc, bool accumulate,
                   const uint16_t* prepacked = nullptr) {
  if (kernel == Bf16Gemm::Amx) {
    TRIDENT_CHECK(amx_bf16_available(), "gemm_bf16: this CPU or kernel does not allow AMX-BF16");
    return gemm_impl<true>(trans_a, trans_b, m, n, k, a, lda, b, ldb, bias, c, ldc, accumulate, prepacked);
  }
  TRIDENT_CHECK(kernel == Bf16Gemm::Avx512Bf16 && avx512_bf16_available(), "gemm_bf16: no ",
                kernel == Bf16Gemm::None ? "kernel chosen" : "AVX512-BF16 on this CPU");
  gemm_impl<false>(trans_a, trans_b, m, n, k, a, lda, b, ldb, bias, c, ldc, accumulate, prepacked);
}
}  // namespace

void gemm_bf16(Bf16Gemm kernel, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
               const uint16_t* b, int64_t ldb, const float* bias, uint16_t* c, int64_t ldc) {
  gemm_dispatch(kernel, trans_a, trans_b, m, n, k, a, lda, b, ldb, bias, c, ldc, false);
}
void gemm_bf16(Bf16Gemm kernel, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
               const uint16_t* b, int64_t ldb, const float* bias, float* c, int64_t ldc, bool accumulate) {
  gemm_dispatch(kernel, trans_a, trans_b, m, n, k, a, lda, b, ldb, bias, c, ldc, accumulate);
}

bool bf16_b_packs_whole(int64_t n, int64_t k) {
  if (n <= 0 || k <= 0) return false;
  const BBlocks bl = b_blocks(n, k);
  return bl.outer == 1 && bl.nc_step >= n;
}

void PackedBf16B::Free::operator()(uint16_t* p) const { std::free(p); }

void PackedBf16B::pack(bool trans_b, int64_t n, int64_t k, const uint16_t* b, int64_t ldb) {
  TRIDENT_CHECK(bf16_b_packs_whole(n, k), "PackedBf16B: B of ", k, " x ", n, " does not pack as one block");
  TRIDENT_CHECK(avx512_bf16_available() || amx_bf16_available(), "PackedBf16B: no bf16 GEMM kernel on this CPU");
  const int64_t kcp = round_up(k, 32), ncp = round_up(n, kBlock);
  if (capacity_ < ncp * kcp) {
    data_.reset();
    data_.reset(aligned_buffer<uint16_t>(ncp * kcp).release());
    capacity_ = ncp * kcp;
  }
  for (int64_t p = 0; p < ncp / 16; ++p) pack_b_panel(trans_b, b, ldb, n, p * 16, 0, k, kcp, data_.get() + p * 16 * kcp);
  n_ = n;
  k_ = k;
}

namespace {
template <typename Out>
void gemm_packed_dispatch(Bf16Gemm kernel, bool trans_a, int64_t m, const uint16_t* a, int64_t lda, const PackedBf16B& b, Out* c,
                          int64_t ldc, bool accumulate) {
  TRIDENT_CHECK(b.data() != nullptr, "gemm_bf16_packed: B was not packed");
  gemm_dispatch(kernel, trans_a, false, m, b.n(), b.k(), a, lda, nullptr, 0, nullptr, c, ldc, accumulate, b.data());
}
}  // namespace

void gemm_bf16_packed(Bf16Gemm kernel, bool trans_a, int64_t m, const uint16_t* a, int64_t lda, const PackedBf16B& b,
                      uint16_t* c, int64_t ldc) {
  gemm_packed_dispatch(kernel, trans_a, m, a, lda, b, c, ldc, false);
}
void gemm_bf16_packed(Bf16Gemm kernel, bool trans_a, int64_t m, const uint16_t* a, int64_t lda, const PackedBf16B& b, float* c,
                      int64_t ldc, bool accumulate) {
  gemm_packed_dispatch(kernel, trans_a, m, a, lda, b, c, ldc, accumulate);
}

#else  // no AMX or AVX512-BF16 kernels in this build

bool amx_bf16_available() { return false; }
bool avx512_bf16_available() { return false; }
Bf16Gemm bf16_gemm_kernel() {
  static const Bf16Choice choice = bf16_choice_from_env();  // a bad value is still reported, every time
  (void)choice;
  return Bf16Gemm::None;
}
Bf16Gemm set_bf16_gemm_kernel_for_testing(Bf16Gemm) { return Bf16Gemm::None; }
void gemm_bf16(Bf16Gemm, bool, bool, int64_t, int64_t, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t, const float*,
               uint16_t*, int64_t) {
  TRIDENT_FAIL("gemm_bf16: this build has no bf16 GEMM kernels (x86-64 Linux with GCC or Clang only)");
}
void gemm_bf16(Bf16Gemm, bool, bool, int64_t, int64_t, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t, const float*,
               float*, int64_t, bool) {
  TRIDENT_FAIL("gemm_bf16: this build has no bf16 GEMM kernels (x86-64 Linux with GCC or Clang only)");
}
bool bf16_b_packs_whole(int64_t, int64_t) { return false; }
void PackedBf16B::Free::operator()(uint16_t* p) const { std::free(p); }
void PackedBf16B::pack(bool, int64_t, int64_t, const uint16_t*, int64_t) {
  TRIDENT_FAIL("PackedBf16B: this build has no bf16 GEMM kernels (x86-64 Linux with GCC or Clang only)");
}
void gemm_bf16_packed(Bf16Gemm, bool, int64_t, const uint16_t*, int64_t, const PackedBf16B&, uint16_t*, int64_t) {
  TRIDENT_FAIL("gemm_bf16_packed: this build has no bf16 GEMM kernels (x86-64 Linux with GCC or Clang only)");
}
void gemm_bf16_packed(Bf16Gemm, bool, int64_t, const uint16_t*, int64_t, const PackedBf16B&, float*, int64_t, bool) {
  TRIDENT_FAIL("gemm_bf16_packed: this build has no bf16 GEMM kernels (x86-64 Linux with GCC or Clang only)");
}

#endif

}  // namespace trident::cpu
