// NOTE [ISA clones]: by default Trident is compiled for the build machine's x86-64-v3 (NOTE
// [CPU ISA] in CMakeLists.txt), and then these clones are two copies of the same code. A
// portable build (TRIDENT_CPU_ISA=baseline) targets SSE2 so one binary runs on any x86 machine;
// there, the kernels limited by arithmetic rather than memory (softmax, cross-entropy, layer
// norm, dropout and the f32 unary math: an exp or a polynomial per element, NOTE [Softmax exp],
// NOTE [Fast f32 math]) still get AVX2: TRIDENT_CPU_CLONES compiles the function twice, for
// x86-64-v3 (AVX2 + FMA: twice the lanes, fused multiply-add) and for the baseline, and the
// dynamic loader picks one for the CPU at hand (GCC target_clones / ifunc).
// Measured on an AVX2 machine: softmax of f32 [64, 50304] takes 3.2 ms per thread with the
// v3 clone and 11 ms with the baseline one. The two versions may round the last bit
// differently (FMA); tests compare with tolerances, never bit for bit.
//
// Only plain functions (no lambdas) see the attribute, and only code inlined into them is
// compiled for the wider ISA: the macro also says `flatten`, so every call inside the clone is
// inlined (GCC allows it: the callees' baseline target is a subset of the clone's). Put the
// parallel_for outside the cloned function and call the clone per chunk of rows.
#pragma once

// Define TRIDENT_NO_ISA_CLONES to build only the baseline versions (to test them on an AVX2
// machine, or for a toolchain without ifunc support).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && !defined(__CUDACC__) && \
    !defined(TRIDENT_NO_ISA_CLONES)
#define TRIDENT_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default"), flatten))
#else
#define TRIDENT_CPU_CLONES
#endif

// Code compiled for x86-64-v4 by target attributes (no ifunc needed): GCC on x86-64.
// TRIDENT_TARGET_V4 goes inside __attribute__((...)): target("arch=x86-64-v4"), or nothing where
// the translation unit already targets all of x86-64-v4 (TRIDENT_CPU_ISA=native on an AVX-512
// machine): there the attribute would narrow the function below the intrinsics' own target
// (-march=native's extra extensions), and GCC refuses to inline them into it ("target specific
// option mismatch").
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define TRIDENT_CPU_HAS_AVX512_KERNELS 1
#if defined(__AVX512F__) && defined(__AVX512CD__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
#define TRIDENT_TARGET_V4
#else
#define TRIDENT_TARGET_V4 target("arch=x86-64-v4")
#endif
#define TRIDENT_CPU_AVX512 __attribute__((TRIDENT_TARGET_V4, flatten))
#endif

// NOTE [AVX-512 kernels]: the row kernels that compute rather than stream (softmax, log-softmax
// and their backward passes, cross-entropy, layer norm, dropout's Philox, the f32 unary and
// binary math, attention's exponentials) also have a third version compiled for x86-64-v4,
// where the vectorized loops take 16 lanes instead of 8: on an Emerald Rapids Xeon (2 threads)
// softmax of [4096, 1024] forward took 2.2-2.5 ms against 3.4-4.1 with the AVX2 clone, forward +
// backward 4.1-4.4 against 5.8-6.1 (alternating builds). It is chosen at
// run time rather than by the ifunc resolver so that tests can run both versions on one
// machine: set_cpu_avx512_kernels_enabled_for_testing(false) sends every call to the clones.
// The same switch chooses the convolutions' AVX-512 kernels (NOTE [AVX-512 micro-kernel] in
// ops/cpu/conv_simd.h, NOTE [Conv2d direct], NOTE [Depthwise AVX-512], NOTE [AVX-512 SGEMM]):
// one switch for all. TRIDENT_CPU_AVX512=off turns it off for the whole process (auto, the
// default, leaves it to the CPU), so that one machine measures the AVX2 forms as well:
// `OPENBLAS_CORETYPE=Haswell TRIDENT_CPU_AVX512=off scripts/bench-cpu-vs-torch.sh` (the script
// keeps PyTorch to AVX2 too).
// TRIDENT_CPU_KERNEL(name, (params), body...) defines `name` (the clones) and `name_avx512`
// from one body; TRIDENT_CPU_PICK(name) names the one to call.
#include <cstdint>
#include <utility>

#include "core/parallel.h"

namespace trident::cpu {
// Whether this build has AVX-512 kernels and the CPU runs them.
inline bool cpu_avx512_kernels_available() {
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
  return cpu_has_avx512();
#else
  return false;
#endif
}
namespace isa_detail {
inline bool g_avx512 = cpu_avx512_kernels_available() && avx512_allowed_by_env();
}  // namespace isa_detail
// Whether the AVX-512 kernels run: available, and tests have not turned them off (one load:
// it is read before every micro-kernel call).
inline bool cpu_avx512_kernels() { return isa_detail::g_avx512; }
// Turns them off (false) or on again; returns the previous setting. Not thread-safe: call it
// between ops.
inline bool set_cpu_avx512_kernels_enabled_for_testing(bool enabled) {
  return std::exchange(isa_detail::g_avx512, enabled && cpu_avx512_kernels_available());
}
}  // namespace trident::cpu

// TRIDENT_CPU_KERNEL_TEMPLATE(template <...>, name, (params), body...) does the same for a
// function template (call name##_avx512<...> or name<...> after cpu_avx512_kernels()).
#ifdef TRIDENT_CPU_HAS_AVX512_KERNELS
#define TRIDENT_CPU_KERNEL_TEMPLATE(tparams, name, params, ...) \
  tparams TRIDENT_CPU_CLONES void name params __VA_ARGS__        \
  tparams TRIDENT_CPU_AVX512 void name##_avx512 params __VA_ARGS__
#define TRIDENT_CPU_PICK(name) (::trident::cpu::cpu_avx512_kernels() ? name##_avx512 : name)
#else
#define TRIDENT_CPU_KERNEL_TEMPLATE(tparams, name, params, ...) tparams TRIDENT_CPU_CLONES void name params __VA_ARGS__
#define TRIDENT_CPU_PICK(name) name
#endif
#define TRIDENT_CPU_KERNEL(name, params, ...) TRIDENT_CPU_KERNEL_TEMPLATE(, name, params, __VA_ARGS__)
