#!/usr/bin/env bash
# Fills the git-ignored .carry/ folder with what a GPU machine lacks and the build needs, so that
# scripts/gpu-check.sh builds there with only the CUDA toolkit, a compiler, cmake and ninja:
#   .carry/include/nlohmann      the JSON headers (header-only)
#   .carry/googletest            GoogleTest's sources (built there with the tests)
#   .carry/openblas/{include,lib} a static OpenBLAS with the Fortran runtime it needs, gzipped
#                                (the device call carries at most 64 MiB; gpu-check.sh unpacks)
#   .carry/include/CLI           CLI11's headers (the programs' command lines; header-only)
#   .carry/pcre2, .carry/zlib    static PCRE2 (libpcre2-8.a) and zlib (libz.a) with their headers,
#                                gzipped likewise, and .carry/stb/include/stb/stb_image.h: data/,
#                                so that gpu-check.sh builds the training programs
#                                (NOTE [Carried data libraries] in cmake/Dependencies.cmake)
# Run it here (on a Debian machine with scripts/setup.sh's packages), then name .carry in the
# device call's carry list. About 20 MB.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
C="$ROOT/.carry"
rm -rf "$C"
mkdir -p "$C/include" "$C/openblas/include" "$C/openblas/lib"
cp -r /usr/include/nlohmann "$C/include/"
cp -r /usr/include/CLI "$C/include/"
LIB=/usr/lib/x86_64-linux-gnu
mkdir -p "$C/pcre2/include" "$C/pcre2/lib" "$C/zlib/include" "$C/zlib/lib" "$C/stb/include/stb"
cp /usr/include/pcre2.h "$C/pcre2/include/"
cp "$LIB/libpcre2-8.a" "$C/pcre2/lib/"
cp /usr/include/zlib.h /usr/include/zconf.h "$C/zlib/include/"
cp "$LIB/libz.a" "$C/zlib/lib/"
cp /usr/include/stb/stb_image.h "$C/stb/include/stb/"
cp -r /usr/src/googletest "$C/googletest"
OB_INC=$(dirname "$(find /usr/include -name cblas.h -path '*openblas*' | head -1)")
cp "$OB_INC"/*.h "$C/openblas/include/"
cp /usr/lib/x86_64-linux-gnu/libopenblas.a "$C/openblas/lib/"
GCC_LIB=$(dirname "$(gcc -print-libgcc-file-name)")
cp "$GCC_LIB/libgfortran.a" "$GCC_LIB/libquadmath.a" "$C/openblas/lib/"
gzip -9 "$C"/openblas/lib/*.a "$C"/pcre2/lib/*.a "$C"/zlib/lib/*.a
rm -rf "$C/googletest/docs"
du -sh "$C"
