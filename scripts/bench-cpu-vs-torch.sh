#!/usr/bin/env bash
# Runs Trident's CPU op benchmarks and their PyTorch twins (Debian's python3-torch, installed by
# setup.sh) with the same thread count, and prints one table: both times and the ratio
# (PyTorch time / Trident time: above 1.0 means Trident faster).
#   scripts/bench-cpu-vs-torch.sh [threads] [filter-regex]   (default: all cores, every case)
#   ROUNDS=5 scripts/bench-cpu-vs-torch.sh 2 'conv2d1x7|depthwise3x3s2'
#   OPENBLAS_CORETYPE=Haswell TRIDENT_CPU_AVX512=off scripts/bench-cpu-vs-torch.sh 2
# The last measures an AVX2 machine on an AVX-512 one: Trident's AVX2 kernels, OpenBLAS's AVX2
# kernels on both sides, and PyTorch's own kernels held to AVX2 as well (ATen's
# ATEN_CPU_CAPABILITY, oneDNN's DNNL_MAX_CPU_ISA).
# The machines are shared VMs whose speed drifts by 10-30% over seconds to minutes, so one run of
# each side is not a comparison. The two sides alternate case by case (Trident's case, then the
# same case in PyTorch, then the next case), for ROUNDS rounds (default 3), so the two
# measurements of a case are seconds apart rather than a whole suite apart; each gives the
# median of 5 repetitions, and the table keeps each side's fastest round: noise from neighbours
# only ever adds time, so the minimum over rounds is the estimate least affected by it, and both
# sides are treated the same way. The last column gives the ratio of each round's own pair (the
# two measurements seconds apart) as the median over the rounds and its range: a row whose
# range straddles 1.0 is at parity within this machine's noise, not ahead or behind.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
THREADS="${1:-$(nproc)}"
FILTER="${2:-.}"
ROUNDS="${ROUNDS:-3}"
scripts/setup.sh python3-torch >/dev/null
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target bench_cpu_ops >/dev/null
# Both sides run the same OpenBLAS kernels: the set Trident chooses (NOTE [OpenBLAS core]),
# handed to PyTorch, which loads the same library but keeps its own choice.
export OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-$(build/benchmarks/bench_cpu_ops --blas-core)}"
echo "OpenBLAS kernels on both sides: $OPENBLAS_CORETYPE" >&2
if [[ "${TRIDENT_CPU_AVX512:-auto}" == off ]]; then
  export ATEN_CPU_CAPABILITY=avx2 DNNL_MAX_CPU_ISA=AVX2
  echo "AVX-512 kernels off on both sides (TRIDENT_CPU_AVX512=off, ATEN_CPU_CAPABILITY=avx2, DNNL_MAX_CPU_ISA=AVX2)" >&2
fi
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
NAMES=$(build/benchmarks/bench_cpu_ops --benchmark_list_tests=true --benchmark_filter="$FILTER" | sed 's|/real_time$||')
[[ -n "$NAMES" ]] || { echo "no benchmark matches '$FILTER'" >&2; exit 1; }
i=0
for r in $(seq 1 "$ROUNDS"); do
  for name in $NAMES; do
    i=$((i + 1))
    # The exact name: regex metacharacters in it ('.', '+', '(') escaped.
    re="^$(printf '%s' "$name" | sed 's/[][\.^$*+?(){}|]/\\&/g')/real_time\$"
    OMP_NUM_THREADS="$THREADS" build/benchmarks/bench_cpu_ops --benchmark_filter="$re" --benchmark_repetitions=5 \
      --benchmark_report_aggregates_only=true --benchmark_format=json --benchmark_min_time=0.2 --benchmark_min_warmup_time=0.5 >"$OUT/trident.$r.$i.json"
    [[ "$name" == blas_sgemm* ]] && continue  # Trident's own peer row, no PyTorch twin
    OMP_NUM_THREADS="$THREADS" /usr/bin/python3 benchmarks/torch_cpu_bench.py "$THREADS" "$name" >"$OUT/torch.$r.$i.json"
  done
done
/usr/bin/python3 - "$OUT" "$ROUNDS" "$THREADS" <<'PY'
import glob, json, os, statistics, sys, platform, subprocess
out, rounds, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3]
tri, torch = {}, {}  # name -> {round: ms}, in the benchmarks' own order
def in_order(side):  # <side>.<round>.<i>.json by i
    for path in sorted(glob.glob(f"{out}/{side}.*.json"), key=lambda p: int(p.rsplit(".", 2)[1])):
        yield int(path.rsplit(".", 3)[1]), path
for r, path in in_order("trident"):
    for b in json.load(open(path))["benchmarks"]:
        if b.get("aggregate_name") == "median":
            tri.setdefault(b["run_name"].removesuffix("/real_time"), {})[r] = b["real_time"]  # milliseconds
for r, path in in_order("torch"):
    for name, t in json.load(open(path)).items():
        torch.setdefault(name, {})[r] = t
cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
model = next((l.split(":", 1)[1].strip() for l in cpu.splitlines() if l.startswith("Model name")), platform.processor())
isa = ", AVX-512 kernels off on both sides" if os.environ.get("TRIDENT_CPU_AVX512") == "off" else ""
print(f"CPU: {model}, OpenBLAS kernels: {os.environ.get('OPENBLAS_CORETYPE', '?')}{isa}, threads: {threads}; each side's fastest of {rounds} rounds alternating case by case (median of 5 repetitions each);"
      " ratio = peer / Trident (> 1: Trident faster); per round: median [lowest, highest] of the rounds' own ratios")
print(f"| {'case':40} | {'Trident ms':>10} | {'peer ms':>10} | {'peer':>12} | {'ratio':>6} | {'per round':>18} |")
print(f"|{'-'*42}|{'-'*12}|{'-'*12}|{'-'*14}|{'-'*8}|{'-'*20}|")
def line(name, mine, theirs, peer):
    t, p = min(mine.values()), min(theirs.values())
    rs = sorted(theirs[r] / mine[r] for r in mine if r in theirs)
    spread = f"{statistics.median(rs):.2f} [{rs[0]:.2f}, {rs[-1]:.2f}]"
    print(f"| {name:40} | {t:10.3f} | {p:10.3f} | {peer:>12} | {p / t:6.2f} | {spread:>18} |")
for name, mine in tri.items():
    if name.startswith("blas_sgemm"):
        continue
    if name in torch:
        line(name, mine, torch[name], "PyTorch 1.13")
    if name.startswith("matmul/fwd/1024") and "blas_sgemm/fwd/1024x1024x1024" in tri:
        line(name, mine, tri["blas_sgemm/fwd/1024x1024x1024"], "cblas_sgemm")
PY
