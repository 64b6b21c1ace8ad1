#include "core/parallel.h"

#include <cblas.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/error.h"

// OpenBLAS's run-time dispatch (a DYNAMIC_ARCH build, as Debian's): the kernel table in use and
// the function that chooses it (NOTE [OpenBLAS core]). Weak: absent from other builds.
extern "C" {
extern void* gotoblas __attribute__((weak));
void gotoblas_dynamic_init(void) __attribute__((weak));
}

namespace trident {

// NOTE [Threads]: OpenMP runs all of Trident's CPU parallelism, GEMMs included. OpenBLAS is
// set to one thread, once; cpu::gemm (ops/cpu/linalg.cpp) splits a large product into panels
// of rows or columns on OpenMP threads, each panel one single-threaded OpenBLAS call, and a GEMM
// called inside a parallel region (one per attention head, per image) simply runs on its
// thread. So only one pool of threads ever exists: no oversubscription, and no second pool
// spinning against the first between a GEMM and the element-wise loop after it. The count is
// the OpenMP default (OMP_NUM_THREADS, or the cores) unless set_num_threads is called.
//
// NOTE [OpenBLAS core]: a DYNAMIC_ARCH OpenBLAS picks its kernels from the CPU's family and
// model when it loads. A model newer than the library falls back to its oldest x86-64 kernels:
// Debian 12's OpenBLAS 0.3.21 takes an Emerald Rapids Xeon (family 6, model 207: AVX-512) for a
// "Prescott" (SSE3), and every GEMM runs about 4x slower than it could (sgemm 1024^3 on two
// threads: 48.7 ms against 7.6 ms with the SkylakeX kernels). So before the first GEMM, when the
// user has not chosen with OPENBLAS_CORETYPE and the chosen kernels are older than what the CPU
// runs (no AVX2), Trident has OpenBLAS choose again as OPENBLAS_CORETYPE would make it choose:
// SkylakeX (AVX-512 F/CD/BW/DQ/VL) or Haswell (AVX2 + FMA). blas_core() names the kernels.
namespace {
// OpenBLAS's names of the x86-64 kernel sets that use neither AVX2 nor AVX-512.
bool is_pre_avx2_core(const char* name) {
  static const char* const kOld[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Sandybridge", "Atom",
                                     "Nano", "Opteron", "Opteron(SSE3)", "Barcelona", "Bobcat", "Bulldozer",
                                     "Piledriver", "Steamroller", "Katmai", "Coppermine", "Northwood", "Banias",
                                     "Athlon", "unknown"};
  for (const char* old : kOld)
    if (std::strcmp(name, old) == 0) return true;
  return false;
}

void choose_openblas_core() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (&gotoblas == nullptr || gotoblas_dynamic_init == nullptr || std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  if (!is_pre_avx2_core(openblas_get_corename())) return;
  __builtin_cpu_init();
  const char* want = nullptr;
  if (cpu_has_avx512()) {
    want = "SkylakeX";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    want = "Haswell";
  }
  if (want == nullptr) return;
  // OpenBLAS reads the variable only while choosing; it is removed again so that the program's
  // environment (and its child processes') stays the user's.
  setenv("OPENBLAS_CORETYPE", want, 1);
  gotoblas = nullptr;  // gotoblas_dynamic_init chooses only when no table is set
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
#endif
}

std::once_flag g_blas_core_once;
void ensure_blas_core() { std::call_once(g_blas_core_once, choose_openblas_core); }

std::atomic<int> g_threads{0};
thread_local bool t_single_threaded = false;  // NOTE [Single-threaded workers]
}  // namespace

SingleThreadGuard::SingleThreadGuard() : previous_(t_single_threaded) { t_single_threaded = true; }
SingleThreadGuard::~SingleThreadGuard() { t_single_threaded = previous_; }

namespace {
// 1: auto, 0: off, -1: a value that is neither (avx512_choice_from_env's error, at first use).
int avx512_env_setting() {
  static const int setting = [] {
    try {
      return avx512_choice_from_env(std::getenv("TRIDENT_CPU_AVX512")) ? 1 : 0;
    } catch (const Error&) {
      return -1;
    }
  }();
  return setting;
}
}  // namespace

bool avx512_choice_from_env(const char* value) {
  if (value == nullptr || value[0] == '\0' || std::strcmp(value, "auto") == 0) return true;
  if (std::strcmp(value, "off") == 0) return false;
  TRIDENT_FAIL("TRIDENT_CPU_AVX512=", value, ": expected off or auto");
}

bool avx512_allowed_by_env() { return avx512_env_setting() != 0; }

namespace {
// A bad TRIDENT_CPU_AVX512 is reported where the thread count is first set: parsed again to
// throw, naming the variable and its value.
void require_valid_avx512_env() {
  if (avx512_env_setting() < 0) avx512_choice_from_env(std::getenv("TRIDENT_CPU_AVX512"));
}
}  // namespace

int get_num_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    require_valid_avx512_env();
    n = omp_get_max_threads();
    int expected = 0;
    if (g_threads.compare_exchange_strong(expected, n)) {
      ensure_blas_core();
      openblas_set_num_threads(1);
    }
    n = g_threads.load();
  }
  return t_single_threaded ? 1 : n;
}

void set_num_threads(int n) {
  TRIDENT_CHECK(n >= 1, "set_num_threads: need at least 1 thread, got ", n);
  require_valid_avx512_env();
  g_threads.store(n);
  omp_set_num_threads(n);
  ensure_blas_core();
  openblas_set_num_threads(1);
}

const char* blas_core() {
  ensure_blas_core();
  return openblas_get_corename();
}

bool blas_core_has_avx512() {
  const char* core = blas_core();
  return std::strcmp(core, "SkylakeX") == 0 || std::strcmp(core, "Cooperlake") == 0 || std::strcmp(core, "SapphireRapids") == 0;
}

bool cpu_has_avx512() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

}  // namespace trident
