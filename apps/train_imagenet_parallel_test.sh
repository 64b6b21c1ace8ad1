#!/usr/bin/env bash
# train_imagenet under data and pipeline parallelism against the serial run (NOTE [Batch norm in
# the apps]): AmoebaNet-D(3, 16) with the auxiliary head on synthetic images, dropout off, SGD
# with Nesterov momentum, 3 steps of a global batch of 32 whose batch norms see micro-batches of
# 8 images. The serial run is --batch 8 --grad-accum 4; every layout below must print its losses
# within 1e-5 relative, and its evaluations (the test set's loss, top-1 and top-5, through the
# running statistics, which move by the whole global batch's statistics whatever the layout)
# must be within 1e-5 relative too. NP = 2: --dp 2, --dp 2 --zero, --pp 2 (GPipe; 1F1B with
# re-materialization always; cut by compute; interleaved over 2 chunks per rank). NP = 4: --dp 4, --pp 4, --dp 2 --pp 2 --zero, --dp 2 --pp 2, whose checkpoint at step 2
# then resumes serially with the uninterrupted serial run's losses.
#
# Why 3 steps of 8-image micro-batches: on this tiny network a rounding difference can flip a max
# pooling window's choice or a ReLU's sign, and the gradient then moves by much more than the
# rounding. Serial runs alone at --threads 1 and 2 (other summation orders) differ by 5e-5 in
# the step-3 validation loss here, and by 1.4e-4 in the step-4 loss with 4-image micro-batches,
# while every layout at --threads 1 agrees within 3e-7 at step 3. The learning rate is 0.002:
# the layouts' rounding differences reach the weights through the updates, so they scale with
# it, and at 0.01 (as this test first had) OpenBLAS's SkylakeX kernels put one layout across such
# a flip (val_loss 2.637387 against 2.637519), at 0.005 its Prescott and Haswell kernels did;
# at 0.002 every layout agrees within 5e-7 with each of them and either f32 convolution route
# (NOTE [Blocked or GEMM]).
#
# Usage: train_imagenet_parallel_test.sh TRAIN_IMAGENET MPIEXEC NP
set -euo pipefail
exe="$1"
mpiexec="$2"
np="$3"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
common=(--dataset synthetic --aux --dropout 0 --steps 3 --lr 0.002 --log-every 1 --eval-batches 0 --threads 1 --workers 1)
run() { "$mpiexec" --oversubscribe -np "$np" "$exe" "${common[@]}" "$@"; }
"$exe" "${common[@]}" --batch 8 --grad-accum 4 --metrics "$dir/serial.jsonl" >"$dir/serial.txt"
same_as_serial() {  # NAME FILE [FIRST_STEP]
  python3 - "$dir/serial.txt" "$2" "$1" "${3:-1}" <<'PY'
import re, sys
def losses(path):
    return {int(m.group(1)): float(m.group(2))
            for m in re.finditer(r"^step +(\d+)/\d+ \| loss (\S+)", open(path).read(), re.M)}
a, b, name, first = losses(sys.argv[1]), losses(sys.argv[2]), sys.argv[3], int(sys.argv[4])
a = {s: v for s, v in a.items() if s >= first}
assert len(a) == 4 - first and sorted(a) == sorted(b), f"{name}: serial steps {sorted(a)}, this run's {sorted(b)}"
for s in a:
    assert abs(a[s] - b[s]) <= 1e-5 * abs(a[s]), f"{name}: step {s}: serial loss {a[s]}, this run's {b[s]}"
print(f"{name}: the serial run's losses within 1e-5 relative: {[b[s] for s in sorted(b)]}")
PY
}
same_validation() {  # NAME METRICS [SERIAL_METRICS]: every evaluation's numbers within 1e-5 relative
  python3 - "${3:-$dir/serial.jsonl}" "$2" "$1" <<'PY'
import json, sys
def evals(path):
    return {j["step"]: {k: v for k, v in j.items() if k.startswith("val_")}
            for j in map(json.loads, open(path)) if "val_loss" in j}
a, b, name = evals(sys.argv[1]), evals(sys.argv[2]), sys.argv[3]
# Before and after training; a resumed run's first is at its checkpoint's step, which the serial
# run did not evaluate.
assert len(b) == 2 and 3 in b and 3 in a, f"{name}: evaluations at steps {sorted(b)}, serial {sorted(a)}"
a = {s: v for s, v in a.items() if s in b}
for s in a:
    for k in a[s]:
        assert abs(a[s][k] - b[s][k]) <= 1e-5 * abs(a[s][k]), f"{name}: step {s}: serial {k} {a[s][k]}, this run's {b[s][k]}"
print(f"{name}: the serial run's evaluations within 1e-5 relative: {b}")
PY
}
check() {  # NAME ARGS...
  local name="$1"
  shift
  run "$@" --metrics "$dir/$name.jsonl" >"$dir/$name.txt" 2>&1 || { cat "$dir/$name.txt"; exit 1; }
  same_as_serial "$name" "$dir/$name.txt"
  same_validation "$name" "$dir/$name.jsonl"
}
if [ "$np" -eq 2 ]; then
  check dp2 --dp 2 --batch 8 --grad-accum 2
  check zero2 --dp 2 --zero --batch 8 --grad-accum 2
  check pp2 --pp 2 --batch 32 --micro-batches 4
  check pp2_1f1b --pp 2 --batch 32 --micro-batches 4 --pp-schedule 1f1b --remat always
  # NOTE [Pipeline balance in the apps]: another cut, the same numbers.
  check pp2_compute --pp 2 --batch 32 --micro-batches 4 --pp-balance compute
  grep -q 'layers per stage {.*}, by compute' "$dir/pp2_compute.txt" || { cat "$dir/pp2_compute.txt"; exit 1; }
  # NOTE [Interleaved schedule]: two chunks per rank, cut by compute into four virtual stages.
  check pp2_chunks --pp 2 --pp-chunks 2 --batch 32 --micro-batches 4 --pp-schedule 1f1b --pp-balance compute
  grep -q 'pipeline: 2 stages x 2 chunks (layers per virtual stage {.*, .*, .*, .*}, by compute)' "$dir/pp2_chunks.txt" ||
    { cat "$dir/pp2_chunks.txt"; exit 1; }
else
  check dp4 --dp 4 --batch 8
  check pp4 --pp 4 --batch 32 --micro-batches 4
  check dp2pp2 --dp 2 --pp 2 --batch 16 --micro-batches 2 --ckpt-dir "$dir/ck" --ckpt-every 2
  check dp2pp2zero --dp 2 --pp 2 --zero --batch 16 --micro-batches 2
  "$exe" "${common[@]}" --batch 8 --grad-accum 4 --resume "$dir/ck/step-2" --metrics "$dir/resumed.jsonl" >"$dir/resumed.txt"
  same_as_serial "serial resume of the dp 2 x pp 2 checkpoint" "$dir/resumed.txt" 3
  same_validation "serial resume of the dp 2 x pp 2 checkpoint" "$dir/resumed.jsonl"
fi
