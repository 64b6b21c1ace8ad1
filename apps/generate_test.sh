#!/usr/bin/env bash
# generate end to end on the CPU: train_gpt2 learns the tiny shards' token cycle (each token
# determines the next: t -> 5 ((t / 5 + 37) mod 97)), then generate continues a prompt with it:
#  - greedy decoding from the checkpoint gives the cycle, byte for byte (vocabulary from
#    make_tiny_vocab.py: ids below 256 are bytes, the others "t<id>"), with and without the
#    key/value cache;
#  - --hf reads the checkpoint's model.safetensors given a config.json beside it (the same text);
#    without one, a width that is no multiple of 64 is refused in one line saying why;
#  - sampling with a seed repeats itself; the timing goes to stderr, not into the samples;
#  - a missing checkpoint is one line and exit 2.
set -euo pipefail
bin="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
here="$(dirname "$0")"
python3 "$here/make_tiny_shards.py" "$dir" 4000 600
python3 "$here/make_tiny_vocab.py" "$dir/vocab"
model='{"n_layer": 2, "n_head": 2, "n_embd": 32, "n_positions": 32, "vocab_size": 500, "padded_vocab_size": 512}'
"$bin/train_gpt2" --train "$dir/tiny_train_*.bin" --val "$dir/tiny_val_*.bin" --model "$model" --batch 8 --lr 1e-2 \
  --warmup 2 --steps 150 --log-every 50 --eval-every 150 --eval-batches 4 --threads 1 --workers 1 \
  --ckpt-dir "$dir/ck" --ckpt-every 150 >"$dir/train.txt"
grep '^validation perplexity' "$dir/train.txt"

gen() {  # output file, flags...
  local out="$1"; shift
  "$bin/generate" --vocab "$dir/vocab" --prompt "2" --max-new-tokens 12 --num-samples 2 --threads 1 "$@" \
    >"$dir/$out.txt" 2>"$dir/$out.err"
  grep -av '^loaded ' "$dir/$out.txt" >"$dir/$out.samples"
}
# The prompt "2" is byte 50 = token 50; the cycle from there, as the decoder writes it.
python3 - "$dir/want.samples" <<'PY'
import sys
ids = [50]
for _ in range(12):
    ids.append(5 * ((ids[-1] // 5 + 37) % 97))
text = b"".join(bytes([t]) if t < 256 else b"t%d" % t for t in ids)
with open(sys.argv[1], "wb") as f:
    for s in (1, 2):
        f.write(b"--- sample %d ---\n" % s + text + b"\n")
PY
gen cached --ckpt "$dir/ck" --greedy
cmp "$dir/cached.samples" "$dir/want.samples" || { echo "greedy generation is not the learned cycle:"; cat -v "$dir/cached.samples"; exit 1; }
echo "greedy generation continues the cycle"
gen uncached --ckpt "$dir/ck" --greedy --no-cache
cmp "$dir/uncached.samples" "$dir/want.samples"
echo "the same without the cache"
grep -q 'tokens x 2 samples in .* s: the prompt (1 tokens) and the first in .* ms, then .* tokens/s$' "$dir/cached.err" ||
  { echo "no timing line on stderr:"; cat "$dir/cached.err"; exit 1; }

# --hf: the checkpoint's weights are Hugging Face's names and layout; the config beside them.
mkdir "$dir/hf"
cp "$dir/ck/step-150/model.safetensors" "$dir/hf/"
if "$bin/generate" --hf "$dir/hf" --vocab "$dir/vocab" --prompt "2" >/dev/null 2>"$dir/noconfig.err"; then
  echo "a width of 32 without config.json was accepted"; exit 1
fi
grep -q 'has no config.json beside it, and its width 32 is not a multiple of 64' "$dir/noconfig.err" ||
  { cat "$dir/noconfig.err"; exit 1; }
[ "$(wc -l <"$dir/noconfig.err")" -eq 1 ]
echo '{"n_layer": 2, "n_head": 2, "n_embd": 32, "n_positions": 32, "vocab_size": 500}' >"$dir/hf/config.json"
gen hf --hf "$dir/hf" --greedy
cmp "$dir/hf.samples" "$dir/want.samples"
echo "--hf gives the same text"

gen s1 --ckpt "$dir/ck" --temperature 1.5 --seed 11
gen s2 --ckpt "$dir/ck" --temperature 1.5 --seed 11
cmp "$dir/s1.samples" "$dir/s2.samples"
echo "sampling with a seed repeats itself"

if "$bin/generate" --ckpt "$dir/none" --vocab "$dir/vocab" >/dev/null 2>"$dir/missing.err"; then
  echo "a missing checkpoint was accepted"; exit 1
fi
[ "$(wc -l <"$dir/missing.err")" -eq 1 ] && grep -q "$dir/none" "$dir/missing.err" || { cat "$dir/missing.err"; exit 1; }
echo "a missing checkpoint: $(cat "$dir/missing.err")"
