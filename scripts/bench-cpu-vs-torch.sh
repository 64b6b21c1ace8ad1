#!/usr/bin/env bash
# Runs Trident's CPU op benchmarks and their PyTorch twins (Debian's python3-torch, installed by
# setup.sh) with the same thread count, and prints one table: both times and the ratio
# (PyTorch time / Trident time: above 1.0 means Trident is faster). Compare ratios from one run;
# machines are shared and noisy.
#   scripts/bench-cpu-vs-torch.sh [threads]     (default: all cores)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
THREADS="${1:-$(nproc)}"
scripts/setup.sh python3-torch >/dev/null
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target bench_cpu_ops >/dev/null
OUT="$(mktemp -d)"
OMP_NUM_THREADS="$THREADS" build/benchmarks/bench_cpu_ops --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true --benchmark_format=json --benchmark_min_time=0.2 >"$OUT/trident.json"
OMP_NUM_THREADS="$THREADS" /usr/bin/python3 benchmarks/torch_cpu_bench.py "$THREADS" >"$OUT/torch.json"
/usr/bin/python3 - "$OUT/trident.json" "$OUT/torch.json" "$THREADS" <<'PY'
import json, sys, platform, subprocess
tri = {}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("aggregate_name") == "median":
        tri[b["run_name"].removesuffix("/real_time")] = b["real_time"]  # milliseconds (the benchmarks' unit)
torch = json.load(open(sys.argv[2]))
cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
model = next((l.split(":", 1)[1].strip() for l in cpu.splitlines() if l.startswith("Model name")), platform.processor())
print(f"CPU: {model}, threads: {sys.argv[3]}; median of 5 repetitions; ratio = PyTorch / Trident (> 1: Trident faster)")
print(f"| {'case':40} | {'Trident ms':>10} | {'peer ms':>10} | {'peer':>11} | {'ratio':>6} |")
print(f"|{'-'*42}|{'-'*12}|{'-'*12}|{'-'*13}|{'-'*8}|")
for name, t in tri.items():
    if name.startswith("blas_sgemm"):
        continue
    peer, peer_name = torch.get(name), "PyTorch 1.13"
    if peer is None:
        continue
    print(f"| {name:40} | {t:10.3f} | {peer:10.3f} | {peer_name:>11} | {peer / t:6.2f} |")
    if name.startswith("matmul/fwd/1024") and "blas_sgemm/fwd/1024x1024x1024" in tri:
        blas = tri["blas_sgemm/fwd/1024x1024x1024"]
        print(f"| {name:40} | {t:10.3f} | {blas:10.3f} | {'cblas_sgemm':>11} | {blas / t:6.2f} |")
PY
rm -rf "$OUT"
