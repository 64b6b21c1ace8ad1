#!/usr/bin/env bash
# Runs Trident's CPU op benchmarks and their PyTorch twins (Debian's python3-torch, installed by
# setup.sh) with the same thread count, and prints one table: both times and the ratio
# (PyTorch time / Trident time: above 1.0 means Trident faster).
#   scripts/bench-cpu-vs-torch.sh [threads] [filter-regex]   (default: all cores, every case)
#   ROUNDS=5 scripts/bench-cpu-vs-torch.sh 2 'conv2d1x7|depthwise3x3s2'
# The machines are shared VMs whose speed drifts by 10-30% over seconds to minutes, so one run of
# each side is not a comparison. The two sides alternate case by case (Trident's case, then the
# same case in PyTorch, then the next case), for ROUNDS rounds (default 3), so the two
# measurements of a case are seconds apart rather than a whole suite apart; each gives the
# median of 5 repetitions, and the table keeps each side's fastest round: noise from neighbours
# only ever adds time, so the minimum over rounds is the estimate least affected by it, and both
# sides are treated the same way.
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
      --benchmark_report_aggregates_only=true --benchmark_format=json --benchmark_min_time=0.2 --benchmark_min_warmup_time=0.5 >"$OUT/trident.$i.json"
    [[ "$name" == blas_sgemm* ]] && continue  # Trident's own peer row, no PyTorch twin
    OMP_NUM_THREADS="$THREADS" /usr/bin/python3 benchmarks/torch_cpu_bench.py "$THREADS" "$name" >"$OUT/torch.$i.json"
  done
done
/usr/bin/python3 - "$OUT" "$ROUNDS" "$THREADS" <<'PY'
import glob, json, sys, platform, subprocess
out, rounds, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3]
tri, torch = {}, {}
def in_order(pattern):  # trident.<i>.json, torch.<i>.json by i: the benchmarks' own order
    return sorted(glob.glob(f"{out}/{pattern}.*.json"), key=lambda p: int(p.rsplit(".", 2)[1]))
for path in in_order("trident"):
    for b in json.load(open(path))["benchmarks"]:
        if b.get("aggregate_name") == "median":
            name = b["run_name"].removesuffix("/real_time")  # milliseconds (the benchmarks' unit)
            tri[name] = min(tri.get(name, float("inf")), b["real_time"])
for path in in_order("torch"):
    for name, t in json.load(open(path)).items():
        torch[name] = min(torch.get(name, float("inf")), t)
cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
model = next((l.split(":", 1)[1].strip() for l in cpu.splitlines() if l.startswith("Model name")), platform.processor())
print(f"CPU: {model}, threads: {threads}; each side's fastest of {rounds} rounds alternating case by case (median of 5 repetitions each);"
      " ratio = peer / Trident (> 1: Trident faster)")
print(f"| {'case':40} | {'Trident ms':>10} | {'peer ms':>10} | {'peer':>12} | {'ratio':>6} |")
print(f"|{'-'*42}|{'-'*12}|{'-'*12}|{'-'*14}|{'-'*8}|")
for name, t in tri.items():
    if name.startswith("blas_sgemm"):
        continue
    peer = torch.get(name)
    if peer is not None:
        print(f"| {name:40} | {t:10.3f} | {peer:10.3f} | {'PyTorch 1.13':>12} | {peer / t:6.2f} |")
    if name.startswith("matmul/fwd/1024") and "blas_sgemm/fwd/1024x1024x1024" in tri:
        blas = tri["blas_sgemm/fwd/1024x1024x1024"]
        print(f"| {name:40} | {t:10.3f} | {blas:10.3f} | {'cblas_sgemm':>12} | {blas / t:6.2f} |")
PY
