#!/usr/bin/env bash
# The CUDA backend's code on the SIMT emulator, built with AddressSanitizer and
# UndefinedBehaviorSanitizer in build-asan/ (CPU code and emulated kernels alike; the real CUDA
# build is left out, so nothing of NVIDIA's libraries runs under the sanitizers), then the
# emulated CUDA suite without its forward-order registrations (random, and reverse for the op
# tests; the plain build runs forward too) and the emulator's own tests. Device memory is host
# memory and every block's shared memory its own allocation, so an out-of-bounds access in a
# kernel is a report here. Any report fails its test. Needs scripts/setup.sh's packages.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTINYTRAIN_CUDA=OFF -DTINYTRAIN_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$(nproc)"
cd build-asan
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The seed-size training runs (CudaTraining) are left out: under the sanitizers a step of the
# seed workload takes about 14 s, and their kernels and shapes are the op tests' and the
# memory tests' (which run here) at a larger size; the plain build runs them in two schedules.
ctest --output-on-failure -j "$(nproc)" -L 'cuda|simt' -E '^forward\.|CudaTraining'
