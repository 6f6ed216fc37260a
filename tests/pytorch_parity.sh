#!/usr/bin/env bash
# Generates a fresh PyTorch reference with the real python3-torch and verifies it with the
# engine: usage pytorch_parity.sh TINYTRAIN_BIN OUT_DIR [make_reference.py flags...]
# Exit 77 (ctest: skipped) when no Python with torch is found.
set -euo pipefail
bin=$1 out_dir=$2
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
python=$("$here/scripts/find_python.sh" torch) ||
  { echo "SKIPPED: no python3 with torch (install python3-torch)"; exit 77; }
mkdir -p "$out_dir"
ref="$out_dir/reference.safetensors"
"$python" "$here/tools/make_reference.py" --out "$ref" "$@"
"$bin" verify --backend cpu --threads 2 "$ref"  # summation order fixed: see docs/numerics.md
