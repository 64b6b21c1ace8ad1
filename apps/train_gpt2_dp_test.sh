#!/usr/bin/env bash
# train_gpt2 data-parallel end to end (NOTE [Parallel training apps]), on a tiny shard made here:
# `mpirun -np 2 train_gpt2 --dp 2 --batch 4` (plain data parallelism, and ZeRO-1 with --zero)
# must print the losses of the serial run with --batch 8 (the same global batches) within 1e-5
# relative, and its validation losses; --resume under --dp 2 (and --zero) must print the
# uninterrupted run's losses exactly; fp16 with --zero (overflowing steps skipped on every rank)
# prints plain --dp 2's fp16 losses and resumes exactly;
# only rank 0 prints and writes metrics; --tp 2, --tp 2 --sequence-parallel, --dp 2 --tp 2 and
# --dp 2 --tp 2 --zero --sequence-parallel (four ranks) equal serial too; their checkpoints are
# the serial run's (NOTE [Model-parallel training checkpoints]): a --tp 2 checkpoint resumes at
# --tp 2 exactly (with dropout too) and at tp 1 within 1e-5 relative, a serial one at --tp 2.
# Usage: train_gpt2_dp_test.sh TRAIN_GPT2 MPIEXEC
set -euo pipefail
exe="$1"
mpiexec="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
python3 "$(dirname "$0")/make_tiny_shards.py" "$dir" 3000 300
# Dropout off: with dropout each rank draws masks for its own rows, which serial training would not.
model='{"n_layer": 2, "n_head": 2, "n_embd": 32, "n_positions": 16, "vocab_size": 500, "padded_vocab_size": 512, "embd_pdrop": 0, "attn_pdrop": 0, "resid_pdrop": 0}'
common=(--train "$dir/tiny_train_*.bin" --val "$dir/tiny_val_*.bin" --model "$model" --grad-accum 2 --lr 3e-3
        --warmup 2 --steps 8 --log-every 1 --eval-batches 2 --threads 1 --workers 1)
dp2() { "$mpiexec" --oversubscribe -np 2 "$exe" --dp 2 --batch 4 "${common[@]}" "$@"; }
"$exe" --batch 8 "${common[@]}" --ckpt-dir "$dir/serial_ck" --ckpt-every 4 >"$dir/serial.txt"
dp2 --ckpt-dir "$dir/dp" --ckpt-every 4 >"$dir/dp.txt"
dp2 --resume "$dir/dp/step-4" >"$dir/dp_resumed.txt"
dp2 --zero --ckpt-dir "$dir/zero" --ckpt-every 4 >"$dir/zero.txt"
dp2 --zero --resume "$dir/zero/step-4" >"$dir/zero_resumed.txt"
cat "$dir/dp.txt"
grep -E "^step" "$dir/serial.txt" | cut -d"|" -f1-2
losses() { grep -E '^step +[0-9]+/' "$1" | cut -d'|' -f1-2; }
same_losses() {  # NAME REFERENCE RUN: the run's 8 step losses within 1e-5 relative of the reference's
  python3 - "$2" "$3" "$1" <<'PY'
import re, sys
def losses(path):
    return [float(m.group(1)) for m in re.finditer(r"^step +\d+/\d+ \| loss (\S+)", open(path).read(), re.M)]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == len(b) == 8, (sys.argv[3], len(a), len(b))
for i, (x, y) in enumerate(zip(a, b)):
    assert abs(x - y) <= 1e-5 * abs(x), f"{sys.argv[3]}: step {i + 1}: reference loss {x}, this run's {y}"
print(f"{sys.argv[3]}: losses within 1e-5 relative: {b}")
PY
}
for run in dp zero; do
  [ "$(losses "$dir/$run.txt" | wc -l)" -eq 8 ] || { echo "$run: expected 8 step lines (rank 0 alone prints)"; exit 1; }
  # Global batch 8 = --batch 4 x --dp 2: the serial run's losses within 1e-5 relative.
  same_losses "$run: --dp 2 against the serial run" "$dir/serial.txt" "$dir/$run.txt"
  # NOTE [Evaluation over dp]: each dp rank evaluates its share of --batch 4 x --dp 2 rows, so
  # the validation losses are the serial --batch 8 run's.
  python3 "$(dirname "$0")/same_validation.py" "$dir/serial.txt" "$dir/$run.txt" "$run"
  # Resumed from step 4 under --dp 2: steps 5-8 identical.
  diff <(losses "$dir/$run.txt" | grep -E '^step +[5-8]/') <(losses "$dir/${run}_resumed.txt")
  echo "$run: steps 5-8 identical after --resume under --dp 2"
  [ "$(wc -l <"$dir/$run/metrics.jsonl")" -eq 10 ] || { echo "$run: metrics.jsonl should hold 10 records (8 steps, 2 evaluations)"; exit 1; }
  [ -e "$dir/$run/step-8/trainer.json" ]
done
# ZeRO-1 holds half of AdamW's moments per rank at --dp 2 and no second copy of the gradients
# (NOTE [ZeRO-1 layout]): its peak tensor memory is below plain data parallelism's on each rank.
python3 - "$dir/dp.txt" "$dir/zero.txt" <<'PY'
import re, sys
def peaks(path):
    m = re.search(r"^peak tensor memory per rank \(MiB\): (.*)$", open(path).read(), re.M)
    assert m, f"{path}: no peak tensor memory line"
    return [float(v) for v in m.group(1).split()]
dp, zero = peaks(sys.argv[1]), peaks(sys.argv[2])
assert len(dp) == len(zero) == 2, (dp, zero)
assert all(z < d for z, d in zip(zero, dp)), f"--zero peak {zero} MiB, not below plain --dp 2's {dp}"
print(f"peak tensor memory per rank: --dp 2 {dp} MiB, --dp 2 --zero {zero} MiB")
PY
# fp16 under ZeRO-1 (NOTE [ZeRO-1 with loss scaling]), from a loss scale of 2^20 so that the
# first two steps overflow: plain --dp 2's losses within 1e-5 relative and the same steps skipped
# (an overflow lands in one rank's gradient shard, and both ranks skip with it), and an exact
# resume from step 4 (the scaler's state is in the checkpoint).
fp16=(--precision fp16 --initial-loss-scale 1048576)
dp2 "${fp16[@]}" >"$dir/dp_fp16.txt"
dp2 --zero "${fp16[@]}" --ckpt-dir "$dir/zero_fp16" --ckpt-every 4 >"$dir/zero_fp16.txt"
dp2 --zero "${fp16[@]}" --resume "$dir/zero_fp16/step-4" >"$dir/zero_fp16_resumed.txt"
for run in dp_fp16 zero_fp16; do
  grep -q "^fp16: 2 steps skipped for overflowing gradients" "$dir/$run.txt" || { echo "$run: expected 2 skipped steps"; cat "$dir/$run.txt"; exit 1; }
done
same_losses "fp16: --dp 2 --zero against --dp 2 (2 overflowing steps skipped by both)" "$dir/dp_fp16.txt" "$dir/zero_fp16.txt"
diff <(losses "$dir/zero_fp16.txt" | grep -E '^step +[5-8]/') <(losses "$dir/zero_fp16_resumed.txt")
echo "fp16 zero: steps 5-8 identical after --resume under --dp 2"
# --initial-loss-scale belongs to fp16.
if "$exe" --batch 8 "${common[@]}" --initial-loss-scale 1024 >/dev/null 2>"$dir/err.txt"; then echo "--initial-loss-scale without fp16 must fail"; exit 1; fi
grep -q "initial-loss-scale is fp16's" "$dir/err.txt" || { cat "$dir/err.txt"; exit 1; }
# Sizes that do not match the launch fail with one clear line per rank.
if "$mpiexec" --oversubscribe -np 2 "$exe" --dp 4 "${common[@]}" >/dev/null 2>"$dir/err.txt"; then echo "--dp 4 on 2 ranks must fail"; exit 1; fi
grep -q "mpirun started 2 ranks but --dp 4" "$dir/err.txt" || { cat "$dir/err.txt"; exit 1; }
if "$exe" --tp 2 "${common[@]}" >/dev/null 2>"$dir/err.txt"; then echo "--tp 2 in one process must fail"; exit 1; fi
grep -q "tp 2" "$dir/err.txt" || { cat "$dir/err.txt"; exit 1; }
if "$exe" --sequence-parallel "${common[@]}" >/dev/null 2>"$dir/err.txt"; then echo "--sequence-parallel without --tp must fail"; exit 1; fi
grep -q "needs --tp > 1" "$dir/err.txt" || { cat "$dir/err.txt"; exit 1; }
if "$mpiexec" --oversubscribe -np 2 "$exe" --tp 2 --sequence-parallel --seq-len 15 "${common[@]}" >/dev/null 2>"$dir/err.txt"; then
  echo "--sequence-parallel with --seq-len 15 at --tp 2 must fail"; exit 1
fi
grep -q "seq-len 15 does not divide by --tp 2" "$dir/err.txt" || { cat "$dir/err.txt"; exit 1; }
echo "mismatched sizes: clear errors"
# --tp 2 (Megatron-LM's split of every layer over the two ranks) trains the serial model: the
# serial run's losses within 1e-5 relative (each rank sees the whole --batch 8).
# And --dp 2 --tp 2 on four ranks (tp innermost), --batch 4 per dp rank: the same global batches.
"$mpiexec" --oversubscribe -np 2 "$exe" --tp 2 --batch 8 "${common[@]}" --ckpt-dir "$dir/tp_ck" --ckpt-every 4 >"$dir/tp.txt"
"$mpiexec" --oversubscribe -np 4 "$exe" --dp 2 --tp 2 --batch 4 "${common[@]}" >"$dir/dptp.txt"
# Sequence parallelism (NOTE [Sequence parallelism]): with dropout off, the serial losses too.
"$mpiexec" --oversubscribe -np 2 "$exe" --tp 2 --sequence-parallel --batch 8 "${common[@]}" >"$dir/tpsp.txt"
# ZeRO-1 over the dp group of the dp 2 x tp 2 mesh (clipping by the serial norm), with sequence parallelism.
"$mpiexec" --oversubscribe -np 4 "$exe" --dp 2 --tp 2 --zero --sequence-parallel --batch 4 "${common[@]}" \
  --ckpt-dir "$dir/dptpzero_ck" --ckpt-every 4 >"$dir/dptpzero.txt"
for run in tp dptp tpsp dptpzero; do
  [ "$(losses "$dir/$run.txt" | wc -l)" -eq 8 ] || { echo "$run: expected 8 step lines (rank 0 alone prints)"; cat "$dir/$run.txt"; exit 1; }
  python3 - "$dir/serial.txt" "$dir/$run.txt" "$run" <<'PY'
import re, sys
def losses(path):
    return [float(m.group(1)) for m in re.finditer(r"^step +\d+/\d+ \| loss (\S+)", open(path).read(), re.M)]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
for i, (x, y) in enumerate(zip(a, b)):
    assert abs(x - y) <= 1e-5 * abs(x), f"{sys.argv[3]}: step {i + 1}: serial loss {x}, loss {y}"
print(f"{sys.argv[3]}: losses equal the serial run's within 1e-5 relative: {b}")
PY
done

# NOTE [Model-parallel training checkpoints]: the --tp 2 checkpoint holds the serial model's
# tensors: the same names, shapes and dtypes as the serial run's, model and optimizer state.
python3 - "$dir/tp_ck/step-4" "$dir/serial_ck/step-4" <<'PY'
import json, struct, sys
def header(path):
    b = open(path, 'rb').read(1 << 20)
    h = json.loads(b[8:8 + struct.unpack('<Q', b[:8])[0]])
    h.pop('__metadata__', None)
    return {k: (v['dtype'], v['shape']) for k, v in h.items()}
for part in ('model', 'optimizer'):
    a, b = header(f'{sys.argv[1]}/{part}.safetensors'), header(f'{sys.argv[2]}/{part}.safetensors')
    assert a == b, f"{part}: --tp 2 and serial checkpoints differ: {sorted(set(a.items()) ^ set(b.items()))}"
    print(f"{part}.safetensors: --tp 2 checkpoint has the serial one's {len(a)} tensors (names, shapes, dtypes)")
PY
tp2() { "$mpiexec" --oversubscribe -np 2 "$exe" --tp 2 --batch 8 "$@"; }
tp2 "${common[@]}" --resume "$dir/tp_ck/step-4" >"$dir/tp_tp.txt"
"$exe" --batch 8 "${common[@]}" --resume "$dir/tp_ck/step-4" >"$dir/tp_serial.txt"
tp2 "${common[@]}" --resume "$dir/serial_ck/step-4" >"$dir/serial_tp.txt"
# ZeRO's gathered state of a dp 2 x tp 2 run, resumed at --tp 2 alone (the same global batch).
tp2 "${common[@]}" --resume "$dir/dptpzero_ck/step-4" >"$dir/dptpzero_tp.txt"
diff <(losses "$dir/tp.txt" | grep -E '^step +[5-8]/') <(losses "$dir/tp_tp.txt")
echo "tp: steps 5-8 identical after --resume at --tp 2"
for pair in tp:tp_serial serial:serial_tp dptpzero:dptpzero_tp; do
  python3 - "$dir/${pair%%:*}.txt" "$dir/${pair##*:}.txt" "$pair" <<'PY'
import re, sys
def losses(path):
    return {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"^step +(\d+)/\d+ \| loss (\S+)", open(path).read(), re.M)}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert sorted(b) == [5, 6, 7, 8], (sys.argv[3], sorted(b))
for s in b:
    assert abs(a[s] - b[s]) <= 1e-5 * abs(a[s]), f"{sys.argv[3]}: step {s}: uninterrupted loss {a[s]}, resumed {b[s]}"
print(f"{sys.argv[3]}: the resumed run's steps 5-8 equal the uninterrupted run's within 1e-5 relative")
PY
done
# Dropout on: the split regions' per-rank streams continue where they were, so a resume at the
# same --tp is exact.
dropout_model='{"n_layer": 2, "n_head": 2, "n_embd": 32, "n_positions": 16, "vocab_size": 500, "padded_vocab_size": 512, "embd_pdrop": 0.1, "attn_pdrop": 0.1, "resid_pdrop": 0.1}'
tp2 "${common[@]}" --model "$dropout_model" --ckpt-dir "$dir/drop_ck" --ckpt-every 4 >"$dir/drop.txt"
tp2 "${common[@]}" --model "$dropout_model" --resume "$dir/drop_ck/step-4" >"$dir/drop_resumed.txt"
diff <(losses "$dir/drop.txt" | grep -E '^step +[5-8]/') <(losses "$dir/drop_resumed.txt")
echo "tp with dropout: steps 5-8 identical after --resume at --tp 2"
