#!/usr/bin/env bash
# The whole CPU test suite built with Clang instead of GCC.
#   scripts/test-clang.sh [ctest arguments]      e.g. scripts/test-clang.sh -R Gemm
# Builds everything (library, apps, tests; no CUDA: nvcc's host compiler stays GCC, and no
# benchmarks) with clang++ into build-clang/ and runs ctest there. Clang compiles some things
# differently from GCC, and the suite checks they still work: it has no target_clones, so a
# baseline build gets no AVX2 clones (the default x86-64-v3 build does not need them), and
# Trident's AVX-512 kernels are GCC's alone (Clang builds run the AVX2 forms and OpenBLAS).
# Not part of scripts/test.sh (a second build of everything: about 35 minutes cold on 2 cores,
# the tests about 9); run it after changing portable-C++ matters (vector extensions, lambda
# captures, attributes, evaluation order). Checked with Clang 14 (Debian 12), 2026-12-06: no
# warnings, and it found two bugs GCC's build hides (nn/optim/math.h's AdamUpdate, ops/cpu/rows.h's
# row_max).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/setup.sh clang >/dev/null
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
CC=clang CXX=clang++ cmake -S . -B build-clang -G Ninja -DTRIDENT_CUDA=OFF -DTRIDENT_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build build-clang -j "$(nproc)"
cd build-clang
ctest -j "$(nproc)" --output-on-failure "$@"
