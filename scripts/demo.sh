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
case "${1:-}" in
  images)  # a small AmoebaNet-D on Fashion-MNIST (Debian's dataset-fashion-mnist) to >= 85% test accuracy
    shift
    cmake --build build -j "$(nproc)" --target train_imagenet
    exec build/apps/train_imagenet --dataset fashion-mnist --model tiny --stem-stride 2 --optimizer adamw --lr 3e-3 \
      --weight-decay 1e-4 --warmup 20 --dropout 0.1 --batch 64 --steps 800 --eval-every 200 --log-every 10 \
      --out-dir runs/images "$@" ;;
esac
cmake --build build -j "$(nproc)" --target train_mlp
exec build/apps/train_mlp "$@"
