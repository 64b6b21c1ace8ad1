#!/usr/bin/env bash
# The whole CPU test suite under AddressSanitizer and UndefinedBehaviorSanitizer.
#   scripts/test-sanitizers.sh [ctest arguments]      e.g. scripts/test-sanitizers.sh -R Conv2d
# Builds everything (library, apps, tests; no CUDA, no benchmarks) with
# -fsanitize=address,undefined,float-cast-overflow into build-sanitize/ and runs ctest there. Any
# out-of-bounds access, use after free, signed overflow, misaligned or null access, float-to-
# integer conversion out of range (a NaN or huge value turned into an index; GCC's "undefined"
# leaves this check out), or (outside the multi-rank tests) leak makes its test fail with the
# sanitizer's report. The multi-rank tests run without
# leak detection: OpenMPI's own allocations are reported as leaks at exit. Not part of
# scripts/test.sh (a cold build takes about 25 minutes on 2 cores, the tests about 4); run it
# after changing kernels, index arithmetic or file readers. The example-project test
# (examples.*) is left out: it links the installed library into a program built without the
# sanitizers, which cannot link.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/setup.sh >/dev/null
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
SAN="-fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=undefined,float-cast-overflow -fno-omit-frame-pointer"
# -O1 keeps the tests quick; the sanitizers' -Wmaybe-uninitialized false positives are not errors here.
cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTRIDENT_CUDA=OFF -DTRIDENT_BUILD_BENCHMARKS=OFF \
  -DTRIDENT_SANITIZER_TESTS=OFF -DCMAKE_CXX_FLAGS="-O1 -g $SAN" -DCMAKE_EXE_LINKER_FLAGS="$SAN" \
  -DCMAKE_SHARED_LINKER_FLAGS="$SAN" >/dev/null
cmake --build build-sanitize -j "$(nproc)"
cd build-sanitize
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
ASAN_OPTIONS=detect_leaks=1 ctest -j "$(nproc)" --output-on-failure --timeout 1800 -E 'np[0-9]+$|^examples\.' "$@" || status=1
ASAN_OPTIONS=detect_leaks=0 ctest -j "$(nproc)" --output-on-failure --timeout 1800 -R 'np[0-9]+$' "$@" || status=1
exit "$status"
