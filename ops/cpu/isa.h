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
