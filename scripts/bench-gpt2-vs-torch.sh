#!/usr/bin/env bash
# GPT-2 training tokens/s on the CPU, Trident against the same model written plainly in PyTorch
# (Debian's python3-torch), same threads, in one run: vocabulary 50304, context 128, 4 layers,
# 4 heads, width 256, batch 8, AdamW. Prints both and the ratio (Trident / PyTorch: > 1 means
# Trident is faster). Machines are shared and noisy: compare numbers from one run.
#   scripts/bench-gpt2-vs-torch.sh [threads] [steps]     (default: all cores, 10 timed steps)
#
# With `hvp`, the same model's gradient and a Hessian-vector product over every parameter (NOTE
# [Higher-order gradients] in autograd/engine.h; bench_gpt2_train ... hvp against
# gpt2_train_torch.py ... hvp), ROUNDS alternating rounds, a table of each side's fastest:
#   scripts/bench-gpt2-vs-torch.sh [threads] [steps] hvp [rounds]   (default: 3 steps, 2 rounds)
#
# With `bf16`, the training step with the forward under autocast bf16 on both sides (Trident's
# autocast::Guard, torch.autocast("cpu", torch.bfloat16)); fp32 is measured beside it, ROUNDS
# alternating rounds, a table of each side's fastest:
#   scripts/bench-gpt2-vs-torch.sh [threads] [steps] bf16 [rounds]   (default: 10 steps, 2 rounds)
#
# With `generate`, text generation with GPT-2 124M and the key/value cache: a prompt of PROMPT
# tokens (default 64), then NEW greedy tokens (default 64), one sequence (bench_gpt2_generate
# against gpt2_generate_torch.py, the cache allocated once on both sides), ROUNDS alternating
# rounds of `steps` generations each, a table of each side's fastest:
#   scripts/bench-gpt2-vs-torch.sh [threads] [generations] generate [rounds]   (default: 3, 2 rounds)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
THREADS="${1:-$(nproc)}"
MODE="${3:-train}"
if [[ "$MODE" == hvp || "$MODE" == generate ]]; then STEPS="${2:-3}"; else STEPS="${2:-10}"; fi
ROUNDS="${4:-2}"
scripts/setup.sh python3-torch >/dev/null
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target bench_gpt2_train bench_gpt2_generate bench_cpu_ops >/dev/null
# Both sides run the same OpenBLAS kernels: the set Trident chooses (NOTE [OpenBLAS core]),
# handed to PyTorch, which loads the same library but keeps its own choice.
export OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-$(build/benchmarks/bench_cpu_ops --blas-core)}"
echo "OpenBLAS kernels on both sides: $OPENBLAS_CORETYPE" >&2
if [[ "$MODE" == generate ]]; then
  PROMPT="${PROMPT:-64}" NEW="${NEW:-64}"
  tri=() pt=()
  for ((r = 0; r < ROUNDS; ++r)); do
    tri+=("$(OMP_NUM_THREADS="$THREADS" build/benchmarks/bench_gpt2_generate "$THREADS" "$PROMPT" "$NEW" "$STEPS")")
    pt+=("$(OMP_NUM_THREADS="$THREADS" /usr/bin/python3 benchmarks/gpt2_generate_torch.py "$THREADS" "$PROMPT" "$NEW" "$STEPS")")
  done
  /usr/bin/python3 - "$THREADS" "$PROMPT" "$NEW" "${tri[@]}" -- "${pt[@]}" <<'PY'
import json, sys
threads, prompt, new = sys.argv[1:4]
args = sys.argv[4:]
cut = args.index("--")
tri = [json.loads(a) for a in args[:cut]]
pt = [json.loads(a) for a in args[cut + 1:]]
def best(rows, key): return min(r[key] for r in rows)
print(f"GPT-2 124M generation, prompt {prompt} tokens, {new} greedy tokens with the cache, batch 1, {threads} threads, "
      f"fastest of {len(tri)} rounds")
print(f"| {'':30} | {'Trident':>8} | {'PyTorch 1.13':>12} | {'PyTorch / Trident':>17} |")
print(f"| {'-' * 30} | {'-' * 8} | {'-' * 12} | {'-' * 17} |")
for name, key in (("prompt + first token (ms)", "prefill_ms"), ("each further token (ms)", "token_ms")):
    t, p = best(tri, key), best(pt, key)
    print(f"| {name:30} | {t:8.1f} | {p:12.1f} | {p / t:17.2f} |")
t, p = best(tri, "token_ms"), best(pt, "token_ms")
print(f"tokens/s after the prompt: Trident {1e3 / t:.1f}, PyTorch {1e3 / p:.1f}")
PY
  exit 0
fi
if [[ "$MODE" == bf16 ]]; then
  tri=() pt=()
  for ((r = 0; r < ROUNDS; ++r)); do
    for p in fp32 bf16; do
      tri+=("$(OMP_NUM_THREADS="$THREADS" build/benchmarks/bench_gpt2_train "$THREADS" "$STEPS" "$p")")
      pt+=("$(OMP_NUM_THREADS="$THREADS" /usr/bin/python3 benchmarks/gpt2_train_torch.py "$THREADS" "$STEPS" "$p")")
    done
  done
  /usr/bin/python3 - "$THREADS" "${tri[@]}" -- "${pt[@]}" <<'PY'
import json, sys
args = sys.argv[2:]
cut = args.index("--")
tri = [json.loads(a) for a in args[:cut]]
pt = [json.loads(a) for a in args[cut + 1:]]
def best(rows, i): return min(r["step_ms"] for r in rows[i::2])
print(f"GPT-2 (V 50304, T 128, 4 layers, 4 heads, C 256, batch 8, AdamW), {sys.argv[1]} threads, median step, "
      f"fastest of {len(tri) // 2} rounds")
print(f"| {'precision':9} | {'Trident ms':>10} | {'tokens/s':>8} | {'PyTorch 1.13 ms':>15} | {'tokens/s':>8} | {'PyTorch / Trident':>17} |")
print(f"| {'-' * 9} | {'-' * 10} | {'-' * 8} | {'-' * 15} | {'-' * 8} | {'-' * 17} |")
for i, name in enumerate(("fp32", "bf16")):
    t, p = best(tri, i), best(pt, i)
    print(f"| {name:9} | {t:10.1f} | {1024e3 / t:8.0f} | {p:15.1f} | {1024e3 / p:8.0f} | {p / t:17.2f} |")
PY
  exit 0
fi
if [[ "$MODE" == hvp ]]; then
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
  exit 0
fi
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
