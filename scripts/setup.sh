#!/usr/bin/env bash
# Installs what tinytrain builds and tests with (Debian 12 packages), then configures and
# builds it in build/. Safe to re-run: apt is only called for packages that are missing.
# The CUDA toolkit is used when present at /usr/local/cuda (or nvcc on PATH); without it
# the CPU engine builds alone.
set -euo pipefail
cd "$(dirname "$0")/.."

# clang, its sanitizer runtimes (only recommended by clang's packages, which apt skips here)
# and its OpenMP runtime: the sanitizer build, scripts/test_sanitizers.sh. SentencePiece: the
# BPE tokenizer of `tinytrain prepare`; fortunes: a small text corpus for the toy language
# models (/usr/share/games/fortunes, docs/toy-lm.md); matplotlib: tools/plot_metrics.py.
packages=(cmake ninja-build g++ libopenblas-openmp-dev nlohmann-json3-dev libcli11-dev
          libgtest-dev googletest python3-torch clang libclang-rt-14-dev libomp-dev
          libopenmpi-dev openmpi-bin libsentencepiece-dev fortunes
          python3-matplotlib)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"
