// Which f32 GEMM cpu::gemm runs a product on (ops/cpu/sgemm.h): Trident's AVX-512 one (NOTE
// [AVX-512 SGEMM]), its AVX2 one (NOTE [AVX2 SGEMM]) or OpenBLAS.
#include "ops/cpu/sgemm.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/cpu/sgemm_blocks.h"

namespace trident::cpu {
namespace {
int g_preference = -1;  // set_sgemm_preference_for_testing
constexpr int64_t kAvx512TileRows = 8, kAvx512TileColumns = 48;  // sgemm_avx512's tile of C
constexpr int64_t kAvx2MaxK = 256;                                // NOTE [AVX2 SGEMM]

// Whether the CPU is an AMD of family 0x19 (Zen 3 and 4; of those only Zen 4 has AVX-512, which
// it executes as two 256-bit halves). Zen 5 (family 0x1A) runs 512 bits at once.
bool amd_family_19h() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool zen4 = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return false;
    const bool amd = ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163;  // "AuthenticAMD"
    if (!amd || __get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    unsigned family = (eax >> 8) & 0xF;
    if (family == 0xF) family += (eax >> 20) & 0xFF;
    return family == 0x19;
  }();
  return zen4;
#else
  return false;
#endif
}

// TRIDENT_CPU_SGEMM as read once: 1 trident, 0 openblas, -1 auto.
int env_choice() {
  static const int env = sgemm_choice_from_env(std::getenv("TRIDENT_CPU_SGEMM"));
  return env;
}

bool avx512_wanted(int64_t m, int64_t n, int64_t k) {
  // Products thinner than a tile (a row vector times a matrix in token-by-token generation) would
  // spend most of each 8 x 48 tile on padding.
  if (m < kAvx512TileRows || n < 16 || k < 8) return g_preference == 1;
  if (g_preference >= 0) return g_preference == 1;
  if (env_choice() >= 0) return env_choice() == 1;
  static const bool blas_avx512 = blas_core_has_avx512();
  if (!blas_avx512) return true;
  // OpenBLAS runs its AVX-512 kernels: on a large-L2 CPU this GEMM is still the faster one where
  // its 48-column tiles are at least 85% full, and on Zen 4 where they are, m is at least 512
  // and k at least 256 (NOTE [AVX-512 SGEMM]).
  const int64_t padded = (n + kAvx512TileColumns - 1) / kAvx512TileColumns * kAvx512TileColumns;
  const bool full = n * 20 >= padded * 17;
  if (sgemm_detail::large_l2()) return full;
  return amd_family_19h() && full && m >= 512 && k >= 256;
}

bool avx2_wanted(int64_t m, int64_t n, int64_t k) {
  if (m < 4 || n < 8 || k < 8) return g_preference == 1;
  if (g_preference >= 0) return g_preference == 1;
  if (env_choice() >= 0) return env_choice() == 1;
  // OpenBLAS's AVX-512 kernels outrun any AVX2 one.
  static const bool blas_avx512 = blas_core_has_avx512();
  return !blas_avx512 && k <= kAvx2MaxK;
}
}  // namespace

int set_sgemm_preference_for_testing(int mode) { return std::exchange(g_preference, mode < 0 ? -1 : mode > 0 ? 1 : 0); }

int sgemm_choice_from_env(const char* value) {
  if (value == nullptr || value[0] == '\0' || std::strcmp(value, "auto") == 0) return -1;
  if (std::strcmp(value, "trident") == 0) return 1;
  if (std::strcmp(value, "openblas") == 0) return 0;
  TRIDENT_FAIL("TRIDENT_CPU_SGEMM=", value, ": expected trident, openblas or auto");
}

Sgemm sgemm_kernel_for(int64_t m, int64_t n, int64_t k) {
  if (sgemm_avx512_available()) return avx512_wanted(m, n, k) ? Sgemm::Avx512 : Sgemm::OpenBlas;
  if (sgemm_avx2_available() && avx2_wanted(m, n, k)) return Sgemm::Avx2;
  return Sgemm::OpenBlas;
}

}  // namespace trident::cpu
