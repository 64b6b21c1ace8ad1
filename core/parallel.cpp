#include "core/parallel.h"

#include <cblas.h>

#include <atomic>

#include "core/error.h"

namespace trident {

// NOTE [Threads]: OpenMP runs Trident's own loops and OpenBLAS runs GEMM on its own pthreads.
// The two pools never run at once (an op is either a GEMM or a loop), so both are sized to
// the same count: the OpenMP default (OMP_NUM_THREADS, or the cores) unless set_num_threads
// is called. OpenBLAS is told once, on first use, not on every GEMM.
namespace {
std::atomic<int> g_threads{0};
}

int get_num_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    n = omp_get_max_threads();
    int expected = 0;
    if (g_threads.compare_exchange_strong(expected, n)) openblas_set_num_threads(n);
    n = g_threads.load();
  }
  return n;
}

void set_num_threads(int n) {
  TRIDENT_CHECK(n >= 1, "set_num_threads: need at least 1 thread, got ", n);
  g_threads.store(n);
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

}  // namespace trident
