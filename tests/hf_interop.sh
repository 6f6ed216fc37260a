#!/usr/bin/env bash
# tinytrain against Hugging Face transformers itself (tools/hf_interop.py, whose docstring
# lists the checks): import, greedy generation, export after training, the round trip bit for
# bit, and 20 training steps beside transformers + torch.optim.AdamW. Runs with the project's
# venv (scripts/setup.sh venv); exit 77 (ctest: skipped) with the reason when it is missing.
# Usage: hf_interop.sh TINYTRAIN
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
python=$("$here/scripts/venv_python.sh" transformers torch safetensors 2>&1) ||
  { echo "SKIPPED: $python"; exit 77; }
[ -r /usr/share/games/fortunes/fortunes ] || { echo "SKIPPED: no /usr/share/games/fortunes (the fortunes package)"; exit 77; }
# transformers' progress bars and hub lookups: off (nothing is downloaded; the models are made here)
export HF_HUB_OFFLINE=1 TRANSFORMERS_NO_ADVISORY_WARNINGS=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TQDM_DISABLE=1
exec "$python" "$here/tools/hf_interop.py" "$1"
