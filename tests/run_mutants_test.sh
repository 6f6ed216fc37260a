#!/usr/bin/env bash
# simt/run_mutants.py fails, naming the file, when a mutant's kernel file is missing from the
# emulated build (it is skipped, exit 77, only when the build has no emulator at all): a fake
# build whose compile_commands.json has one emulated file, activation's.
set -u
runner=$(dirname "$0")/../simt/run_mutants.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
touch "$work/build.ninja"
printf '[{"file": "%s/simt_gen/activation.cpp", "directory": "%s", "command": "true"}]\n' "$work" "$work" \
  > "$work/compile_commands.json"
python3 "$runner" "$work" cast_last_element_skipped > "$work/out" 2>&1
rc=$?
if [ $rc -ne 1 ] || ! grep -q "kernels/cuda/cast.cu is not in the emulated build" "$work/out"; then
  cat "$work/out"; echo "FAIL: a mutated file missing from the build must fail (exit 1, naming it), got exit $rc"; status=1
fi
echo '[]' > "$work/compile_commands.json"
python3 "$runner" "$work" > "$work/out" 2>&1
rc=$?
if [ $rc -ne 77 ]; then
  cat "$work/out"; echo "FAIL: a build without the emulator must skip (exit 77), got exit $rc"; status=1
fi
[ $status -eq 0 ] && echo "PASS: a missing kernel file fails the mutants, a build without the emulator skips them"
exit $status
