#!/usr/bin/env bash
# Trident's main job (the README's first command):
#
#   scripts/demo.sh          GPT-2 on the Brown corpus for about three minutes: installs what is
#                            missing, builds, fetches the corpus and GPT-2's vocabulary
#                            (scripts/get-data.sh), prepares token shards (apps/prepare_text),
#                            prints validation perplexity before and after training, and generates
#                            a few lines from the trained model. `tiny` on the CPU; `124M` in bf16
#                            with context 1024 when the build has CUDA and a GPU is visible
#                            (DEMO_DEVICE=cpu or cuda forces the choice).
#   scripts/demo.sh mlp      the smoke run: an MLP on a synthetic task (apps/train_mlp).
#   scripts/demo.sh images   a small AmoebaNet-D on Fashion-MNIST (apps/train_imagenet).
#
# Extra arguments go to the trainer (see `build/apps/train_gpt2 --help`), e.g.
# `scripts/demo.sh gpt2 --time-limit 60`. DEMO_SECONDS sets the training time (default 180).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
job="gpt2"
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then
  job="$1"
  shift
fi

build() {
  scripts/setup.sh
  export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build build -j "$(nproc)" --target "$@"
}

case "$job" in
  mlp)
    build train_mlp
    exec build/apps/train_mlp "$@"
    ;;
  images)
    # a small AmoebaNet-D on Fashion-MNIST (Debian's dataset-fashion-mnist): AmoebaNet-D(3,16)
    # (97k parameters) with a stride-2 stem (28 -> 13 -> 7 -> 4), AdamW at 5e-3 with a cosine
    # decay over 500 steps of 64 (about half an epoch): ~86.5% test top-1 in about a minute of
    # CPU time; the full 10k test set is evaluated at the end, and the last line gives top-1.
    # Passive OpenMP waits: these ops are small, and on a loaded machine threads spinning at
    # every region's barrier against descheduled team mates made a step up to 10x slower.
    build train_imagenet
    export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
    exec build/apps/train_imagenet --dataset fashion-mnist --model tiny --stem-stride 2 --optimizer adamw --lr 5e-3 \
      --weight-decay 1e-4 --warmup 20 --dropout 0.1 --batch 64 --steps 500 --eval-every 0 --log-every 10 \
      --metrics runs/images/metrics.jsonl "$@"
    ;;
  gpt2)
    build train_gpt2 generate prepare_text prepare_bert
    TRIDENT_BUILD_DIR="$ROOT/build" scripts/get-data.sh
    CACHE="${TRIDENT_DATA_CACHE:-$HOME/.cache/trident}"
    # The GPU when the build has CUDA and one is visible (the trainer's own check: --dry-run
    # resolves --device and fails in one line otherwise).
    DEVICE="${DEMO_DEVICE:-}"
    if [ -z "$DEVICE" ]; then
      DEVICE=cpu
      if build/apps/train_gpt2 --preset 124M --device cuda --dry-run > /dev/null 2>&1; then DEVICE=cuda; fi
    fi
    if [ "$DEVICE" = cuda ]; then
      # 124M (12 layers, 12 heads, width 768) on windows of 1024 tokens in bf16, with the
      # preset's dropout (three minutes on a GPU go over the Brown corpus many times).
      MODEL=(--preset 124M --device cuda --precision bf16 --batch 16 --lr 6e-4 --schedule constant --warmup 50
             --weight-decay 0.1 --eval-batches 10 --log-every 10)
    else
      # tiny (4 layers, 4 heads, width 256, vocabulary 50304) on windows of 128 tokens, without
      # dropout (a few minutes of training never overfits), at a constant learning rate after a
      # short warmup so that stopping at the time limit stops at a sensible rate.
      MODEL=(--preset tiny --model '{"n_positions": 128, "embd_pdrop": 0, "attn_pdrop": 0, "resid_pdrop": 0}'
             --batch 8 --lr 2e-3 --schedule constant --warmup 20 --weight-decay 0.0 --eval-batches 20 --log-every 5)
    fi
    RUN="${DEMO_RUN_DIR:-$ROOT/runs/gpt2-$([ "$DEVICE" = cuda ] && echo 124M || echo tiny)}"
    rm -rf "$RUN"
    echo "demo: GPT-2 on the $DEVICE"
    build/apps/train_gpt2 "${MODEL[@]}" \
      --train "$CACHE/brown/gpt2/brown_train_*.bin" --val "$CACHE/brown/gpt2/brown_val_*.bin" \
      --steps 100000 --time-limit "${DEMO_SECONDS:-180}" --ckpt-dir "$RUN" "$@"
    echo
    echo "=== text from the trained model ==="
    build/apps/generate --ckpt "$RUN" --vocab "$CACHE/gpt2" --device "$DEVICE" --prompt "The jury said" \
      --max-new-tokens 40 --num-samples 3 --temperature 0.8 --top-k 40 --seed 7
    ;;
  *)
    echo "demo: unknown job '$job' (gpt2, mlp or images)" >&2
    exit 2
    ;;
esac
