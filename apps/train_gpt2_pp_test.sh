#!/usr/bin/env bash
# train_gpt2 pipeline-parallel end to end (NOTE [Pipeline training apps]), on a tiny shard made
# here. With NP = 2: `--pp 2 --micro-batches 4` under GPipe and 1F1B (and each re-materialization
# mode) must print the serial run's losses (same global batch, dropout off) within 1e-5 relative,
# with the bubble and per-stage peak activation lines and a Chrome trace; an M that does not
# divide the step's batch fails with one clear line per rank; --precision bf16 and fp16 at --pp 2
# print the serial bf16 and fp16 runs' losses within 3e-5 relative (the half-precision roundings
# below), and every run the serial
# run's validation losses (evaluated through the stages). With NP = 4: --dp 2 --pp 2,
# --pp 4, --pp 2 --tp 2, --dp 2 --pp 2 --zero and (eight ranks) --dp 2 --pp 2 --tp 2 --zero equal
# serial as well, and so does --dp 2 --pp 2 with the communicators staging every tensor through
# host buffers (TRIDENT_COMM_STAGE_HOST=1, the GPU path's staging). Checkpoints (NOTE [Model-parallel training
# checkpoints]): a --pp 2 (NP = 4: --pp 2 --tp 2) checkpoint has the serial one's tensors and
# resumes at its own layout exactly (with dropout too, NP = 2) and serially within 1e-5
# relative; a serial checkpoint resumes at that layout; so does the interleaved schedule (--pp 2
# --pp-chunks 2; at NP = 4 --dp 2 --pp 2 --pp-chunks 2, and on eight ranks with --tp 2 --zero).
# Usage: train_gpt2_pp_test.sh TRAIN_GPT2
# MPIEXEC NP
set -euo pipefail
exe="$1"
mpiexec="$2"
np="$3"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
python3 - "$dir" <<'PY'
import struct, sys
d = sys.argv[1]
def shard(path, n, offset):
    toks = [((i + offset) * 37) % 97 * 5 for i in range(n)]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
        f.write(struct.pack("<%dH" % n, *toks))
shard(d + "/tiny_train_000000.bin", 3000, 0)
shard(d + "/tiny_val_000000.bin", 300, 11)
PY
# Dropout off, as in train_gpt2_dp_test.sh. Two blocks: 4 layers (embedding, 2 blocks, head).
model='{"n_layer": 2, "n_head": 2, "n_embd": 32, "n_positions": 16, "vocab_size": 500, "padded_vocab_size": 512, "embd_pdrop": 0, "attn_pdrop": 0, "resid_pdrop": 0}'
# --grad-clip 0.5 so that clipping (by the whole model's norm over the stages) acts.
common=(--train "$dir/tiny_train_*.bin" --val "$dir/tiny_val_*.bin" --model "$model" --grad-accum 2 --lr 3e-3
        --warmup 2 --steps 6 --log-every 1 --eval-batches 2 --threads 1 --workers 1 --grad-clip 0.5)
run() { "$mpiexec" --oversubscribe -np "$np" "$exe" "${common[@]}" "$@"; }
"$exe" --batch 8 "${common[@]}" --ckpt-dir "$dir/serial_ck" --ckpt-every 3 >"$dir/serial.txt"
same_as_serial() {  # NAME FILE [SERIAL_FILE [TOLERANCE]]
  python3 - "${3:-$dir/serial.txt}" "$2" "$1" "${4:-1e-5}" <<'PY'
import re, sys
def losses(path):
    return [float(m.group(1)) for m in re.finditer(r"^step +\d+/\d+ \| loss (\S+)", open(path).read(), re.M)]
a, b, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[4])
assert len(a) == len(b) == 6, f"{sys.argv[3]}: {len(a)} serial and {len(b)} step lines (world rank 0 alone prints 6)"
for i, (x, y) in enumerate(zip(a, b)):
    assert abs(x - y) <= tol * abs(x), f"{sys.argv[3]}: step {i + 1}: serial loss {x}, pipeline loss {y}"
print(f"{sys.argv[3]}: the serial run's losses within {sys.argv[4]} relative: {b}")
PY
  # Validation through the stages (Pipeline::forward_only): the serial run's.
  python3 "$(dirname "$0")/same_validation.py" "${3:-$dir/serial.txt}" "$2" "$1"
}
losses() { grep -E '^step +[0-9]+/' "$1" | cut -d'|' -f1-2; }
# NOTE [Model-parallel training checkpoints]. RUN: the uninterrupted run's output; its
# checkpoints are in CK; the remaining arguments run the same layout again.
check_checkpoints() {  # NAME RUN CK ARGS...
  local name="$1" out="$2" ck="$3"
  shift 3
  python3 - "$ck/step-3" "$dir/serial_ck/step-3" "$name" <<'PY'
import json, struct, sys
def header(path):
    b = open(path, 'rb').read(1 << 20)
    h = json.loads(b[8:8 + struct.unpack('<Q', b[:8])[0]])
    h.pop('__metadata__', None)
    return {k: (v['dtype'], v['shape']) for k, v in h.items()}
for part in ('model', 'optimizer'):
    a, b = header(f'{sys.argv[1]}/{part}.safetensors'), header(f'{sys.argv[2]}/{part}.safetensors')
    assert a == b, f"{sys.argv[3]}: {part}: checkpoint differs from the serial one: {sorted(set(a.items()) ^ set(b.items()))}"
print(f"{sys.argv[3]}: the checkpoint has the serial one's tensors (names, shapes, dtypes)")
PY
  "$@" --resume "$ck/step-3" >"$dir/resumed.txt"
  diff <(losses "$out" | grep -E '^step +[4-6]/') <(losses "$dir/resumed.txt")
  echo "$name: steps 4-6 identical after --resume at the same layout"
  "$exe" --batch 8 "${common[@]}" --resume "$ck/step-3" >"$dir/serial_resumed.txt"
  "$@" --resume "$dir/serial_ck/step-3" >"$dir/resumed_from_serial.txt"
  python3 - "$out" "$dir/serial_resumed.txt" "$dir/serial.txt" "$dir/resumed_from_serial.txt" "$name" <<'PY'
import re, sys
def losses(path):
    return {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"^step +(\d+)/\d+ \| loss (\S+)", open(path).read(), re.M)}
for straight, resumed, what in ((sys.argv[1], sys.argv[2], "resumed serially"), (sys.argv[3], sys.argv[4], "serial checkpoint resumed")):
    a, b = losses(straight), losses(resumed)
    assert sorted(b) == [4, 5, 6], (sys.argv[5], what, sorted(b))
    for s in b:
        assert abs(a[s] - b[s]) <= 1e-5 * abs(a[s]), f"{sys.argv[5]}, {what}: step {s}: uninterrupted loss {a[s]}, resumed {b[s]}"
    print(f"{sys.argv[5]}, {what}: steps 4-6 equal the uninterrupted run's within 1e-5 relative")
PY
}
if [ "$np" = 2 ]; then
  run --pp 2 --micro-batches 4 --batch 8 --pp-schedule gpipe --remat always --trace "$dir/trace.json" >"$dir/gpipe.txt"
  run --pp 2 --micro-batches 4 --batch 8 --pp-schedule 1f1b --remat except_last --ckpt-dir "$dir/pp_ck" --ckpt-every 3 \
    >"$dir/1f1b.txt"
  run --pp 2 --micro-batches 8 --batch 8 --pp-schedule 1f1b --remat never >"$dir/1f1b_never.txt"
  same_as_serial "gpipe M=4 always" "$dir/gpipe.txt"
  same_as_serial "1f1b M=4 except_last" "$dir/1f1b.txt"
  same_as_serial "1f1b M=8 never" "$dir/1f1b_never.txt"
  # bf16 autocast through the stages (NOTE [Autocast state]) against serial bf16: M = 2 gives the
  # serial run's two micro-batches (--grad-accum 2), so only the order in which the tied
  # embedding's gradient parts and the clipping norm's squares are summed differs.
  "$exe" --batch 8 --precision bf16 "${common[@]}" >"$dir/serial_bf16.txt"
  run --pp 2 --micro-batches 2 --batch 8 --precision bf16 --pp-schedule 1f1b --remat always >"$dir/bf16.txt"
  # Half precision turns the layouts' rounding differences in f32 (up to 4e-8 relative here,
  # exactly 0 only by chance, depending on OpenBLAS's kernel set) into different roundings to
  # bf16 / f16 of a few activations: up to 1.0e-5 relative by step 6 (the serial bf16 run alone
  # moves by 1.2e-5 between OpenBLAS's Prescott and Haswell kernels). So these runs are held to
  # 3e-5, and the bf16 one to being the bf16 computation: at the last step, at least twice as
  # far from the serial f32 run (4.6e-5 relative away) as from the serial bf16 one.
  same_as_serial "bf16 1f1b M=2 always" "$dir/bf16.txt" "$dir/serial_bf16.txt" 3e-5
  if cmp -s <(grep "^step" "$dir/serial.txt" | cut -d'|' -f1,2) <(grep "^step" "$dir/serial_bf16.txt" | cut -d'|' -f1,2); then
    echo "the bf16 run printed the f32 losses: autocast did not act"; exit 1
  fi
  half_not_f32() {  # NAME FILE SERIAL_HALF_FILE
    python3 - "$dir/serial.txt" "$3" "$2" "$1" <<'PY'
import re, sys
last = [float(re.findall(r"^step +\d+/\d+ \| loss (\S+)", open(p).read(), re.M)[-1]) for p in sys.argv[1:4]]
f32, half, run = last
assert abs(run - f32) >= 2 * abs(run - half), f"{sys.argv[4]}: last loss {run}: serial f32 {f32}, serial half precision {half}"
PY
  }
  half_not_f32 "bf16 1f1b M=2 always" "$dir/bf16.txt" "$dir/serial_bf16.txt"
  # fp16: the loss scale applied by the last stage, overflow agreed over the ranks.
  "$exe" --batch 8 --precision fp16 "${common[@]}" >"$dir/serial_fp16.txt"
  run --pp 2 --micro-batches 2 --batch 8 --precision fp16 --pp-schedule gpipe --remat except_last >"$dir/fp16.txt"
  same_as_serial "fp16 gpipe M=2 except_last" "$dir/fp16.txt" "$dir/serial_fp16.txt" 3e-5
  grep -E "^pipeline bubble \(last step\): [0-9.]+% measured, 20.0% in theory" "$dir/gpipe.txt"
  grep -E "^peak activation bytes per stage \(last step\): stage 0 [1-9][0-9]* stage 1 [1-9][0-9]*$" "$dir/gpipe.txt"
  python3 -c "import json, sys; e = json.load(open(sys.argv[1]))['traceEvents']; assert len(e) > 0" "$dir/trace.json"
  # Bad input: one clear line per rank, nothing else from the app.
  if run --pp 2 --micro-batches 3 --batch 8 >/dev/null 2>"$dir/err.txt"; then echo "--micro-batches 3 must fail"; exit 1; fi
  [ "$(grep -c '^train_gpt2: --micro-batches 3 does not divide a step.s batch of 16 rows (--batch 8 x --grad-accum 2)$' "$dir/err.txt")" = 2 ] ||
    { cat "$dir/err.txt"; exit 1; }
  echo "bad input: clear errors"
  # NOTE [Pipeline balance in the apps]: by model FLOPs the embedding (a lookup) costs nothing
  # and the tied output layer more than a block here, so the cut is {3, 1}, not {2, 2}; the
  # losses are the serial run's all the same.
  run --pp 2 --micro-batches 4 --batch 8 --pp-balance compute >"$dir/compute.txt"
  grep -q "layers per stage {3, 1}, by compute" "$dir/compute.txt" || { cat "$dir/compute.txt"; exit 1; }
  same_as_serial "cut by compute" "$dir/compute.txt"
  # NOTE [Interleaved schedule]: two chunks per rank, one layer each (embedding and the second
  # block on rank 0, the first block and the head on rank 1), its checkpoint the serial one's.
  run --pp 2 --pp-chunks 2 --micro-batches 4 --batch 8 --pp-schedule 1f1b --ckpt-dir "$dir/chunks_ck" --ckpt-every 3 \
    --trace "$dir/chunks_trace.json" >"$dir/chunks.txt"
  same_as_serial "pp 2 x 2 chunks" "$dir/chunks.txt"
  grep -q "pipeline: 2 stages x 2 chunks (layers per virtual stage {1, 1, 1, 1}" "$dir/chunks.txt" || { cat "$dir/chunks.txt"; exit 1; }
  grep -E "^pipeline bubble \(last step\): [0-9.]+% measured, 11.1% in theory \(\(K-1\)/\(VM\+K-1\), K = 2, V = 2, M = 4\)" "$dir/chunks.txt"
  python3 -c "import json, sys; d = json.load(open(sys.argv[1])); assert d['otherData']['chunks'] == 2" "$dir/chunks_trace.json"
  check_checkpoints "pp 2 x 2 chunks" "$dir/chunks.txt" "$dir/chunks_ck" run --pp 2 --pp-chunks 2 --micro-batches 4 --batch 8 \
    --pp-schedule 1f1b
  if run --pp 2 --pp-chunks 2 --micro-batches 3 --batch 6 >/dev/null 2>"$dir/err.txt"; then echo "--micro-batches 3 must fail"; exit 1; fi
  grep -q "is not a multiple of --pp 2" "$dir/err.txt" || { cat "$dir/err.txt"; exit 1; }
  if run --pp 2 --pp-chunks 4 --micro-batches 4 --batch 8 >/dev/null 2>"$dir/err.txt"; then echo "--pp-chunks 4 must fail"; exit 1; fi
  [ "$(grep -c '^train_gpt2: --pp 2 x --pp-chunks 4: 8 stages but the model has only 4 layers (every chunk needs at least one)$' "$dir/err.txt")" = 2 ] ||
    { cat "$dir/err.txt"; exit 1; }
  check_checkpoints "pp 2" "$dir/1f1b.txt" "$dir/pp_ck" run --pp 2 --micro-batches 4 --batch 8 --pp-schedule 1f1b
  # Dropout on: each stage's default generator continues where it was, so a resume at --pp 2 is exact.
  dropout_model='{"n_layer": 2, "n_head": 2, "n_embd": 32, "n_positions": 16, "vocab_size": 500, "padded_vocab_size": 512, "embd_pdrop": 0.1, "attn_pdrop": 0.1, "resid_pdrop": 0.1}'
  run --pp 2 --micro-batches 2 --batch 8 --model "$dropout_model" --ckpt-dir "$dir/drop_ck" --ckpt-every 3 >"$dir/drop.txt"
  run --pp 2 --micro-batches 2 --batch 8 --model "$dropout_model" --resume "$dir/drop_ck/step-3" >"$dir/drop_resumed.txt"
  diff <(losses "$dir/drop.txt" | grep -E '^step +[4-6]/') <(losses "$dir/drop_resumed.txt")
  echo "pp 2 with dropout: steps 4-6 identical after --resume at --pp 2"
else
  # dp x pp: --batch 4 per dp rank (global 8, as serial); pp 4: one layer per stage.
  run --dp 2 --pp 2 --micro-batches 2 --batch 4 --pp-schedule 1f1b >"$dir/dp_pp.txt"
  run --pp 4 --micro-batches 4 --batch 8 --pp-schedule gpipe >"$dir/pp4.txt"
  same_as_serial "dp 2 x pp 2" "$dir/dp_pp.txt"
  run --dp 2 --pp 2 --pp-chunks 2 --micro-batches 2 --batch 4 --pp-schedule 1f1b >"$dir/dp_pp_chunks.txt"
  same_as_serial "dp 2 x pp 2 x 2 chunks" "$dir/dp_pp_chunks.txt"
  # NOTE [Model parallelism on GPUs]: the same run with every tensor the MPI groups carry staged
  # through separate host buffers, as CUDA activations are staged through pinned ones (NOTE [Host
  # staging]): the GPU path's communication on the CPU.
  TRIDENT_COMM_STAGE_HOST=1 run --dp 2 --pp 2 --micro-batches 2 --batch 4 --pp-schedule 1f1b >"$dir/dp_pp_staged.txt"
  same_as_serial "dp 2 x pp 2, staged through host buffers" "$dir/dp_pp_staged.txt"
  same_as_serial "pp 4" "$dir/pp4.txt"
  # tp x pp: two stages, each split over two tensor-parallel ranks (clipping by the serial norm:
  # split parameters' squares summed over tp, then over pp).
  run --pp 2 --tp 2 --micro-batches 2 --batch 8 --pp-schedule 1f1b --remat always --ckpt-dir "$dir/tp_pp_ck" --ckpt-every 3 \
    >"$dir/tp_pp.txt"
  same_as_serial "pp 2 x tp 2" "$dir/tp_pp.txt"
  grep -q "layers per stage {2, 2}" "$dir/tp_pp.txt"
  grep -q "layers per stage {1, 1, 1, 1}" "$dir/pp4.txt"
  # Each rank holds its stage only: embedding (wte 512 x 32 + wpe 16 x 32), two blocks, head
  # (the tied wte and the final norm's 64).
  grep -E "^parameters held per stage \(of [0-9]+\): 16896 12704 12704 16448$" "$dir/pp4.txt"
  check_checkpoints "pp 2 x tp 2" "$dir/tp_pp.txt" "$dir/tp_pp_ck" run --pp 2 --tp 2 --micro-batches 2 --batch 8 --pp-schedule 1f1b \
    --remat always
  # ZeRO-1 over dp x pp (NOTE [ZeRO-1 over pipeline stages]): each stage's optimizer state
  # sharded over its dp group, clipping by the serial norm; its checkpoint is the serial one's.
  zero_pp=(--dp 2 --pp 2 --zero --micro-batches 2 --batch 4 --pp-schedule gpipe)
  run "${zero_pp[@]}" --ckpt-dir "$dir/zero_pp_ck" --ckpt-every 3 >"$dir/zero_pp.txt"
  same_as_serial "dp 2 x pp 2, ZeRO-1" "$dir/zero_pp.txt"
  check_checkpoints "dp 2 x pp 2, ZeRO-1" "$dir/zero_pp.txt" "$dir/zero_pp_ck" run "${zero_pp[@]}"
  # All three parallelisms and ZeRO-1 on eight ranks (tp innermost): the serial run again.
  "$mpiexec" --oversubscribe -np 8 "$exe" "${common[@]}" --dp 2 --pp 2 --tp 2 --zero --micro-batches 2 --batch 4 \
    >"$dir/dp_pp_tp_zero.txt"
  same_as_serial "dp 2 x pp 2 x tp 2, ZeRO-1" "$dir/dp_pp_tp_zero.txt"
  # And interleaved: each rank's two chunks of one layer, split over tp, sharded over dp.
  "$mpiexec" --oversubscribe -np 8 "$exe" "${common[@]}" --dp 2 --pp 2 --pp-chunks 2 --tp 2 --zero --micro-batches 2 --batch 4 \
    --pp-schedule 1f1b >"$dir/dp_pp_tp_zero_chunks.txt"
  same_as_serial "dp 2 x pp 2 (2 chunks) x tp 2, ZeRO-1" "$dir/dp_pp_tp_zero_chunks.txt"
fi
