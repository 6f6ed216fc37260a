#!/usr/bin/env bash
# The tests: set up, build, and run every test with ctest (GoogleTest suites, verify on the
# committed PyTorch references, and parity with a fresh full-size PyTorch reference). CUDA
# tests report Skipped without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd build
ctest --output-on-failure -j "$(nproc)"
