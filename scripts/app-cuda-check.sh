#!/usr/bin/env bash
# train_gpt2 and generate on a GPU against the CPU (NOTE [Device in the apps], apps/device.h), on
# a tiny shard made here (no network): a tiny GPT-2 (2 layers, width 128, context 64, dropout 0)
# trained 20 steps with the same seed
#   cpu_vs_cuda   --device cpu and --device cuda in fp32: every logged loss within 1e-3 relative.
#                 Why 1e-3 and not equality: the GPU sums the same f32 products in other orders
#                 (cuBLASLt's GEMM tiling, the fused attention's and the reductions' trees), about
#                 1e-6 relative per op; through 20 AdamW steps (Adam divides by sqrt(v), which
#                 magnifies rounding-level gradient differences) they grow to ~1e-4 (the CUDA
#                 models test sees 1e-4 after 5 steps), well inside 1e-3, while a wrong kernel or a
#                 tensor left behind on the CPU moves the loss by far more.
#   bf16_cuda     --precision bf16 on the GPU: every loss finite, and falling.
#   fp16_cuda     --precision fp16 on the GPU (autocast and the GradScaler's device unscale and
#                 overflow flag): every loss finite, and falling.
#   zero_cuda     --zero (ZeRO-1 over one rank) on the GPU: the plain GPU run's losses within 1e-5.
#   resume_cuda   a second process resuming the GPU run's step-10 checkpoint on the GPU: the losses
#                 of steps 11-20 equal the uninterrupted run's exactly (the CUDA kernels have no
#                 atomics: the same inputs give the same bits).
#   generate_cuda generate --device cuda from that checkpoint, greedy: the same text with and
#                 without the key/value cache, and as on the CPU.
#   imagenet_cuda train_imagenet (a tiny AmoebaNet-D on synthetic images: cuDNN convolutions,
#                 pooling, batch norm with running statistics, SGD) 6 steps on the GPU and on the
#                 CPU in fp32: every loss within 5e-3 relative (as cpu_vs_cuda; batch norm over 8
#                 images magnifies rounding more than layer norm does, hence the wider bound), then
#                 an evaluation on the GPU (the running statistics on the device). Skipped (a
#                 FAIL row saying so) when train_imagenet was not built.
# Writes <OUT>/app_cuda.rows ("name|ok or FAIL|detail" per check, for scripts/gpu-check.sh's
# summary) and the logs; exit status 1 when a check fails. APP_DEADLINE (seconds since the
# epoch; gpu-check.sh sets it) bounds the whole script: each run's timeout is cut to what is
# left, and a check with under 15 s left is not started (a FAIL row saying so), so the rows are
# written before a caller's own timeout kills the script.
#   scripts/app-cuda-check.sh BUILD_DIR [OUT]
#   DEVICE=cpu scripts/app-cuda-check.sh build   # the script itself, on a machine without a GPU
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
B="$1"
OUT="${2:-$ROOT/app-cuda-out}"
DEV="${DEVICE:-cuda}"
mkdir -p "$OUT"
LOG="$OUT/app_cuda.log"
ROWS="$OUT/app_cuda.rows"
: >"$LOG"
: >"$ROWS"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fails=0
row() { echo "$1|$2|$3" >>"$ROWS"; echo "$1: $2 $3"; [[ "$2" == ok ]] || fails=$((fails + 1)); }
DEADLINE="${APP_DEADLINE:-$(( $(date +%s) + 100000 ))}"
# The timeout for a run of at most $1 seconds: less when the deadline is nearer; 0: do not start.
tmo() {
  local left=$(( DEADLINE - $(date +%s) ))
  if (( left < 15 )); then echo 0; elif (( left < $1 )); then echo "$left"; else echo "$1"; fi
}

for exe in train_gpt2 generate; do
  if [[ ! -x "$B/apps/$exe" ]]; then
    row app_build FAIL "$B/apps/$exe not built"
    exit 1
  fi
done
python3 "$ROOT/apps/make_tiny_shards.py" "$dir" 40000 4000
model='{"n_layer": 2, "n_head": 4, "n_embd": 128, "n_positions": 64, "vocab_size": 500, "padded_vocab_size": 512, "embd_pdrop": 0, "attn_pdrop": 0, "resid_pdrop": 0}'
train() {  # name, extra flags...
  local name="$1"; shift
  local t; t=$(tmo 120)
  echo "== train_gpt2 $name (timeout $t s): $*" >>"$LOG"
  (( t > 0 )) || { echo "not started: APP_DEADLINE reached" >>"$LOG"; return 1; }
  timeout "$t" "$B/apps/train_gpt2" --train "$dir/tiny_train_*.bin" --val "$dir/tiny_val_*.bin" --model "$model" \
    --batch 8 --grad-accum 2 --lr 1e-3 --warmup 2 --steps 20 --log-every 1 --eval-batches 2 --seed 7 --workers 1 \
    --threads 8 --metrics "$dir/$name.jsonl" "$@" >>"$LOG" 2>&1
}
check() {  # row name, app_losses.py arguments...
  local name="$1"; shift
  local out
  out=$(python3 "$ROOT/scripts/app_losses.py" "$@" 2>&1)
  local rc=$?
  echo "$out" >>"$LOG"
  row "$name" "$([[ $rc == 0 ]] && echo ok || echo FAIL)" "$(echo "$out" | tail -1 | sed -E 's/^(ok|FAIL): //')"
}

if train cpu --device cpu && train cuda --device "$DEV" --ckpt-dir "$dir/ck" --ckpt-every 10; then
  check cpu_vs_cuda compare "$dir/cpu.jsonl" "$dir/cuda.jsonl" --rtol 1e-3
else
  row cpu_vs_cuda FAIL "a run failed: see app_cuda.log"
fi
grep -a -m1 '^device:' "$LOG" || true
grep -a 'MFU' "$LOG" | tail -1 || true

if train bf16 --device "$DEV" --precision bf16; then
  check bf16_cuda falls "$dir/bf16.jsonl"
else
  row bf16_cuda FAIL "the run failed: see app_cuda.log"
fi

if train fp16 --device "$DEV" --precision fp16; then
  check fp16_cuda falls "$dir/fp16.jsonl"
else
  row fp16_cuda FAIL "the run failed: see app_cuda.log"
fi

# ZeRO-1 on the GPU (NOTE [ZeRO-1 on GPUs]; one rank: its buckets, shards and shard optimizer on
# the device, the clipping norm from the shards): the plain GPU run's losses within 1e-5 (the
# same AdamW arithmetic; only the clipping norm's summation order differs).
if train zero --device "$DEV" --zero; then
  check zero_cuda compare "$dir/cuda.jsonl" "$dir/zero.jsonl" --rtol 1e-5
else
  row zero_cuda FAIL "the run failed: see app_cuda.log"
fi

if [[ -d "$dir/ck/step-10" ]] && train resumed --device "$DEV" --resume "$dir/ck/step-10"; then
  check resume_cuda compare "$dir/cuda.jsonl" "$dir/resumed.jsonl" --rtol 0 --from 11
else
  row resume_cuda FAIL "no step-10 checkpoint or the resumed run failed: see app_cuda.log"
fi

# A vocabulary of the model's 500 ids (every prompt byte its own token).
python3 "$ROOT/apps/make_tiny_vocab.py" "$dir/vocab"
gen() {  # name, flags...
  local name="$1"; shift
  local t; t=$(tmo 60)
  echo "== generate $name (timeout $t s): $*" >>"$LOG"
  (( t > 0 )) || { echo "not started: APP_DEADLINE reached" >>"$LOG"; : >"$dir/$name.samples"; return 1; }
  timeout "$t" "$B/apps/generate" --ckpt "$dir/ck" --vocab "$dir/vocab" --prompt "t100" --max-new-tokens 24 \
    --num-samples 2 --greedy --threads 8 "$@" >"$dir/$name.txt" 2>>"$LOG"
  local rc=$?
  cat "$dir/$name.txt" >>"$LOG"
  grep -av '^loaded \|^device: ' "$dir/$name.txt" >"$dir/$name.samples"
  return $rc
}
if gen gen_cuda --device "$DEV" && gen gen_cuda_nocache --device "$DEV" --no-cache && gen gen_cpu --device cpu; then
  if ! grep -aq '^--- sample 2 ---' "$dir/gen_cuda.samples"; then
    row generate_cuda FAIL "no samples printed: see app_cuda.log"
  elif ! cmp -s "$dir/gen_cuda.samples" "$dir/gen_cuda_nocache.samples"; then
    row generate_cuda FAIL "the cached and uncached GPU texts differ: see app_cuda.log"
  elif ! cmp -s "$dir/gen_cuda.samples" "$dir/gen_cpu.samples"; then
    row generate_cuda FAIL "the GPU's greedy text differs from the CPU's: see app_cuda.log"
  else
    row generate_cuda ok "2 greedy samples of 24 tokens, equal with and without the cache and on the CPU"
  fi
else
  row generate_cuda FAIL "generate failed: see app_cuda.log"
fi

imagenet() {  # name, flags...
  local name="$1"; shift
  local t; t=$(tmo 120)
  echo "== train_imagenet $name (timeout $t s): $*" >>"$LOG"
  (( t > 0 )) || { echo "not started: APP_DEADLINE reached" >>"$LOG"; return 1; }
  timeout "$t" "$B/apps/train_imagenet" --dataset synthetic --model tiny --batch 8 --steps 6 --log-every 1 --lr 0.05 --eval-every 6 \
    --eval-batches 2 --seed 7 --workers 1 --threads 8 --metrics "$dir/$name/metrics.jsonl" "$@" >>"$LOG" 2>&1
}
if [[ ! -x "$B/apps/train_imagenet" ]]; then
  row imagenet_cuda FAIL "$B/apps/train_imagenet not built"
elif imagenet im_cpu --device cpu && imagenet im_cuda --device "$DEV"; then
  check imagenet_cuda compare "$dir/im_cpu/metrics.jsonl" "$dir/im_cuda/metrics.jsonl" --rtol 5e-3
else
  row imagenet_cuda FAIL "a run failed: see app_cuda.log"
fi
[[ $fails == 0 ]]
