#!/usr/bin/env bash
# --device on a machine without a usable GPU (NOTE [Device in the apps], apps/device.h): each of
# train_gpt2, train_bert and generate refuses --device cuda in one line on stderr that names the
# flag and the reason (a build without CUDA, or no CUDA device found), with exit status 2, and
# refuses a device that is not cpu/cuda/cuda:N naming the flag.
#   device_option_test.sh BIN_DIR HAVE_CUDA(ON|OFF)
set -euo pipefail
bin="$1"
have_cuda="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
expect_fail() {  # words, command...
  local want="$1"; shift
  set +e
  "$@" >"$dir/out.txt" 2>"$dir/err.txt"
  local rc=$?
  set -e
  [ "$rc" -eq 2 ] || { echo "expected exit 2 for: $*, got $rc"; cat "$dir/err.txt"; exit 1; }
  [ "$(wc -l <"$dir/err.txt")" -eq 1 ] || { echo "expected one line for: $*"; cat "$dir/err.txt"; exit 1; }
  grep -qF -- "$want" "$dir/err.txt" || { echo "expected '$want' for: $*"; cat "$dir/err.txt"; exit 1; }
  echo "ok: $* -> $(cat "$dir/err.txt")"
}
for app in train_gpt2 train_bert; do
  expect_fail "--device must be cpu, cuda or cuda:N, got 'tpu'" "$bin/$app" --device tpu --dry-run
  expect_fail "--device must be cpu, cuda or cuda:N, got 'cuda:x'" "$bin/$app" --device cuda:x --dry-run
done
expect_fail "--device must be cpu, cuda or cuda:N, got 'tpu'" "$bin/generate" --ckpt "$dir/none" --device tpu

if [ "$have_cuda" = ON ] && nvidia-smi -L >/dev/null 2>&1; then
  echo "a GPU is present: the refusals of --device cuda are not tested here (scripts/app-cuda-check.sh runs it)"
  exit 0
fi
if [ "$have_cuda" = ON ]; then
  why="no CUDA device found"
else
  why="no CUDA backend (built without CUDA"
fi
for app in train_gpt2 train_bert; do
  expect_fail "--device cuda" "$bin/$app" --device cuda --dry-run
  grep -qF "$why" "$dir/err.txt" || { echo "expected '$why'"; cat "$dir/err.txt"; exit 1; }
  expect_fail "--device cuda:1" "$bin/$app" --device cuda:1 --steps 1
  grep -qF "$why" "$dir/err.txt" || { echo "expected '$why'"; cat "$dir/err.txt"; exit 1; }
done
expect_fail "--device cuda" "$bin/generate" --ckpt "$dir/none" --device cuda
grep -qF "$why" "$dir/err.txt" || { echo "expected '$why'"; cat "$dir/err.txt"; exit 1; }
echo "--device refused in one line each"
