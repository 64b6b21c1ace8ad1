#include "core/parallel.h"

#include <cblas.h>

#include <atomic>

#include "core/error.h"

namespace trident {

// NOTE [Threads]: OpenMP runs all of Trident's CPU parallelism, GEMMs included. OpenBLAS is
// set to one thread, once; cpu::gemm (ops/cpu/linalg.cpp) splits a large product into panels
// of rows or columns on OpenMP threads, each panel one single-threaded OpenBLAS call, and a GEMM
// called inside a parallel region (one per attention head, per image) simply runs on its
// thread. So only one pool of threads ever exists: no oversubscription, and no second pool
// spinning against the first between a GEMM and the element-wise loop after it. The count is
// the OpenMP default (OMP_NUM_THREADS, or the cores) unless set_num_threads is called.
namespace {
std::atomic<int> g_threads{0};
thread_local bool t_single_threaded = false;  // NOTE [Single-threaded workers]
}  // namespace

SingleThreadGuard::SingleThreadGuard() : previous_(t_single_threaded) { t_single_threaded = true; }
SingleThreadGuard::~SingleThreadGuard() { t_single_threaded = previous_; }

int get_num_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    n = omp_get_max_threads();
    int expected = 0;
    if (g_threads.compare_exchange_strong(expected, n)) openblas_set_num_threads(1);
    n = g_threads.load();
  }
  return t_single_threaded ? 1 : n;
}

void set_num_threads(int n) {
  TRIDENT_CHECK(n >= 1, "set_num_threads: need at least 1 thread, got ", n);
  g_threads.store(n);
  omp_set_num_threads(n);
  openblas_set_num_threads(1);
}

}  // namespace trident
