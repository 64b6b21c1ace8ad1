#!/usr/bin/env bash
# Tensor-parallel GPT-2 training on CPU ranks (benchmarks/tp_bench.cpp): tokens/s at tp = 1 and 2
# and the communication per step beside Megatron's formula. One OpenMP thread per rank.
#   scripts/bench-tp.sh [build-dir] [tp_bench options]
set -euo pipefail
build=${1:-build}
shift || true
bench=$build/benchmarks/tp_bench
[ -x "$bench" ] || { echo "build $bench first: ninja -C $build tp_bench" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
for np in 1 2; do
  mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS -np $np "$bench" "$@"
  echo
done
