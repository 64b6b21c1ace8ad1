// The thread and BLAS set-up of core/parallel.h.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/parallel.h"

namespace trident {
namespace {

// NOTE [OpenBLAS core]: on a CPU with AVX2 and FMA, OpenBLAS must not run kernels older than
// that (Debian's OpenBLAS takes CPU models newer than itself for SSE3 machines).
TEST(Parallel, BlasKernelsUseTheVectorUnitsTheCpuHas) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) GTEST_SKIP() << "OPENBLAS_CORETYPE is set: the user's choice stands";
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "this CPU has no AVX2 and FMA";
  const std::string core = blas_core();
  for (const char* old : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Sandybridge", "Atom", "Nano",
                          "Opteron", "Barcelona", "Bobcat", "Bulldozer", "Piledriver", "Steamroller", "unknown"})
    EXPECT_NE(core, old) << "OpenBLAS runs its " << core << " kernels on a CPU with AVX2 and FMA";
  EXPECT_EQ(std::getenv("OPENBLAS_CORETYPE"), nullptr) << "the choice must not leave the variable behind";
#else
  GTEST_SKIP() << "OpenBLAS's kernel sets are checked on x86-64 only";
#endif
}

}  // namespace
}  // namespace trident
