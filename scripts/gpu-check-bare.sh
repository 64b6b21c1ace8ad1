#!/usr/bin/env bash
# Runs scripts/gpu-check.sh on this Debian machine as the GPU machine would see it: in a mount
# namespace where the Debian-only headers and libraries the project can use (nlohmann-json,
# CLI11, fmt, PCRE2, zlib, OpenBLAS, stb, GoogleTest, OpenMPI) are hidden, so that only .carry/
# (scripts/prepare-carry.sh) and the CUDA toolkit can serve the build. Without a GPU the CUDA
# tests skip and the GPU rows fail; what this checks is that the configure and build rows pass
# (and which tests exist), before a lent GPU's minutes are spent finding out.
#   sudo scripts/gpu-check-bare.sh [OUT]        # root: it mounts; default OUT /tmp/gpu-check-bare
#   WORK=/tmp/gpu-check-bare.XXXX STEPS=tests FILTER='*Attention*' scripts/gpu-check-bare.sh
# Runs from a clean clone of HEAD (with .carry/ prepared there) so that nothing built here leaks
# in; WORK names the folder of an earlier run to update its clone to HEAD and reuse its build.
# gpu-check.sh's variables (STEPS, FILTER, ARCHS, BUDGET, ...) pass through.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-/tmp/gpu-check-bare}"
rm -rf "$OUT"
mkdir -p "$OUT"
if [[ -n "${WORK:-}" && -d "$WORK/src/.git" ]]; then
  git -C "$WORK/src" fetch -q "$ROOT" HEAD
  git -C "$WORK/src" reset -q --hard FETCH_HEAD
else
  WORK="$(mktemp -d /tmp/gpu-check-bare.XXXXXX)"
  git clone -q "$ROOT" "$WORK/src"
fi
echo "work folder: $WORK"
"$WORK/src/scripts/prepare-carry.sh" > "$OUT/prepare-carry.log"

# Inside the namespace: each of /usr/include, /usr/include/x86_64-linux-gnu and
# /usr/lib/x86_64-linux-gnu becomes a tmpfs of links to the original entries, less the hidden
# ones (the originals stay reachable under $WORK/orig).
unshare -m bash -s "$WORK" "$OUT" <<'NS'
set -euo pipefail
WORK="$1" OUT="$2"
hide_in() {  # dir pattern...
  local dir="$1" orig new n e
  shift
  orig="$WORK/orig$(echo "$dir" | tr / _)"
  new="$WORK/new$(echo "$dir" | tr / _)"
  mkdir -p "$orig" "$new"
  mount --bind "$dir" "$orig"
  mount -t tmpfs tmpfs "$new"
  for e in "$orig"/* "$orig"/.[!.]*; do
    [[ -e "$e" || -L "$e" ]] || continue
    n=$(basename "$e")
    local skip=0 p
    for p in "$@"; do
      # shellcheck disable=SC2254
      case "$n" in $p) skip=1 ;; esac
    done
    (( skip )) || ln -s "$e" "$new/$n"
  done
  mount --bind "$new" "$dir"
}
hide_in /usr/include/x86_64-linux-gnu 'openblas*' 'openmpi*' 'mpich*' 'cblas*.h'
hide_in /usr/include nlohmann CLI fmt stb gtest gmock 'pcre2*.h' zlib.h zconf.h 'cblas*.h' 'lapack*.h' 'openblas*' 'mpi*.h' 'openmpi*'
hide_in /usr/lib/x86_64-linux-gnu 'libopenblas*' 'libblas*' 'liblapack*' 'openblas*' 'blas' 'lapack' 'libfmt*' \
  'libpcre2-8.so' 'libpcre2-8.a' 'libpcre2-*.a' 'libz.so' 'libz.a' 'libgtest*' 'libgmock*' 'openmpi' 'libmpi*' 'libopen-*' \
  'cmake' 'pkgconfig'
mount -t tmpfs tmpfs /usr/src  # GoogleTest's sources
mount -t tmpfs tmpfs /usr/share/cmake 2>/dev/null || true  # CLI11's and others' CMake packages
cd "$WORK/src"
OUT="$OUT" BUILD_DIR="$WORK/build" scripts/gpu-check.sh || true
NS
echo "logs: $OUT (the build: $OUT/build.log)"
