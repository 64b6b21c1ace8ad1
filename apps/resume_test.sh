#!/usr/bin/env bash
# Exact resume, end to end across processes: a run of 40 steps with a checkpoint every 10, and a
# second process resuming from step 20, must print the same losses for steps 21..40.
set -euo pipefail
exe="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
"$exe" --steps 40 --log-every 1 --ckpt-dir "$dir/ck" --ckpt-every 10 >"$dir/straight.txt"
"$exe" --steps 40 --log-every 1 --resume "$dir/ck/step-20" >"$dir/resumed.txt"
grep -E '^ +(2[1-9]|3[0-9]|40) ' "$dir/straight.txt" >"$dir/a.txt"
grep -E '^ +(2[1-9]|3[0-9]|40) ' "$dir/resumed.txt" >"$dir/b.txt"
[ "$(wc -l <"$dir/a.txt")" -eq 20 ] || { echo "expected 20 logged steps, got $(wc -l <"$dir/a.txt")"; exit 1; }
diff "$dir/a.txt" "$dir/b.txt" && echo "steps 21-40 identical after resume"
