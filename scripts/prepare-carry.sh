#!/usr/bin/env bash
# Fills the git-ignored .carry/ folder with what a GPU machine lacks and the build needs, so that
# scripts/gpu-check.sh builds there with only the CUDA toolkit, a compiler, cmake and ninja:
#   .carry/include/nlohmann      the JSON headers (header-only)
#   .carry/googletest            GoogleTest's sources (built there with the tests)
#   .carry/openblas/{include,lib} a static OpenBLAS with the Fortran runtime it needs, gzipped
#                                (the device call carries at most 64 MiB; gpu-check.sh unpacks)
# Run it here (on a Debian machine with scripts/setup.sh's packages), then name .carry in the
# device call's carry list. About 20 MB.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
C="$ROOT/.carry"
rm -rf "$C"
mkdir -p "$C/include" "$C/openblas/include" "$C/openblas/lib"
cp -r /usr/include/nlohmann "$C/include/"
cp -r /usr/src/googletest "$C/googletest"
OB_INC=$(dirname "$(find /usr/include -name cblas.h -path '*openblas*' | head -1)")
cp "$OB_INC"/*.h "$C/openblas/include/"
cp /usr/lib/x86_64-linux-gnu/libopenblas.a "$C/openblas/lib/"
GCC_LIB=$(dirname "$(gcc -print-libgcc-file-name)")
cp "$GCC_LIB/libgfortran.a" "$GCC_LIB/libquadmath.a" "$C/openblas/lib/"
gzip -9 "$C"/openblas/lib/*.a
rm -rf "$C/googletest/docs"
du -sh "$C"
