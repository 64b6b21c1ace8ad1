#!/usr/bin/env bash
# train_gpt2 end to end on a tiny shard made here (llm.c format: a 256-int32 header, then uint16
# tokens): 12 steps with a checkpoint every 4, then a second process resuming from step 8 must
# print the same losses for steps 9..12; bad input gives one line and a non-zero exit.
set -euo pipefail
exe="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
# A repetitive token stream (a 97-token cycle over ids < 500) that a small model learns quickly.
python3 "$(dirname "$0")/make_tiny_shards.py" "$dir" 4000 600
model='{"n_layer": 2, "n_head": 2, "n_embd": 32, "n_positions": 32, "vocab_size": 500, "padded_vocab_size": 512}'
run() {
  "$exe" --train "$dir/tiny_train_*.bin" --val "$dir/tiny_val_*.bin" --model "$model" --batch 4 --grad-accum 2 \
    --lr 3e-3 --warmup 2 --steps 12 --log-every 1 --eval-every 6 --eval-batches 4 --threads 1 --workers 2 "$@"
}
run --ckpt-dir "$dir/ck" --ckpt-every 4 >"$dir/straight.txt"
cat "$dir/straight.txt"
run --resume "$dir/ck/step-8" >"$dir/resumed.txt"
grep -E '^step +(9|1[0-2])/' "$dir/straight.txt" >"$dir/a.txt"
grep -E '^step +(9|1[0-2])/' "$dir/resumed.txt" >"$dir/b.txt"
[ "$(wc -l <"$dir/a.txt")" -eq 4 ] || { echo "expected 4 logged steps, got $(wc -l <"$dir/a.txt")"; exit 1; }
# The tokens/s and ETA columns differ; the step, loss and learning rate must not.
diff <(cut -d'|' -f1-3 "$dir/a.txt") <(cut -d'|' -f1-3 "$dir/b.txt")
echo "steps 9-12 identical after resume"
grep -q '^validation perplexity: ' "$dir/straight.txt"
[ "$(wc -l <"$dir/ck/metrics.jsonl")" -ge 14 ] || { echo "metrics.jsonl too short"; exit 1; }
[ -e "$dir/ck/step-12/trainer.json" ]
# A JSON config with a flag overriding it.
echo '{"steps": 2, "batch": 2, "log_every": 1, "model": "{\"n_layer\": 1, \"n_embd\": 16, \"n_head\": 2, \"n_positions\": 16, \"vocab_size\": 500}"}' >"$dir/c.json"
"$exe" --config "$dir/c.json" --train "$dir/tiny_train_*.bin" --steps 3 --threads 1 >"$dir/cfg.txt"
grep -q '^step      3/3 ' "$dir/cfg.txt" || { cat "$dir/cfg.txt"; echo "--steps 3 did not override the config's 2"; exit 1; }
# --precision bf16: the validation loss is computed in f32 (inside the autocast scope), not
# rounded to bf16. One batch, so a loss rounded to bf16 would be logged as such: its f32 bits
# would end in 16 zeros (an f32 loss does so by chance once in 65536).
run --steps 1 --warmup 0 --eval-batches 1 --precision bf16 --metrics "$dir/bf16.jsonl" >/dev/null
python3 - "$dir/bf16.jsonl" <<'PY'
import json, struct, sys
vals = [json.loads(l)["val_loss"] for l in open(sys.argv[1]) if "val_loss" in l]
assert len(vals) == 2, vals
for v in vals:
    bits = struct.unpack("<I", struct.pack("<f", v))[0]
    assert bits & 0xFFFF, f"validation loss {v!r} under bf16 is rounded to bf16 (computed outside autocast?)"
print("bf16 validation losses in f32:", vals)
PY
# --profile: after training, a table of the ops that took the steps' time (NOTE [Op profiler]),
# the matrix products and the attention among them.
"$exe" --config "$dir/c.json" --train "$dir/tiny_train_*.bin" --threads 1 --profile >"$dir/profile.txt"
for op in 'op profile of steps 1-2' matmul attention_forward attention_backward optimizer.step total; do
  grep -q -- "$op" "$dir/profile.txt" || { cat "$dir/profile.txt"; echo "--profile: no '$op' in the table"; exit 1; }
done
# Bad input: one line on stderr, non-zero exit.
expect_fail() {
  local want="$1"; shift
  if "$@" >"$dir/out.txt" 2>"$dir/err.txt"; then echo "expected failure: $*"; exit 1; fi
  [ "$(wc -l <"$dir/err.txt")" -eq 1 ] || { echo "expected one line for: $*"; cat "$dir/err.txt"; exit 1; }
  grep -q -- "$want" "$dir/err.txt" || { echo "expected '$want' for: $*"; cat "$dir/err.txt"; exit 1; }
}
expect_fail "no file matches" "$exe" --train "$dir/missing_*.bin"
expect_fail "unknown GPT-2 preset 'huge'" "$exe" --preset huge --dry-run
echo 'not json' >"$dir/bad.json"
expect_fail "not valid JSON" "$exe" --config "$dir/bad.json"
echo '{"stepz": 3}' >"$dir/bad2.json"
expect_fail 'unknown key "stepz"' "$exe" --config "$dir/bad2.json"
head -c 100 "$dir/tiny_train_000000.bin" >"$dir/trunc_train_000000.bin"
expect_fail "trunc_train_000000.bin" "$exe" --train "$dir/trunc_*.bin"
expect_fail "another configuration" run --model '{"n_layer": 1, "n_head": 2, "n_embd": 32, "n_positions": 32, "vocab_size": 500}' --resume "$dir/ck/step-8"
expect_fail "not a folder" run --resume "$dir/nope"
expect_fail "--device must be cpu, cuda or cuda:N" "$exe" --device tpu --dry-run
expect_fail "--initial-loss-scale must be positive" "$exe" --precision fp16 --initial-loss-scale -4 --dry-run
expect_fail "--initial-loss-scale is fp16's" "$exe" --precision bf16 --initial-loss-scale 1024 --dry-run
echo "bad input: one clear line each"
