#!/usr/bin/env bash
# Installs what tinytrain builds and tests with (Debian 12 packages), then configures and
# builds it in build/. Safe to re-run: apt is only called for packages that are missing.
# The CUDA toolkit is used when present at /usr/local/cuda (or nvcc on PATH); without it
# the CPU engine builds alone. Compilations go through ccache when it is installed (it is one
# of the packages below): a re-run, or a second checkout on the same machine, recompiles only
# what changed; a fresh machine builds cold, as without it.
#
#   scripts/setup.sh            packages, the Python venv, then the build
#   scripts/setup.sh packages   the packages only
#   scripts/setup.sh venv       the Python venv only (.venv/, from tools/requirements.txt)
#   scripts/setup.sh build      the build only (scripts/test.sh times the three apart)
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
case "$what" in all | packages | venv | build) ;; *) echo "usage: scripts/setup.sh [packages|venv|build]" >&2; exit 2 ;; esac

# The project's own Python environment, .venv/: PyTorch 2.x, transformers and their pinned
# dependencies (tools/requirements.txt) for the Hugging Face tests and the PyTorch 2.x
# benchmark. Debian's python3-torch (1.13) stays for what used it before (the references,
# parity, interop): measured on this machine, the venv adds 4.9 GB and 1.5 min to a fresh
# set-up (38 s to download from PyPI, 56 s to install), and nothing that has a Debian package
# moves into it. Installed again only when the requirements change (their hash is kept in the
# venv). Without PyPI the build and training still work: the venv is removed, a line says why,
# and the tests that need it say SKIPPED (scripts/venv_python.sh).
setup_venv() {
  local stamp=.venv/requirements.sha256 want
  want=$(sha256sum tools/requirements.txt | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return 0; fi
  echo "setup: installing tools/requirements.txt into .venv/"
  rm -rf .venv
  # --no-compile: no .pyc for the ~20,000 modules up front (38 s of CPU measured here); Python
  # writes them for the few a test imports, when it first imports them.
  if python3 -m venv .venv && .venv/bin/python -m pip install -q --disable-pip-version-check --no-compile \
      -r tools/requirements.txt; then
    echo "$want" > "$stamp"
  else
    rm -rf .venv
    echo "setup: no Python venv (PyPI unreachable or pip failed): the Hugging Face tests will be SKIPPED" >&2
  fi
}

# clang, its sanitizer runtimes (only recommended by clang's packages, which apt skips here)
# and its OpenMP runtime: the sanitizer build, scripts/test_sanitizers.sh. SentencePiece: the
# BPE tokenizer of `tinytrain prepare`; fortunes: a small text corpus for the toy language
# models (/usr/share/games/fortunes, docs/toy-lm.md); matplotlib: tools/plot_metrics.py.
# oneDNN: the CPU backend's GEMMs (kernels/cpu/gemm.h, chosen in docs/benchmarks.md).
# gcc-12-plugin-dev: the headers of the op-count plugin the emulated kernels are compiled with
# (simt/op_count_plugin.cpp: the arithmetic of each kernel launch, for the cost model).
packages=(cmake ninja-build g++ libopenblas-openmp-dev libdnnl-dev nlohmann-json3-dev libcli11-dev
          libgtest-dev googletest python3-torch clang libclang-rt-14-dev libomp-dev
          libopenmpi-dev openmpi-bin libsentencepiece-dev fortunes
          python3-matplotlib ccache gcc-12-plugin-dev python3-venv)
missing=()
[ "$what" = build ] && packages=()
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

[ "$what" = packages ] && exit 0
if [ "$what" != build ]; then setup_venv; fi
[ "$what" = venv ] && exit 0

# ccache in front of every compiler (g++, nvcc), or an empty launcher, which also clears one a
# previous configure left in the cache when ccache has gone since.
launcher=$(command -v ccache || true)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER_LAUNCHER="$launcher" \
  -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" -DCMAKE_CUDA_COMPILER_LAUNCHER="$launcher"
cmake --build build -j "$(nproc)"
