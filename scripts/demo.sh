#!/usr/bin/env bash
# Trident's main job (the README's second command). For now: build, then train a small MLP on a
# synthetic task and show the loss falling. The models issue replaces it with GPT-2 on a real
# corpus. Arguments go to the trainer (see `build/apps/train_mlp --help`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/setup.sh
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j "$(nproc)" --target train_mlp
exec build/apps/train_mlp "$@"
