#!/usr/bin/env bash
# Pipeline bubble against (K - 1) / (M + K - 1) for K = 2 and 4, and peak activation memory with
# re-materialization always / never and GPipe against 1F1B, the interleaved schedule's bubble and
# step time over 1, 2 and 4 chunks per rank, and the parameter memory each rank
# keeps (GPT-2 124M, AmoebaNet-D(18, 208)) (benchmarks/pipeline_bench.cpp). One
# OpenMP thread per rank. On a machine with fewer cores than ranks the stages share cores and
# the measured bubble means little.
#   scripts/bench-pipeline.sh [build-dir] [trace-prefix]
set -euo pipefail
build=${1:-build}
bench=$build/benchmarks/pipeline_bench
[ -x "$bench" ] || { echo "build $bench first: ninja -C $build pipeline_bench" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpirun=(mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS)
for np in 2 4; do
  "${mpirun[@]}" -np $np "$bench" bubble --max-m "${MAX_M:-32}" ${2:+--trace "$2-k$np"}
  echo
done
# NOTE [Interleaved schedule]: 1F1B over 1, 2 and 4 chunks per rank.
for np in 2 4; do
  "${mpirun[@]}" -np $np "$bench" interleaved --max-m "${MAX_M_INTERLEAVED:-16}"
  echo
done
for np in 2 4; do
  "${mpirun[@]}" -np $np "$bench" memory
  echo
  "${mpirun[@]}" -np $np "$bench" memory-amoebanet
  echo
done
# NOTE [Stage-only model]: the memory each rank keeps after the cut.
for np in 2 4; do
  "${mpirun[@]}" -np $np "$bench" held gpt2-124m
  echo
  "${mpirun[@]}" -np $np "$bench" held "amoebanet-d(18,208)"
  echo
done
# NOTE [AmoebaNet stage-only build]: peak memory of building one stage per rank, whole-then-cut
# against stage-only.
"${mpirun[@]}" -np 4 "$bench" build "amoebanet-d(18,208)"
