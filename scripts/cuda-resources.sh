#!/usr/bin/env bash
# The CUDA kernels' resource use as ptxas reports it (`-Xptxas -v`), without a GPU: compiles the
# device code of every .cu file to a cubin for each architecture, prints one row per kernel
# (registers, spill stores and loads, stack frame, static shared memory) and fails when a kernel
# spills more than MAX_SPILL bytes (default 256) or keeps a stack frame above MAX_STACK (1024):
# a regression guard for the register budgets the kernels are written to (NOTE [CUDA kernel
# resources] in docs/architecture.md). The ctest cuda.kernel_resources runs it.
#   scripts/cuda-resources.sh NVCC "80;90" "FLAGS" FILE.cu...
# FLAGS: the library's CUDA compile flags (dialect, optimization, includes), one string; the
# ctest passes the build's own (CMAKE_CUDA_FLAGS and the build type's, the C++20 option).
set -euo pipefail
NVCC="$1"
ARCHS="$2"
FLAGS="$3"
shift 3
MAX_SPILL="${MAX_SPILL:-256}"
MAX_STACK="${MAX_STACK:-1024}"
JOBS="${JOBS:-$(nproc)}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One job per (file, arch): its ptxas report in $work/<n>.log, "FAIL" in <n>.fail when it does
# not compile.
n=0
for arch in ${ARCHS//;/ }; do
  for f in "$@"; do
    n=$((n + 1))
    printf '%s\t%s\t%s\n' "$n" "$arch" "$f"
  done
done >"$work/jobs"
compile_one() {  # N ARCH FILE
  # shellcheck disable=SC2086
  if ! "$NVCC" -cubin -arch="sm_$2" -Xptxas -v $FLAGS "$3" -o "$work/$1.cubin" >"$work/$1.log" 2>&1; then
    echo "$3 sm_$2" >"$work/$1.fail"
  fi
}
export -f compile_one
export NVCC FLAGS work
xargs -P "$JOBS" -L 1 bash -c 'compile_one "$@"' _ <"$work/jobs"

status=0
if compgen -G "$work/*.fail" >/dev/null; then
  for x in "$work"/*.fail; do
    echo "cuda-resources: $(cat "$x") does not compile:"
    sed 's/^/  /' "${x%.fail}.log" | tail -20
  done
  status=1
fi

# ptxas prints, per kernel: "Compiling entry function 'NAME' for 'sm_XX'", then "N bytes stack
# frame, N bytes spill stores, N bytes spill loads", then "Used N registers, ... N bytes smem".
cat "$work"/*.log | awk -v q="'" -v max_spill="$MAX_SPILL" -v max_stack="$MAX_STACK" -v out="$work/rows" '
  /Compiling entry function/ {  # ... function 'NAME' for 'sm_XX'
    split($0, part, q)
    name = part[2]; arch = part[4]
    stack = spill_st = spill_ld = 0
  }
  /bytes stack frame/ {
    for (i = 1; i <= NF; i++) {
      if ($(i + 1) == "bytes" && $(i + 2) == "stack") stack = $i
      if ($(i + 1) == "bytes" && $(i + 2) == "spill" && $(i + 3) ~ /^stores/) spill_st = $i
      if ($(i + 1) == "bytes" && $(i + 2) == "spill" && $(i + 3) ~ /^loads/) spill_ld = $i
    }
  }
  /Used [0-9]+ registers/ {
    regs = 0; smem = 0
    for (i = 1; i <= NF; i++) {
      if ($i == "Used") regs = $(i + 1)
      if ($(i + 1) == "bytes" && $(i + 2) ~ /^smem/) smem = $i
    }
    bad = (spill_st + 0 > max_spill || stack + 0 > max_stack) ? "OVER" : ""
    printf "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", arch, name, regs, spill_st, spill_ld, stack, smem, bad > out
  }'
[ -s "$work/rows" ] || { echo "cuda-resources: ptxas reported no kernels"; exit 1; }

# Demangled, shortened names: the function's name and its template arguments, no namespaces.
cut -f2 "$work/rows" | c++filt >"$work/names" 2>/dev/null || cut -f2 "$work/rows" >"$work/names"
paste "$work/rows" "$work/names" | awk -F'\t' '
  BEGIN {
    printf "%-7s %-64s %5s %6s %6s %6s %6s\n", "arch", "kernel", "regs", "spillS", "spillL", "stack", "smem"
  }
  {
    name = $9; gsub(/\(anonymous namespace\)::/, "", name)
    sub(/\(.*/, "", name); sub(/^void /, "", name)
    gsub(/trident::|cuda::|attn::|nn::optim::|math::/, "", name)
    if (length(name) > 64) name = substr(name, 1, 61) "..."
    printf "%-7s %-64s %5d %6d %6d %6d %6d %s\n", $1, name, $3, $4, $5, $6, $7, $8
  }' | sort -k1,1 -k2,2
kernels=$(wc -l <"$work/rows")
over=$(awk -F'\t' '$8 == "OVER"' "$work/rows" | wc -l)
max_regs=$(cut -f3 "$work/rows" | sort -n | tail -1)
spilling=$(awk -F'\t' '$4 > 0' "$work/rows" | wc -l)
echo "cuda-resources: $kernels kernels over sm_${ARCHS//;/, sm_}; most registers $max_regs; $spilling spill" \
  "(limit $MAX_SPILL bytes, stack $MAX_STACK); $over over the limits"
[ "$over" -eq 0 ] || status=1
exit "$status"
