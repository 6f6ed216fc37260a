#!/usr/bin/env bash
# tinytrain's LoRA against PEFT itself (tools/lora_interop.py, whose docstring lists the checks):
# initial adapters in PEFT's format, 20 training steps beside PEFT + torch.optim.AdamW, the
# trained adapters' logits, merge against merge_and_unload, and an adapter PEFT made loaded back.
# Runs with the project's venv (scripts/setup.sh venv); exit 77 (ctest: skipped) with the
# reason when it is missing.
# Usage: lora_interop.sh TINYTRAIN
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
python=$("$here/scripts/venv_python.sh" transformers torch safetensors peft bitsandbytes 2>&1) ||
  { echo "SKIPPED: $python"; exit 77; }
[ -r /usr/share/games/fortunes/fortunes ] || { echo "SKIPPED: no /usr/share/games/fortunes (the fortunes package)"; exit 77; }
# transformers' and PEFT's progress bars and hub lookups: off (nothing is downloaded)
export HF_HUB_OFFLINE=1 TRANSFORMERS_NO_ADVISORY_WARNINGS=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TQDM_DISABLE=1
exec "$python" "$here/tools/lora_interop.py" "$1"
