#!/usr/bin/env bash
# Training images/s of a small AmoebaNet-D on the CPU, Trident against the same network written
# plainly in PyTorch (Debian's python3-torch, benchmarks/amoebanet_torch_bench.py), with the same
# thread count, batch and optimizer (SGD with momentum); prints both rates and the ratio
# (Trident / PyTorch: above 1.0 means Trident is faster). The two networks must have the same
# parameter count, or the script stops. Machines are shared and noisy: compare within one run.
#   scripts/bench-amoebanet-vs-torch.sh [threads] [-- extra options for both, e.g. --cells 6 --filters 32 --image 32 --batch 32
#                                       --precision fp32|bf16 (bf16: the forward under autocast on both sides)]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
THREADS="${1:-$(nproc)}"
shift || true
[[ "${1:-}" == "--" ]] && shift
scripts/setup.sh python3-torch >/dev/null
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target bench_amoebanet bench_cpu_ops >/dev/null
# Both sides run the same OpenBLAS kernels: the set Trident chooses (NOTE [OpenBLAS core]),
# handed to PyTorch, which loads the same library but keeps its own choice.
export OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-$(build/benchmarks/bench_cpu_ops --blas-core)}"
echo "OpenBLAS kernels on both sides: $OPENBLAS_CORETYPE" >&2
TRI="$(OMP_NUM_THREADS="$THREADS" build/benchmarks/bench_amoebanet "$@")"
TORCH="$(OMP_NUM_THREADS="$THREADS" /usr/bin/python3 benchmarks/amoebanet_torch_bench.py "$THREADS" "$@")"
/usr/bin/python3 - "$TRI" "$TORCH" "$THREADS" "$*" <<'PY'
import json, sys, platform, subprocess
tri, torch = json.loads(sys.argv[1]), json.loads(sys.argv[2])
if tri["parameters"] != torch["parameters"]:
    sys.exit(f"the networks differ: Trident has {tri['parameters']} parameters, PyTorch {torch['parameters']}")
cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
model = next((l.split(":", 1)[1].strip() for l in cpu.splitlines() if l.startswith("Model name")), platform.processor())
print(f"CPU: {model}, threads: {sys.argv[3]}; options: {sys.argv[4] or '(defaults: amoebanet-d(6,32), 32x32, batch 32)'}")
print(f"parameters: {tri['parameters']} (both); median step after a warm-up")
print(f"| {'':12} | {'images/s':>9} | {'step ms':>9} |")
print(f"|{'-'*14}|{'-'*11}|{'-'*11}|")
print(f"| {'Trident':12} | {tri['images_per_s']:9.1f} | {tri['step_ms']:9.1f} |")
print(f"| {'PyTorch 1.13':12} | {torch['images_per_s']:9.1f} | {torch['step_ms']:9.1f} |")
print(f"ratio Trident / PyTorch: {tri['images_per_s'] / torch['images_per_s']:.2f}")
PY
