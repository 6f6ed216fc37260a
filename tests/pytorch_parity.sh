#!/usr/bin/env bash
# Generates a fresh PyTorch reference with the real python3-torch and verifies it with the
# engine: usage pytorch_parity.sh TINYTRAIN_BIN OUT_DIR [make_reference.py flags...]
# make_reference.py refuses (exit 3) a reference whose own fp32 rounding sits too close to
# verify's tolerances; then the next seed is tried, from 1 up to 5 (docs/numerics.md).
# Exit 77 (ctest: skipped) when no Python with torch is found.
set -uo pipefail
bin=$1 out_dir=$2
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
python=$("$here/scripts/find_python.sh" torch) ||
  { echo "SKIPPED: no python3 with torch (install python3-torch)"; exit 77; }
mkdir -p "$out_dir"
ref="$out_dir/reference.safetensors"
rm -f "$ref"
for seed in 1 2 3 4 5; do
  echo "--- make_reference.py --seed $seed $*"
  "$python" "$here/tools/make_reference.py" --out "$ref" --seed "$seed" "$@"
  rc=$?
  [ $rc -eq 0 ] && break
  [ $rc -eq 3 ] || exit $rc
done
[ -f "$ref" ] || { echo "FAIL: make_reference.py refused seeds 1..5 as ill-conditioned"; exit 1; }
"$bin" verify --backend cpu --threads 2 "$ref"  # summation order fixed: see docs/numerics.md
