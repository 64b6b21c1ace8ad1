#!/usr/bin/env bash
# train_imagenet end to end on tiny synthetic data: exact resume across processes (a run of 8
# steps with a checkpoint every 4, and a second process resuming from step 4, print the same
# losses for steps 5..8), --config with a flag overriding it, --dry-run, and bad input giving
# one line on stderr and exit status 2. (Data and pipeline parallelism:
# train_imagenet_parallel_test.sh.)
set -euo pipefail
exe="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
# RMSProp (AmoebaNet's optimizer) with momentum: its square averages and momentum buffers must
# come back from the checkpoint for the losses to match.
common=(--dataset synthetic --batch 8 --grad-accum 2 --steps 8 --optimizer rmsprop --lr 0.01 --eps 1e-3 --eval-batches 1
        --log-every 1 --workers 1)
"$exe" "${common[@]}" --metrics "$dir/a/metrics.jsonl" --ckpt-dir "$dir/ck" --ckpt-every 4 >"$dir/straight.txt"
"$exe" "${common[@]}" --metrics "$dir/b/metrics.jsonl" --resume "$dir/ck/step-4" >"$dir/resumed.txt"
losses() { grep -oE '^step +[5-8]/8 \| loss [^ ]+' "$1"; }
[ "$(losses "$dir/straight.txt" | wc -l)" -eq 4 ] || { echo "expected 4 logged steps"; cat "$dir/straight.txt"; exit 1; }
diff <(losses "$dir/straight.txt") <(losses "$dir/resumed.txt")
echo "steps 5-8 identical after resume"
grep -q '"loss"' "$dir/a/metrics.jsonl"
# --eval-every -1: no evaluation at all (an ImageNet run need not evaluate 50,000 images first).
"$exe" --dataset synthetic --batch 8 --steps 2 --eval-every -1 --workers 1 >"$dir/noeval.txt"
if grep -q 'validation\|test top-1' "$dir/noeval.txt"; then echo "--eval-every -1 evaluated:"; cat "$dir/noeval.txt"; exit 1; fi
grep -qE '^step +2/2' "$dir/noeval.txt" || { cat "$dir/noeval.txt"; exit 1; }

# --config, with a flag overriding it; --dry-run opens no data.
echo '{"dataset": "imagenet", "model": "amoebanet-d(18,208)", "aux": true, "batch": 4, "dry-run": true}' >"$dir/c.json"
"$exe" --config "$dir/c.json" --batch 32 >"$dir/dry.txt"
grep -q 'parameters: 81781529 ' "$dir/dry.txt" || { cat "$dir/dry.txt"; exit 1; }
grep -q 'for a batch of 32' "$dir/dry.txt" || { cat "$dir/dry.txt"; exit 1; }
grep -q 'multiply-adds per image (forward, convolutions and linear layers): [0-9]' "$dir/dry.txt" || { cat "$dir/dry.txt"; exit 1; }
echo "dry run and config ok"

# Bad input: exit status 2 and one line naming the problem.
expect_error() {  # expect_error WORDS -- args...
  local words="$1"; shift
  set +e
  "$exe" "$@" >/dev/null 2>"$dir/err.txt"
  local rc=$?
  set -e
  [ "$rc" -eq 2 ] || { echo "expected exit 2 for $*, got $rc"; cat "$dir/err.txt"; exit 1; }
  [ "$(wc -l <"$dir/err.txt")" -eq 1 ] || { echo "expected one line for $*:"; cat "$dir/err.txt"; exit 1; }
  grep -q "$words" "$dir/err.txt" || { echo "expected '$words' for $*:"; cat "$dir/err.txt"; exit 1; }
}
expect_error "is not a folder" --dataset imagenet --data "$dir/nowhere"
expect_error "unknown model preset 'huge'" --dataset synthetic --model huge
echo '{"batch": 4,' >"$dir/bad.json"
expect_error "is not valid JSON" --config "$dir/bad.json"
echo '{"batchsize": 4}' >"$dir/unknown.json"
expect_error 'unknown key "batchsize"' --config "$dir/unknown.json"
expect_error "holds a amoebanet model of another configuration: .*amoebanet-d(3,16) for 4 classes of 3x16x16.*(this run: .*amoebanet-d(3,24)" \
  "${common[@]}" --model "amoebanet-d(3,24)" --resume "$dir/ck/step-4"
expect_error "has no tensor-parallel layers" --dataset synthetic --tp 2
expect_error "pp-balance must be parameters or compute, got 'time'" --dataset synthetic --pp 2 --pp-balance time
expect_error "eval-every must be >= 0, or -1 for no evaluation, got -2" --dataset synthetic --eval-every -2
expect_error "optimizer must be adamw, sgd or rmsprop, got 'lamb'" --dataset synthetic --optimizer lamb
expect_error "device must be cpu, cuda or cuda:N, got 'tpu'" --dataset synthetic --device tpu
# --device cuda without a GPU (or a CUDA backend): one line saying which (apps/device_option_test.sh
# covers the other apps).
if ! nvidia-smi -L >/dev/null 2>&1; then
  expect_error "no CUDA device found\|no CUDA backend" --dataset synthetic --device cuda
fi
echo "bad input ok"
