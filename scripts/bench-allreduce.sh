#!/usr/bin/env bash
# All-reduce bandwidth table (as nccl-tests prints it) on the MPI backend for 2 and 4 ranks, and
# the data-parallel step time of an MLP at dp = 1 and dp = 2 with the same per-rank batch
# (benchmarks/allreduce_bench.cpp). One OpenMP thread per rank, so ranks do not fight over cores.
#   scripts/bench-allreduce.sh [build-dir]
set -euo pipefail
build=${1:-build}
bench=$build/benchmarks/allreduce_bench
[ -x "$bench" ] || { echo "build $bench first: ninja -C $build allreduce_bench" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpirun=(mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS)
for np in 2 4; do
  "${mpirun[@]}" -np $np "$bench" allreduce --max-bytes "${MAX_BYTES:-64M}"
  echo
done
for np in 1 2; do
  "${mpirun[@]}" -np $np "$bench" dp-step --batch "${BATCH:-64}" --width "${WIDTH:-1024}" --depth "${DEPTH:-4}"
  echo
done
