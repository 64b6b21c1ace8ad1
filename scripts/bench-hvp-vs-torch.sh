#!/usr/bin/env bash
# Hessian-vector products beside PyTorch (NOTE [Higher-order gradients] in autograd/engine.h):
# the GPT-2 of scripts/bench-gpt2-vs-torch.sh (vocabulary 50304, context 128, 4 layers, 4 heads,
# width 256, batch 8), its gradient and a Hessian-vector product over every parameter, in Trident
# (bench_gpt2_train ... hvp) and in PyTorch (benchmarks/gpt2_train_torch.py ... hvp) with the
# same threads, ROUNDS alternating rounds; prints a table with each side's fastest round.
#
#   scripts/bench-hvp-vs-torch.sh [threads] [steps] [rounds]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
THREADS="${1:-$(nproc)}"
STEPS="${2:-3}"
ROUNDS="${3:-2}"
scripts/setup.sh python3-torch >/dev/null
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target bench_gpt2_train bench_cpu_ops >/dev/null
export OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-$(build/benchmarks/bench_cpu_ops --blas-core)}"
echo "OpenBLAS kernels on both sides: $OPENBLAS_CORETYPE" >&2
tri=() pt=()
for ((r = 0; r < ROUNDS; ++r)); do
  tri+=("$(OMP_NUM_THREADS="$THREADS" build/benchmarks/bench_gpt2_train "$THREADS" "$STEPS" hvp)")
  pt+=("$(OMP_NUM_THREADS="$THREADS" /usr/bin/python3 benchmarks/gpt2_train_torch.py "$THREADS" "$STEPS" hvp)")
done
/usr/bin/python3 - "$THREADS" "${tri[@]}" -- "${pt[@]}" <<'PY'
import json, sys
args = sys.argv[2:]
cut = args.index("--")
tri = [json.loads(a) for a in args[:cut]]
pt = [json.loads(a) for a in args[cut + 1:]]
def best(rows, key): return min(r[key] for r in rows)
print(f"GPT-2 (V 50304, T 128, 4 layers, 4 heads, C 256, batch 8), {sys.argv[1]} threads, fastest of {len(tri)} rounds")
print(f"| {'':28} | {'Trident ms':>10} | {'PyTorch 1.13 ms':>15} | {'PyTorch / Trident':>17} |")
print(f"| {'-' * 28} | {'-' * 10} | {'-' * 15} | {'-' * 17} |")
for name, key in (("gradient (forward+backward)", "grad_ms"), ("Hessian-vector product", "hvp_ms")):
    t, p = best(tri, key), best(pt, key)
    print(f"| {name:28} | {t:10.1f} | {p:15.1f} | {p / t:17.2f} |")
print(f"HVP / gradient: Trident {best(tri, 'hvp_ms') / best(tri, 'grad_ms'):.2f}, "
      f"PyTorch {best(pt, 'hvp_ms') / best(pt, 'grad_ms'):.2f}")
PY
