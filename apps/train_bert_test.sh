#!/usr/bin/env bash
# train_bert end to end on a corpus and a vocabulary made here (prepare_bert makes the shards).
# Usage: train_bert_test.sh TRAIN_BERT PREPARE_BERT [MPIEXEC NP]
# Serially (no MPIEXEC): 6 steps with a checkpoint at step 3, then --resume from it prints steps
# 4-6 identical (dropout on: the generators resume too); --dry-run; bad input (no --train, an
# unknown preset, shards made with more tokens than the model's vocab_size, a glob matching no
# file) gives one line naming it and exit status 2.
# Under MPIEXEC with NP = 2: --pp 2 (GPipe, and 1F1B cut by compute), --tp 2 (with and without
# --sequence-parallel), --dp 2 and (on four ranks) --pp 2 --pp-chunks 2 --tp 2 print the serial run's losses within 1e-5 relative and its
# validation losses (NOTE [Parallel training apps]); with NP = 4: --pp 4 (one layer per stage,
# each rank holding its stage only), --dp 2 --pp 2, and --pp 2 --tp 2, whose checkpoint resumes
# serially and at its own layout. Every --pp run builds each stage alone (NOTE [Stage-only
# build]).
set -euo pipefail
exe="$1"
prepare="$2"
mpiexec="${3:-}"
np="${4:-1}"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
python3 - "$dir" <<'PY'
import os, random, sys
d = sys.argv[1]
words = ("the of and to in that is was he for it with as his on be at by this had not are but from or have an they "
         "which one you were her all she there would their we him been has when who will more no if out so said what up "
         "its about into than them can only other new some could time these two may then do first any my now such like "
         "our over man me even most made after also did many before must through back years where much your way well "
         "down should because each just those people how too little state good very make world still own see men work "
         "long get here between both life being under never day same another know while last might us great old year "
         "off come since against go came right used take three").split()
rng = random.Random(5)
with open(f"{d}/vocab.txt", "w") as f:
    f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(words)) + [".", ","]) + "\n")
os.makedirs(f"{d}/corpus")
for i in range(40):
    with open(f"{d}/corpus/doc{i:03d}.txt", "w") as f:
        for _ in range(rng.randint(4, 9)):
            f.write(" ".join(rng.choice(words) for _ in range(rng.randint(5, 14))) + " .\n")
PY
"$prepare" "$dir/corpus" --vocab "$dir/vocab.txt" --out "$dir/data/tiny" --max-seq-len 32 --val-docs 4 --dupe-factor 2 \
  --quiet --threads 1 >/dev/null
# Two layers: 4 in the list (embeddings, layer.0, layer.1, heads).
model='{"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 32, "hidden_dropout_prob": 0, "attention_probs_dropout_prob": 0}'
common=(--train "$dir/data/tiny_train_*.bin" --val "$dir/data/tiny_val_*.bin" --model "$model" --grad-accum 2 --lr 3e-3
        --warmup 2 --steps 6 --log-every 1 --eval-batches 2 --threads 1 --workers 1 --grad-clip 0.5)
losses() { grep -E '^step +[0-9]+/' "$1" | cut -d'|' -f1-2; }
fails_with() {  # WHAT ARGS...: exit status 2 and one line on stderr naming WHAT
  local what="$1"
  shift
  local rc=0
  "$exe" "$@" >/dev/null 2>"$dir/err.txt" || rc=$?
  [ "$rc" = 2 ] || { echo "exit status $rc, not 2, for: $*"; cat "$dir/err.txt"; exit 1; }
  [ "$(wc -l <"$dir/err.txt")" = 1 ] || { echo "more than one line for: $*"; cat "$dir/err.txt"; exit 1; }
  grep -qF -- "$what" "$dir/err.txt" || { echo "the error does not name '$what': $(cat "$dir/err.txt")"; exit 1; }
  echo "bad input, one line: $(cat "$dir/err.txt")"
}

if [ -z "$mpiexec" ]; then
  dropout='{"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 32, "hidden_dropout_prob": 0.2, "attention_probs_dropout_prob": 0.1}'
  "$exe" "${common[@]}" --batch 8 --model "$dropout" --ckpt-dir "$dir/ck" --ckpt-every 3 >"$dir/straight.txt"
  "$exe" "${common[@]}" --batch 8 --model "$dropout" --resume "$dir/ck/step-3" >"$dir/resumed.txt"
  [ "$(losses "$dir/straight.txt" | wc -l)" = 6 ] || { echo "6 step lines expected"; cat "$dir/straight.txt"; exit 1; }
  diff <(losses "$dir/straight.txt" | grep -E '^step +[4-6]/') <(losses "$dir/resumed.txt")
  echo "steps 4-6 identical after --resume (dropout on)"
  "$exe" "${common[@]}" --batch 8 --dry-run >"$dir/dry.txt"
  grep -q "^parameters: " "$dir/dry.txt" && grep -q "^memory estimate for training: " "$dir/dry.txt"
  fails_with "--train" --model "$model" --steps 1
  fails_with "nonesuch" --train "$dir/data/tiny_train_*.bin" --preset nonesuch --steps 1
  fails_with "vocab_size" --train "$dir/data/tiny_train_*.bin" --model '{"vocab_size": 50}' --steps 1
  fails_with "$dir/nothing_*.bin" --train "$dir/nothing_*.bin" --steps 1
  exit 0
fi

run() { "$mpiexec" --oversubscribe -np "$np" "$exe" "${common[@]}" "$@"; }
"$exe" --batch 8 "${common[@]}" --ckpt-dir "$dir/serial_ck" --ckpt-every 3 >"$dir/serial.txt"
same_as_serial() {  # NAME FILE [SERIAL_FILE [STEPS]]: the step losses within 1e-5 relative, and the validation
  python3 - "${3:-$dir/serial.txt}" "$2" "$1" "${4:-1-6}" <<'PY'
import re, sys
def losses(path):
    return {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"^step +(\d+)/\d+ \| loss (\S+)", open(path).read(), re.M)}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
lo, hi = map(int, sys.argv[4].split("-"))
assert sorted(b) == list(range(lo, hi + 1)), f"{sys.argv[3]}: steps {sorted(b)} printed, {lo}-{hi} expected (world rank 0 alone prints)"
for s in b:
    assert abs(a[s] - b[s]) <= 1e-5 * abs(a[s]), f"{sys.argv[3]}: step {s}: serial loss {a[s]}, this run's {b[s]}"
print(f"{sys.argv[3]}: the serial run's losses within 1e-5 relative: {[b[s] for s in sorted(b)]}")
PY
  # Validation through the stages and shards (before and after training), for whole runs.
  [ "${4:-1-6}" != 1-6 ] || python3 "$(dirname "$0")/same_validation.py" "${3:-$dir/serial.txt}" "$2" "$1"
}
if [ "$np" = 2 ]; then
  run --pp 2 --micro-batches 4 --batch 8 --pp-schedule gpipe --remat always >"$dir/pp.txt"
  run --pp 2 --micro-batches 2 --batch 8 --pp-schedule 1f1b --pp-balance compute >"$dir/pp_compute.txt"
  run --tp 2 --batch 8 >"$dir/tp.txt"
  run --tp 2 --sequence-parallel --batch 8 >"$dir/sp.txt"
  run --dp 2 --batch 4 >"$dir/dp.txt"
  same_as_serial "pp 2" "$dir/pp.txt"
  same_as_serial "pp 2, 1f1b, cut by compute" "$dir/pp_compute.txt"
  # Both cut {2, 2} here (by compute, this small vocabulary's heads weigh a tenth of a layer).
  grep -q "layers per stage {2, 2}, by parameters" "$dir/pp.txt"
  grep -q "layers per stage {2, 2}, by compute" "$dir/pp_compute.txt"
  same_as_serial "tp 2" "$dir/tp.txt"
  same_as_serial "tp 2, sequence parallel" "$dir/sp.txt"
  same_as_serial "dp 2" "$dir/dp.txt"
  # NOTE [Interleaved schedule]: two chunks per rank, one layer each, split over tp as well.
  "$mpiexec" --oversubscribe -np 4 "$exe" "${common[@]}" --pp 2 --pp-chunks 2 --tp 2 --micro-batches 2 --batch 8 \
    --pp-schedule 1f1b >"$dir/chunks_tp.txt"
  grep -q "layers per virtual stage {1, 1, 1, 1}" "$dir/chunks_tp.txt" || { cat "$dir/chunks_tp.txt"; exit 1; }
  same_as_serial "pp 2 x 2 chunks x tp 2" "$dir/chunks_tp.txt"
else
  run --pp 4 --micro-batches 4 --batch 8 >"$dir/pp4.txt"
  run --dp 2 --pp 2 --micro-batches 2 --batch 4 --pp-schedule 1f1b >"$dir/dp_pp.txt"
  run --pp 2 --tp 2 --micro-batches 2 --batch 8 --ckpt-dir "$dir/tp_pp_ck" --ckpt-every 3 >"$dir/tp_pp.txt"
  same_as_serial "pp 4" "$dir/pp4.txt"
  same_as_serial "dp 2 x pp 2" "$dir/dp_pp.txt"
  same_as_serial "pp 2 x tp 2" "$dir/tp_pp.txt"
  grep -q "layers per stage {1, 1, 1, 1}" "$dir/pp4.txt"
  # Each rank holds its stage only. Embeddings: words (the vocabulary's V, unpadded) x 32, 32
  # positions x 32, 2 segments x 32, LayerNorm 64; a layer: 4 (32 x 32 + 32) + 2 (32 x 64)
  # + 64 + 32 + 2 x 64; the heads: pooler 32 x 32 + 32, transform 32 x 32 + 32 + 64, the decoder
  # bias (V), NSP 32 x 2 + 2, and the tied word embeddings.
  python3 - "$dir/pp4.txt" "$dir/vocab.txt" <<'PY'
import re, sys
held = [int(x) for x in re.search(r"^parameters held per stage \(of \d+\): ([\d ]+)$", open(sys.argv[1]).read(), re.M).group(1).split()]
words = len(open(sys.argv[2]).read().splitlines())
V = words
layer = 4 * (32 * 32 + 32) + 2 * 32 * 64 + 64 + 32 + 2 * 64
expected = [V * 32 + 32 * 32 + 2 * 32 + 64, layer, layer, 32 * 32 + 32 + 32 * 32 + 32 + 64 + V + 32 * 2 + 2 + V * 32]
assert held == expected, f"parameters held per stage {held}, expected {expected}"
print(f"pp 4: each rank holds its stage only: {held}")
PY
  # The pp 2 x tp 2 checkpoint resumed at its own layout (steps 4-6 identical) and serially.
  run --pp 2 --tp 2 --micro-batches 2 --batch 8 --resume "$dir/tp_pp_ck/step-3" >"$dir/tp_pp_resumed.txt"
  diff <(losses "$dir/tp_pp.txt" | grep -E '^step +[4-6]/') <(losses "$dir/tp_pp_resumed.txt")
  echo "pp 2 x tp 2: steps 4-6 identical after --resume at the same layout"
  "$exe" --batch 8 "${common[@]}" --resume "$dir/tp_pp_ck/step-3" >"$dir/serial_resumed.txt"
  same_as_serial "the pp 2 x tp 2 checkpoint resumed serially" "$dir/serial_resumed.txt" "$dir/serial.txt" 4-6
  run --pp 2 --tp 2 --micro-batches 2 --batch 8 --resume "$dir/serial_ck/step-3" >"$dir/from_serial.txt"
  same_as_serial "the serial checkpoint resumed at pp 2 x tp 2" "$dir/from_serial.txt" "$dir/serial.txt" 4-6
fi
