#!/usr/bin/env bash
# The main job: set up, build, and run the seed workload (TinyTransformer, 100 steps of
# random tokens, batch 16, seq 64) on the GPU when one works, otherwise on the CPU.
# Extra arguments go to `tinytrain train` (e.g. --steps 20, --backend cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
# set-up progress on stderr: stdout stays the training log. The Python venv (transformers, for
# the tests) is not needed to train: packages and the build only.
scripts/setup.sh packages >&2
scripts/setup.sh build >&2
exec build/tinytrain train "$@"
