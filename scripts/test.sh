#!/usr/bin/env bash
# The tests: set up, build, and run every test with ctest, in three groups:
#   1. the CPU engine: GoogleTest suites, verify on the committed PyTorch references, parity
#      with a fresh full-size PyTorch reference, the CLI;
#   2. the CUDA backend (label "cuda"): on the GPU when one works, else its unchanged code on
#      the SIMT emulator (docs/emulation.md), each test in two schedules (the op tests in
#      three); then the mutants
#      (simt/mutants.txt), which the emulated suite must catch;
#   3. the CPU suite (without PyTorch parity) and the emulated CUDA suite again, built with
#      clang's AddressSanitizer and UndefinedBehaviorSanitizer (build-asan/,
#      scripts/test_sanitizers.sh, whose header says which tests it leaves out or runs at a
#      reduced size); skipped with --no-sanitizers.
# The last line adds them up: "tests: N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
sanitizers=1
[ "${1:-}" = "--no-sanitizers" ] && sanitizers=0
scripts/setup.sh || exit 1

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
run_group() {  # title, then ctest arguments
  local title=$1
  shift
  echo "== $title"
  ctest --output-on-failure -j "$(nproc)" "$@" 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
}

cd build
run_group "CPU engine, PyTorch parity, CLI" -LE 'cuda|mutants'
run_group "CUDA backend (on the GPU if one works, else on the SIMT emulator), schedules forward, random (and reverse)" -L cuda
run_group "mutants of the CUDA kernels, caught by the emulated suite" -L mutants
cd ..
if [ "$sanitizers" = 1 ]; then
  echo "== the CPU and emulated CUDA suites under AddressSanitizer and UndefinedBehaviorSanitizer (clang)"
  scripts/test_sanitizers.sh 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

# ctest's "N% tests passed, F tests failed out of T" lines, and its skipped tests, added up.
read -r total failed < <(awk '/tests passed, .* tests failed out of/ {t += $NF; f += $4} END {print t+0, f+0}' "$log")
skipped=$(grep -c -- '\*\*\*Skipped' "$log")
echo "tests: $((total - failed - skipped)) passed, $failed failed, $skipped skipped"
exit $status
