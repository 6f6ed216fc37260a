#!/usr/bin/env bash
# The tests: set up, build, and run every test with ctest, in stages:
#   1. the CPU engine: GoogleTest suites, verify on the committed PyTorch references, parity
#      with a fresh full-size PyTorch reference, the CLI;
#   2. the CUDA backend (label "cuda"): on the GPU when one works, else its unchanged code on
#      the SIMT emulator (docs/emulation.md): the kernel suites in every schedule, the
#      end-to-end ones (training, memory, KV cache, verify) in one (tests/CMakeLists.txt);
#   3. the mutants (simt/mutants.txt), which the emulated suite must catch;
#   4. the CPU suite and the emulated kernel suites again, built with clang's
#      AddressSanitizer and UndefinedBehaviorSanitizer (build-asan/,
#      scripts/test_sanitizers.sh, whose header says what it runs and why), then bounded
#      fuzzing; skipped with --no-sanitizers.
# docs/testing.md says what runs where and what each stage costs. The last line adds the
# stages up and names the CPU: "tests: N passed, N failed, N skipped; stages: NAME M:SS, ...,
# total M:SS; on N cores of CPU-MODEL, AVX-512 or no AVX-512".
set -uo pipefail
cd "$(dirname "$0")/.."
sanitizers=1
[ "${1:-}" = "--no-sanitizers" ] && sanitizers=0

# ctest runs two tests at a time on CI's 2 cores, and the CPU engine's OpenMP threads (2 per
# process) spin while they wait for work by default: two such processes on 2 cores then spend
# their time spinning against each other. Measured in the CPU stage's pool:
# MixedPrecisionSeedWorkload 385 s and verify_catches_mistakes 273 s with spinning threads,
# 60 s and 26 s side by side with OMP_WAIT_POLICY=PASSIVE (threads sleep while they wait; 18 s
# alone for the second). No test asserts a time, so this changes only how long CI takes.
export OMP_WAIT_POLICY=PASSIVE

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
stage_times=()
# timed NAME COMMAND...: runs the command, output into the log too; its time goes into the
# summary and a failure into the exit status.
timed() {
  local name=$1 start=$SECONDS
  shift
  "$@" 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  local s=$((SECONDS - start))
  stage_times+=("$name $((s / 60)):$(printf %02d $((s % 60)))")
}
ctest_group() {  # title, then ctest arguments
  echo "== $1"
  shift
  (cd build && ctest --output-on-failure -j "$(nproc)" "$@")
}

timed packages scripts/setup.sh packages
[ "$status" -eq 0 ] || exit 1
# The Python venv (a download and 4.9 GB unpacked: network and disk) installs beside the build
# (the compilers: CPU), in the background; its own time is reported, marked as overlapped.
venv_log=$(mktemp)
(start=$SECONDS; scripts/setup.sh venv >"$venv_log" 2>&1; echo "$? $((SECONDS - start))" >"$venv_log.done") &
venv_pid=$!
timed build scripts/setup.sh build
wait "$venv_pid"
cat "$venv_log" | tee -a "$log"
read -r venv_rc venv_s <"$venv_log.done"
rm -f "$venv_log" "$venv_log.done"
[ "$venv_rc" -eq 0 ] || status=1
stage_times+=("venv $((venv_s / 60)):$(printf %02d $((venv_s % 60))) beside the build")
[ "$status" -eq 0 ] || exit 1
timed cpu ctest_group "CPU engine, PyTorch parity, CLI" -LE 'cuda|mutants'
timed cuda ctest_group "CUDA backend (on the GPU if one works, else on the SIMT emulator)" -L cuda
timed mutants ctest_group "mutants of the CUDA kernels, caught by the emulated suite" -L mutants
if [ "$sanitizers" = 1 ]; then
  echo "== the CPU and emulated CUDA suites under AddressSanitizer and UndefinedBehaviorSanitizer (clang)"
  timed asan-build scripts/test_sanitizers.sh build
  timed asan-tests scripts/test_sanitizers.sh test
  timed fuzz scripts/test_sanitizers.sh fuzz
fi

# ctest's "N% tests passed, F tests failed out of T" lines, and its skipped tests, added up.
read -r total failed < <(awk '/tests passed, .* tests failed out of/ {t += $NF; f += $4} END {print t+0, f+0}' "$log")
skipped=$(grep -c -- '\*\*\*Skipped' "$log")
summary=$(IFS=,; echo "${stage_times[*]}" | sed 's/,/, /g')
# The CPU the times were taken on: CI's machines of one kind differ (docs/testing.md).
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
grep -qw avx512f /proc/cpuinfo && cpu+=", AVX-512" || cpu+=", no AVX-512"
echo "tests: $((total - failed - skipped)) passed, $failed failed, $skipped skipped; stages: $summary, total $((SECONDS / 60)):$(printf %02d $((SECONDS % 60))); on $(nproc) cores of ${cpu:-an unknown CPU}"
exit $status
