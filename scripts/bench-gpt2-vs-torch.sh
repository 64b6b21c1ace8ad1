#!/usr/bin/env bash
# GPT-2 training tokens/s on the CPU, Trident against the same model written plainly in PyTorch
# (Debian's python3-torch), same threads, in one run: vocabulary 50304, context 128, 4 layers,
# 4 heads, width 256, batch 8, AdamW. Prints both and the ratio (Trident / PyTorch: > 1 means
# Trident is faster). Machines are shared and noisy: compare numbers from one run.
#   scripts/bench-gpt2-vs-torch.sh [threads] [steps]     (default: all cores, 10 timed steps)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
THREADS="${1:-$(nproc)}"
STEPS="${2:-10}"
scripts/setup.sh python3-torch >/dev/null
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target bench_gpt2_train bench_cpu_ops >/dev/null
# Both sides run the same OpenBLAS kernels: the set Trident chooses (NOTE [OpenBLAS core]),
# handed to PyTorch, which loads the same library but keeps its own choice.
export OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-$(build/benchmarks/bench_cpu_ops --blas-core)}"
echo "OpenBLAS kernels on both sides: $OPENBLAS_CORETYPE" >&2
tri="$(OMP_NUM_THREADS="$THREADS" build/benchmarks/bench_gpt2_train "$THREADS" "$STEPS")"
pt="$(OMP_NUM_THREADS="$THREADS" /usr/bin/python3 benchmarks/gpt2_train_torch.py "$THREADS" "$STEPS")"
/usr/bin/python3 - "$tri" "$pt" <<'PY'
import json, sys
t, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"GPT-2 (V 50304, T 128, 4 layers, 4 heads, C 256, batch 8, AdamW), {t['threads']} threads, median step")
print(f"Trident      {t['tokens_per_s']:10.0f} tokens/s  ({t['step_ms']:.1f} ms/step, {t['parameters']} parameters)")
print(f"PyTorch 1.13 {p['tokens_per_s']:10.0f} tokens/s  ({p['step_ms']:.1f} ms/step, {p['parameters']} parameters)")
print(f"ratio Trident / PyTorch: {t['tokens_per_s'] / p['tokens_per_s']:.2f}")
PY
