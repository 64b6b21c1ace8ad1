#!/usr/bin/env bash
# Builds examples/custom_op against Trident *installed* from a build tree, as an outside project
# would, and runs its test (NOTE [Installed package] in cmake/Install.cmake). ctest runs this as
# examples.custom_op, so scripts/test.sh does too.
#   scripts/test-example.sh [BUILD_DIR]     (default: build)
# Scratch space: BUILD_DIR/example-test/{prefix,build}, emptied first on every run (a fixed path,
# so ccache reuses the example's objects). The install is a copy of the headers and the library.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$(cd "${1:-$ROOT/build}" && pwd)"
WORK="$BUILD/example-test"
PREFIX="$WORK/prefix"
rm -rf "$WORK"
mkdir -p "$WORK"

cmake --install "$BUILD" --prefix "$PREFIX" >"$WORK/install.log"
echo "test-example: installed Trident into $PREFIX ($(find "$PREFIX" -type f | wc -l) files)"

GENERATOR=()
command -v ninja >/dev/null 2>&1 && GENERATOR=(-G Ninja)
LAUNCHER=()
if command -v ccache >/dev/null 2>&1; then
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}" CCACHE_NOHASHDIR=1
fi
# The library's own C++ compiler: the OpenMP runtime its objects call into (GCC's libgomp,
# Clang's libomp) is the one that compiler links.
CXX_OF_BUILD=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
# Only the installed package may be found: no package registry, no build tree.
cmake -S "$ROOT/examples/custom_op" -B "$WORK/build" "${GENERATOR[@]}" "${LAUNCHER[@]}" \
  ${CXX_OF_BUILD:+-DCMAKE_CXX_COMPILER="$CXX_OF_BUILD"} \
  -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  -DCMAKE_BUILD_TYPE=Release | tee "$WORK/configure.log"
trident_dir=$(sed -n 's/^Trident_DIR:PATH=//p' "$WORK/build/CMakeCache.txt")
[[ "$trident_dir" == "$PREFIX"/* ]] || { echo "test-example: found Trident at '$trident_dir', not in $PREFIX"; exit 1; }

cmake --build "$WORK/build" -j "${TRIDENT_JOBS:-2}"

# NOTE [CPU ISA]: the example's own code must be compiled with the library's -march flag.
isa=$(sed -n "s/.*CPU ISA '\([^']*\)'.*/\1/p" "$WORK/configure.log")
if [[ -n "$isa" ]]; then
  grep -q -- "$isa.*test_swiglu.cpp" "$WORK/build/compile_commands.json" ||
    { echo "test-example: test_swiglu.cpp was not compiled with $isa"; exit 1; }
  echo "test-example: the example is compiled with $isa, as Trident is"
fi

cd "$WORK/build"
ctest --output-on-failure
