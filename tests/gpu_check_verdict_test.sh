#!/usr/bin/env bash
# scripts/gpu_check.sh's verdict without a GPU: fake steps and fake ctest logs (in the format
# ctest prints) through the functions the script runs its steps with (scripts/gpu_check_lib.sh,
# scripts/gpu_check_summary.py). Checks that
#   1. a step that passes, fails, hangs (killed at its limit: timed out, even one that ignores
#      TERM, and with the processes it started) or is left out shows so, and the next step runs;
#   2. after every step summary.json is valid JSON and its last member, "verdict", is the last
#      line of summary.txt: PASS or PROBLEMS, then what passed, what failed, what did not run;
#   3. ctest logs: the tests that skip on a GPU machine on purpose (they need one without a
#      GPU) pass the step; a skipped gpu_required test fails it, as does a failed test;
#   4. steps never reached, or cut by the time budget, are "not run" and make it PROBLEMS;
#   5. gpu_check.sh's header lists its steps in the order and with the caps it runs them, the
#      caps add up to at most 540 s, and the script run with only its first step (here: no GPU)
#      writes the verdict with that step failed and every other one left out.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }
# shellcheck source=../scripts/gpu_check_lib.sh
source "$root/scripts/gpu_check_lib.sh"

# The summary is valid JSON, and its verdict is summary.txt's last line.
check_summary() {  # check_summary OUT WHEN
  python3 -m json.tool "$1/summary.json" > /dev/null || fail "$2: summary.json is not valid JSON"
  local verdict
  verdict=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["verdict"])' "$1/summary.json")
  [ "$verdict" = "$(tail -1 "$1/summary.txt")" ] || fail "$2: the verdict is not summary.txt's last line"
  [[ $verdict =~ ^(PASS|PROBLEMS)\ \|\ passed\ \([0-9]+\):.*\ \|\ failed\ \([0-9]+\):.*\ \|\ not\ run\ \([0-9]+\):.* ]] ||
    fail "$2: verdict line '$verdict'"
  [ "$(tail -2 "$1/summary.json" | head -1 | sed 's/^ *"\([a-z_]*\)".*/\1/')" = verdict ] ||
    fail "$2: \"verdict\" is not summary.json's last member"
}
field() {  # field OUT STEP KEY: a step's value in summary.json
  python3 -c 'import json, sys
s = {s["name"]: s for s in json.load(open(sys.argv[1]))["steps"]}[sys.argv[2]]
for k in sys.argv[3].split("."):
    s = s[k]
print(s)' "$1/summary.json" "$2" "$3"
}
expect() {  # expect WHAT GOT WANTED
  [ "$2" = "$3" ] || fail "$1: '$2', expected '$3'"
}

# ---- 1, 2: pass, fail, hang, hang ignoring TERM, left out ----------------------------------------
ok_step() { echo "gpu_check.number cases 104"; echo "gpu_check.number gpu NVIDIA H200"; }
failing_step() { echo "2 of 104 cases FAIL"; return 3; }
hanging_step() { sleep 60 & echo $! > "$1"; wait; }
stubborn_step() { trap '' TERM; sleep 60; }
export -f ok_step failing_step hanging_step stubborn_step
out=$work/steps
gc_begin "$out" 200 ok hangs fails stubborn after left_out never
check_summary "$out" "before any step"
expect "before any step" "$(tail -1 "$out/summary.txt" | cut -c1-8)" "PROBLEMS"
gc_step ok 10 ok_step > /dev/null
check_summary "$out" "after ok"
start=$SECONDS
gc_step hangs 2 hanging_step "$work/child.pid" > /dev/null
rc=$?
check_summary "$out" "after hangs"
[ $(( SECONDS - start )) -le 6 ] || fail "the hanging step took $(( SECONDS - start )) s with a 2 s limit"
expect "hanging step's exit code" "$rc" 124
# Gone, or a zombie waiting for init to reap it (its parent was killed too), within 5 s.
alive() { case $(ps -o stat= -p "$1") in "" | Z*) return 1 ;; esac; }
for _ in $(seq 50); do alive "$(cat "$work/child.pid")" || break; sleep 0.1; done
alive "$(cat "$work/child.pid")" && fail "the hanging step's child outlived it"
gc_step fails 10 failing_step > /dev/null
check_summary "$out" "after fails"
start=$SECONDS
gc_step stubborn 1 stubborn_step > /dev/null
check_summary "$out" "after stubborn"
[ $(( SECONDS - start )) -le 9 ] || fail "the step ignoring TERM took $(( SECONDS - start )) s (limit 1 s, KILL 5 s later)"
gc_step after 10 ok_step > /dev/null
gc_leave_out left_out "not selected by GPU_CHECK_ONLY=ok" > /dev/null
check_summary "$out" "after left_out"
expect "ok" "$(field "$out" ok verdict)" passed
expect "ok's number" "$(field "$out" ok numbers.cases)" 104.0
expect "ok's text number" "$(field "$out" ok numbers.gpu)" "NVIDIA H200"
expect "hangs" "$(field "$out" hangs status)/$(field "$out" hangs why)" "timeout/timed out at its 2 s limit"
expect "stubborn" "$(field "$out" stubborn status)/$(field "$out" stubborn exit_code)" "timeout/137"
expect "fails" "$(field "$out" fails verdict)/$(field "$out" fails why)" "failed/exit 3"
expect "the step after the hang" "$(field "$out" after verdict)" passed
expect "left_out" "$(field "$out" left_out verdict)" "not run"
verdict=$(tail -1 "$out/summary.txt")
expect "verdict" "$verdict" "PROBLEMS | passed (2): ok, after | failed (3): hangs (timed out at its 2 s limit), fails (exit 3), stubborn (timed out at its 1 s limit) | not run (2): left_out (not selected by GPU_CHECK_ONLY=ok); never (not reached: the run ended or was cut short before it)"
gc_summary > /dev/null && fail "gc_summary returned 0 for PROBLEMS"

# ---- 3: ctest logs -------------------------------------------------------------------------------
# What ctest prints on a GPU machine for the CPU suites: the four tests that need a machine
# without a GPU skip (three of them name cuda), everything else passes.
ctest_other_log() {
  cat <<'EOF'
Test project /build
    Start  97: CliTrainGood.BackendAutoWithoutGpuSaysCpuOnce
 1/6 Test  #97: CliTrainGood.BackendAutoWithoutGpuSaysCpuOnce ...............***Skipped   0.41 sec
 2/6 Test #100: CliTrainBad.BackendCudaWithoutGpu ..........................***Skipped   0.40 sec
 3/6 Test #101: CliTrainBad.VerifyBackendCudaWithoutGpu ....................***Skipped   0.40 sec
 4/6 Test #212: Doctor.BackendCudaWithoutGpuFailsAndSaysWhatToTry ..........***Skipped   0.39 sec
 5/6 Test #213: Doctor.CudaEmuRunsTheGpuProbesOnTheEmulatorAndSavesNoEmulatedPeaks ...   Passed    3.10 sec
 6/6 Test  #14: CliTrainGood.LogShowsTflopsAndMfuAgainstTheMeasuredPeak ....   Passed    1.20 sec

100% tests passed, 0 tests failed out of 6

The following tests did not run:
	 97 - CliTrainGood.BackendAutoWithoutGpuSaysCpuOnce (Skipped)
	100 - CliTrainBad.BackendCudaWithoutGpu (Skipped)
	101 - CliTrainBad.VerifyBackendCudaWithoutGpu (Skipped)
	212 - Doctor.BackendCudaWithoutGpuFailsAndSaysWhatToTry (Skipped)
EOF
}
# The CUDA suites: SKIP=1 skips a gpu_required test (a build without cuDNN does), FAIL=1 fails one.
cuda_tests_log() {
  echo "Test project /build"
  echo " 1/3 Test #128: forward.CudaTest.AllocatingAnAbsurdSizeThrowsOutOfMemory ...   Passed    0.49 sec"
  echo " 4/4 Test #772: forward.KvCacheBenchmark.CpuTimePerGeneratedToken ...***Not Run (Disabled)   0.00 sec"
  if [ "${FAIL:-0}" = 1 ]; then
    echo " 2/3 Test #130: forward.CudaTraining.SeedWorkloadFollowsTheCpuLossCurve ...***Failed    9.12 sec"
  else
    echo " 2/3 Test #130: forward.CudaTraining.SeedWorkloadFollowsTheCpuLossCurve ...   Passed    9.12 sec"
  fi
  if [ "${SKIP:-0}" = 1 ]; then
    echo " 3/3 Test #400: forward.CudnnAttentionTraining.TwoRunsGiveTheSameBitsGraphOrEager ...***Skipped   0.50 sec"
  else
    echo " 3/3 Test #400: forward.CudnnAttentionTraining.TwoRunsGiveTheSameBitsGraphOrEager ...   Passed    2.50 sec"
  fi
  echo
  [ "${FAIL:-0}" = 1 ] && { echo "67% tests passed, 1 tests failed out of 3"; return 8; }
  echo "100% tests passed, 0 tests failed out of 3"
}
export -f ctest_other_log cuda_tests_log
out=$work/ctest
gc_begin "$out" 200 cuda_tests cuda_tests_skip cuda_tests_fail ctest_other
printf '%s\n' forward.CudaTest.AllocatingAnAbsurdSizeThrowsOutOfMemory \
  forward.CudaTraining.SeedWorkloadFollowsTheCpuLossCurve \
  forward.CudnnAttentionTraining.TwoRunsGiveTheSameBitsGraphOrEager > "$out/gpu_required.txt"
gc_step cuda_tests 10 cuda_tests_log > /dev/null
SKIP=1 gc_step cuda_tests_skip 10 cuda_tests_log > /dev/null
FAIL=1 gc_step cuda_tests_fail 10 cuda_tests_log > /dev/null
gc_step ctest_other 10 ctest_other_log > /dev/null
check_summary "$out" "after the ctest steps"
expect "cuda_tests" "$(field "$out" cuda_tests verdict)/$(field "$out" cuda_tests numbers.ctest.gpu_required_ran)" passed/3
expect "a skipped gpu_required test" "$(field "$out" cuda_tests_skip status)/$(field "$out" cuda_tests_skip verdict)/$(field "$out" cuda_tests_skip why)" \
  "pass/failed/1 gpu_required test skipped: forward.CudnnAttentionTraining.TwoRunsGiveTheSameBitsGraphOrEager"
expect "a failed test" "$(field "$out" cuda_tests_fail verdict)/$(field "$out" cuda_tests_fail numbers.ctest.failed)" \
  "failed/['forward.CudaTraining.SeedWorkloadFollowsTheCpuLossCurve (Failed)']"
expect "a disabled test" "$(field "$out" cuda_tests numbers.ctest.disabled)" "['forward.KvCacheBenchmark.CpuTimePerGeneratedToken']"
expect "the tests that skip on a GPU on purpose" "$(field "$out" ctest_other verdict)/$(field "$out" ctest_other numbers.ctest.passed)" passed/2
expect "their names" "$(field "$out" ctest_other numbers.ctest.skipped)" \
  "['CliTrainBad.BackendCudaWithoutGpu', 'CliTrainBad.VerifyBackendCudaWithoutGpu', 'CliTrainGood.BackendAutoWithoutGpuSaysCpuOnce', 'Doctor.BackendCudaWithoutGpuFailsAndSaysWhatToTry']"
expect "ctest verdict" "$(tail -1 "$out/summary.txt")" "PROBLEMS | passed (2): cuda_tests, ctest_other | failed (2): cuda_tests_skip (1 gpu_required test skipped: forward.CudnnAttentionTraining.TwoRunsGiveTheSameBitsGraphOrEager), cuda_tests_fail (exit 8, 1 test failed: forward.CudaTraining.SeedWorkloadFollowsTheCpuLossCurve (Failed)) | not run (0): none"

# ---- 4: PASS; the budget; GC_STOP ------------------------------------------------------------------
out=$work/pass
GC_ONLY='^(a|b)$'
gc_begin "$out" 200 a b c
gc_step a 10 ok_step > /dev/null
gc_step b 10 ok_step > /dev/null
gc_step c 10 ok_step > /dev/null
GC_ONLY=""
check_summary "$out" "PASS"
expect "PASS" "$(tail -1 "$out/summary.txt")" "PASS | passed (2): a, b | failed (0): none | not run (1): c (not selected by GPU_CHECK_ONLY=^(a|b)\$)"
gc_summary > /dev/null || fail "gc_summary returned non-zero for PASS"
out=$work/budget
gc_begin "$out" 9 first second third  # 9 s, less the 5 s reserve: 4 s for the steps
gc_step first 10 hanging_step "$work/child.pid" > /dev/null
gc_step second 10 ok_step > /dev/null
GC_STOP="no build/tinytrain: the build failed"
gc_step third 10 ok_step > /dev/null
GC_STOP=""
check_summary "$out" "budget"
limit=$(field "$out" first limit_s)  # (4, or 3 when a second ticked over since gc_begin)
[ "$limit" -ge 3 ] && [ "$limit" -le 4 ] || fail "first's limit: $limit s, expected 4 s"
expect "budget verdict" "$(tail -1 "$out/summary.txt")" "PROBLEMS | passed (0): none | failed (1): first (timed out at its $limit s limit) | not run (2): second (time budget spent); third (no build/tinytrain: the build failed)"

# ---- 5: gpu_check.sh's header, its plan, and a run without a GPU ------------------------------------
script=$root/scripts/gpu_check.sh
header=$(sed -n '/^#   step  *cap/,/^#   ctest_other/p' "$script" | awk '$2 ~ /^[a-z_]+$/ && $3 ~ /^[0-9]+$/ {print $2, $3}')
plan=$(sed -n '/^plan=(/,/^)/p' "$script" | sed -n 's/^  "\([a-z_]*\) \([0-9]*\) .*/\1 \2/p')
expect "the header's steps and caps" "$header" "$plan"
sum=$(echo "$plan" | awk '{s += $2} END {print s}')
[ "$sum" -le 540 ] || fail "the caps add up to $sum s, over 9 minutes"
grep -q "^# Caps: .* = $sum s" "$script" || fail "the header's sum of the caps is not $sum s"
out=$work/run
mkdir -p "$work/bin"  # an nvidia-smi that finds no GPU, so the machine step fails on any machine
printf '#!/bin/sh\necho "NVIDIA-SMI has failed (a stub: no GPU)"; exit 9\n' > "$work/bin/nvidia-smi"
chmod +x "$work/bin/nvidia-smi"
GPU_CHECK_ONLY='^machine$' GPU_CHECK_BUILD_DIR=$work/no_build PATH="$work/bin:$PATH" bash "$script" "$out" > "$work/run.log" 2>&1
expect "gpu_check.sh's exit status without a GPU" "$?" 1
check_summary "$out" "gpu_check.sh"
others=$(sed -n '/^plan=(/,/^)/p' "$script" | sed -n 's/^  "\([a-z_]*\) .*/\1/p' | tail -n +2)
expect "gpu_check.sh's last line" "$(tail -1 "$work/run.log")" "gpu_check: wrote $out/summary.json, exit 1"
expect "gpu_check.sh's printed verdict" "$(tail -2 "$work/run.log" | head -1)" "$(tail -1 "$out/summary.txt")"
expect "gpu_check.sh's verdict" "$(tail -1 "$out/summary.txt")" "PROBLEMS | passed (0): none | failed (1): machine (exit 1) | not run ($(echo "$others" | wc -l)): $(echo "$others" | paste -sd, | sed 's/,/, /g') (not selected by GPU_CHECK_ONLY=^machine\$)"

[ $status -eq 0 ] && echo "gpu_check verdict: steps passed, failed, timed out, left out and not reached show so; ctest skips of gpu_required tests fail, the no-GPU-only skips do not; the summary is valid after every step"
exit $status
