#!/usr/bin/env bash
# Installs, idempotently, the Debian packages Trident's build and tests need.
# As root it runs apt-get itself (apt-get update first, and only when something is missing);
# otherwise it prints the exact sudo command to run. CUDA, cuDNN and NCCL are never
# downloaded: the build finds them under /usr/local/cuda (or CUDAToolkit_ROOT, CUDNN_ROOT,
# NCCL_ROOT) when they are there.
set -euo pipefail

PACKAGES=(
  cmake ninja-build g++ ccache pkg-config
  libopenblas-dev
  libopenmpi-dev openmpi-bin
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libstb-dev libpcre2-dev zlib1g-dev
  dataset-fashion-mnist
  python3
  gnuplot-nox
  valgrind
)
# Optional extras a script asks for by name (e.g. `scripts/setup.sh python3-torch`).
PACKAGES+=("$@")

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "setup: missing packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "setup: not root; run:"
  echo "  sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: installed ${missing[*]}"
