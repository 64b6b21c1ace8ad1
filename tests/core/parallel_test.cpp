// The thread and BLAS set-up of core/parallel.h.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

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

namespace trident {
namespace {

// NOTE [Dynamic items]: parallel_for_dynamic covers every index once, in chunks of the given
// size (the last shorter), on 1 and 3 threads, whatever the chunk; an exception from one chunk
// reaches the caller.
TEST(Parallel, DynamicChunksCoverTheRangeOnceAndPassExceptionsOn) {
  const int before = get_num_threads();
  for (int threads : {1, 3})
    for (int64_t chunk : {0, 1, 4, 7, 100, 1000}) {
      set_num_threads(threads);
      SCOPED_TRACE(std::to_string(threads) + " threads, chunk " + std::to_string(chunk));
      const int64_t begin = 5, end = 310;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(end));
      std::atomic<int> calls{0}, bad_sizes{0};
      parallel_for_dynamic(begin, end, chunk, [&](int64_t b, int64_t e) {
        calls.fetch_add(1);
        const int64_t c = std::max<int64_t>(chunk, 1);
        if ((b - begin) % c != 0 || (e - b != c && e != end)) bad_sizes.fetch_add(1);
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      for (int64_t i = 0; i < end; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), i < begin ? 0 : 1) << "index " << i;
      const int64_t c = std::max<int64_t>(chunk, 1), n = end - begin;
      EXPECT_EQ(calls.load(), threads == 1 || n <= c ? 1 : (n + c - 1) / c);
      if (threads > 1) {
        EXPECT_EQ(bad_sizes.load(), 0);
      }
    }
  set_num_threads(3);
  EXPECT_THROW(parallel_for_dynamic(0, 1000, 1,
                                    [&](int64_t b, int64_t) {
                                      if (b == 10) throw std::runtime_error("chunk 10");
                                    }),
               std::runtime_error);
  parallel_for_dynamic(0, 0, 4, [](int64_t, int64_t) { FAIL() << "called for an empty range"; });
  set_num_threads(before);
}

}  // namespace
}  // namespace trident
