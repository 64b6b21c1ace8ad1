// The run-time choice of NOTE [AVX-512 kernels] (ops/cpu/isa.h).
#include "ops/cpu/isa.h"

#include <utility>

#include "core/parallel.h"

namespace trident::cpu {
namespace {
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
bool g_avx512_kernels = cpu_has_avx512();
#else
bool g_avx512_kernels = false;
#endif
}  // namespace

bool cpu_avx512_kernels() { return g_avx512_kernels; }

bool set_cpu_avx512_kernels_enabled_for_testing(bool enabled) {
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
  return std::exchange(g_avx512_kernels, enabled && cpu_has_avx512());
#else
  (void)enabled;
  return std::exchange(g_avx512_kernels, false);
#endif
}

}  // namespace trident::cpu
