// Intra-op parallelism on the CPU (OpenMP underneath). OpenBLAS keeps its own threads; the
// count of both is set once, by set_num_threads (NOTE [Threads] in core/parallel.cpp).
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>

namespace trident {

// The threads Trident's ops use: 1 on a thread inside a SingleThreadGuard.
int get_num_threads();
void set_num_threads(int n);

// The name of the kernel set OpenBLAS runs ("SkylakeX", "Haswell", "Zen", ...), after Trident's
// check that it fits the CPU (NOTE [OpenBLAS core] in core/parallel.cpp).
const char* blas_core();
// Whether that kernel set uses AVX-512 (SkylakeX, Cooperlake, SapphireRapids).
bool blas_core_has_avx512();
// Whether the CPU has AVX-512 F, CD, BW, DQ and VL (x86-64-v4's set); false off x86-64.
bool cpu_has_avx512();
// TRIDENT_CPU_AVX512 (NOTE [AVX-512 kernels] in ops/cpu/isa.h): false for "off" (Trident's
// AVX-512 kernels stay off for the process: the AVX2 forms run, as on a CPU without AVX-512),
// true for "auto", empty or unset (the CPU decides); any other value is an error naming the
// variable.
bool avx512_choice_from_env(const char* value);
// That choice for this process's TRIDENT_CPU_AVX512. A value that is neither off nor auto
// counts as auto here and is reported by every op from the first on (get_num_threads throws).
bool avx512_allowed_by_env();

// NOTE [Single-threaded workers]: while alive, ops called on this thread run on it alone
// (get_num_threads() is 1 here). The data loader's workers hold one, as PyTorch's DataLoader
// workers call torch.set_num_threads(1): N workers each starting a team of OpenMP threads for
// a collate or an augmentation would put N times the cores' worth of threads on the machine.
class SingleThreadGuard {
 public:
  SingleThreadGuard();
  ~SingleThreadGuard();
  SingleThreadGuard(const SingleThreadGuard&) = delete;
  SingleThreadGuard& operator=(const SingleThreadGuard&) = delete;

 private:
  bool previous_;
};

// Runs f(b, e) over disjoint chunks covering [begin, end), in parallel when the range is
// larger than `grain` elements. Exceptions thrown by f reach the caller.
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  const int max_threads = get_num_threads();
  if (n <= grain || max_threads <= 1 || omp_in_parallel()) {
    f(begin, end);
    return;
  }
  const int64_t want = std::min<int64_t>(max_threads, (n + grain - 1) / std::max<int64_t>(grain, 1));
  std::exception_ptr error;
#pragma omp parallel num_threads(static_cast<int>(want))
  {
    const int64_t nt = omp_get_num_threads();
    const int64_t tid = omp_get_thread_num();
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t b = begin + tid * chunk;
    const int64_t e = std::min(end, b + chunk);
    if (b < e) {
      try {
        f(b, e);
      } catch (...) {
#pragma omp critical(trident_parallel_for_error)
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

// Like parallel_for, but the range goes out `chunk` elements at a time to whichever thread asks
// next (an atomic counter), so a thread whose core runs slow (a busy neighbour on a shared VM)
// takes fewer chunks instead of holding up the rest: for work items of about equal cost whose
// results do not depend on which thread computes them. f(b, e) runs once per chunk.
template <typename F>
void parallel_for_dynamic(int64_t begin, int64_t end, int64_t chunk, const F& f) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  chunk = std::max<int64_t>(chunk, 1);
  const int max_threads = get_num_threads();
  if (n <= chunk || max_threads <= 1 || omp_in_parallel()) {
    f(begin, end);
    return;
  }
  const int64_t chunks = (n + chunk - 1) / chunk;
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
#pragma omp parallel num_threads(static_cast<int>(std::min<int64_t>(max_threads, chunks)))
  {
    for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < chunks; c = next.fetch_add(1, std::memory_order_relaxed)) {
      const int64_t b = begin + c * chunk, e = std::min(end, b + chunk);
      try {
        f(b, e);
      } catch (...) {
#pragma omp critical(trident_parallel_for_error)
        if (!error) error = std::current_exception();
        next.store(chunks, std::memory_order_relaxed);
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

// A chunk for parallel_for_dynamic over n items: about an eighth of each thread's share, so a
// slow thread leaves at most a small piece for the others, and consecutive items stay together.
inline int64_t dynamic_chunk(int64_t n) { return std::max<int64_t>(1, n / (8 * int64_t{get_num_threads()})); }

}  // namespace trident
