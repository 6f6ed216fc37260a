#!/usr/bin/env bash
# tinytrain's NF4 against bitsandbytes itself (tools/nf4_bitsandbytes.py, whose docstring lists
# the checks): the 4-bit codes, the double quantisation and the decoded weights, bit for bit, on
# the CPU. Runs with the project's venv (scripts/setup.sh venv); exit 77 (ctest: skipped) with
# the reason when it is missing.
# Usage: nf4_bitsandbytes.sh NF4_IMAGE   (the tests/nf4_image.cpp program)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
python=$("$here/scripts/venv_python.sh" bitsandbytes torch safetensors numpy 2>&1) ||
  { echo "SKIPPED: $python"; exit 77; }
# bitsandbytes looks for optional kernels on the Hugging Face hub when imported: nothing is
# downloaded here, and no network is needed.
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1
exec "$python" "$here/tools/nf4_bitsandbytes.py" "$1"
