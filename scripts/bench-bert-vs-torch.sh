#!/usr/bin/env bash
# BERT pre-training tokens/s on the CPU, Trident against the same model written plainly in PyTorch
# (Debian's python3-torch), same threads: vocabulary 30522, 4 layers, 4 heads, hidden 256,
# intermediate 1024, sequences of 128 tokens with padding, batch 8, both heads, AdamW
# (benchmarks/bert_train_bench.cpp against benchmarks/bert_train_torch.py). The two sides
# alternate for ROUNDS rounds of `steps` timed steps each; the table gives each side's fastest
# round and the ratio (Trident / PyTorch: > 1 means Trident is faster). Machines are shared and
# noisy: compare numbers from one run.
#   scripts/bench-bert-vs-torch.sh [threads] [steps] [rounds] [fp32|bf16]
#     (default: all cores, 10 steps, 2 rounds, fp32; bf16: autocast on both sides)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
THREADS="${1:-$(nproc)}"
STEPS="${2:-10}"
ROUNDS="${3:-2}"
PRECISION="${4:-fp32}"
scripts/setup.sh python3-torch >/dev/null
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target bench_bert_train bench_cpu_ops >/dev/null
# Both sides run the same OpenBLAS kernels (NOTE [OpenBLAS core]), as bench-gpt2-vs-torch.sh.
export OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-$(build/benchmarks/bench_cpu_ops --blas-core)}"
echo "OpenBLAS kernels on both sides: $OPENBLAS_CORETYPE" >&2
tri=() pt=()
for ((r = 0; r < ROUNDS; ++r)); do
  tri+=("$(OMP_NUM_THREADS="$THREADS" build/benchmarks/bench_bert_train "$THREADS" "$STEPS" "$PRECISION")")
  pt+=("$(OMP_NUM_THREADS="$THREADS" /usr/bin/python3 benchmarks/bert_train_torch.py "$THREADS" "$STEPS" "$PRECISION")")
done
/usr/bin/python3 - "$THREADS" "$PRECISION" "${tri[@]}" -- "${pt[@]}" <<'PY'
import json, sys
args = sys.argv[3:]
cut = args.index("--")
tri = [json.loads(a) for a in args[:cut]]
pt = [json.loads(a) for a in args[cut + 1:]]
for key in ("parameters", "masked"):
    if tri[0][key] != pt[0][key]:
        sys.exit(f"bench-bert-vs-torch: the two models differ: {key} {tri[0][key]} (Trident) vs {pt[0][key]} (PyTorch)")
t = min(r["step_ms"] for r in tri)
p = min(r["step_ms"] for r in pt)
print(f"BERT pre-training (V 30522, 4 layers, 4 heads, hidden 256, T 128, batch 8, {tri[0]['masked']} masked "
      f"positions, AdamW), {sys.argv[2]}, {sys.argv[1]} threads, median step, fastest of {len(tri)} rounds")
print(f"| {'':12} | {'ms/step':>8} | {'tokens/s':>9} |")
print(f"| {'-' * 12} | {'-' * 8} | {'-' * 9} |")
print(f"| {'Trident':12} | {t:8.1f} | {1024e3 / t:9.0f} |")
print(f"| {'PyTorch 1.13':12} | {p:8.1f} | {1024e3 / p:9.0f} |")
print(f"ratio Trident / PyTorch: {p / t:.2f} (rounds: " +
      ", ".join(f"{b['step_ms'] / a['step_ms']:.2f}" for a, b in zip(tri, pt)) + ")")
PY
