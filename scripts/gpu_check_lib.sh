# shellcheck shell=bash
# Running scripts/gpu_check.sh's steps (sourced by it, and by tests/gpu_check_verdict_test.sh,
# which runs fake steps through the same functions without a GPU). Each step runs under its own
# time limit; its output goes to the console and to OUT/steps/NAME.log; it adds one line to
# OUT/steps.tsv; and then OUT/summary.json and OUT/summary.txt are rewritten
# (scripts/gpu_check_summary.py), so a run cut short still leaves every finished step's answer.
#
#   gc_begin OUT BUDGET_S STEP...  the results folder, the seconds the whole run may take, and the
#                                  planned steps in order (those never reached show as not run)
#   gc_step NAME CAP_S FUNCTION [ARGS...]
#                                  FUNCTION (exported: export -f) in its own bash under `timeout`,
#                                  limited to CAP_S or to what is left of BUDGET_S less
#                                  GC_RESERVE_S, whichever is less (under 3 s left: skipped,
#                                  "time budget spent"); with GC_STOP set (a reason),
#                                  recorded as skipped instead; left out when GC_ONLY (a regex) is
#                                  set and does not match NAME. FUNCTION sees its limit in
#                                  GC_LIMIT. Returns the step's exit code.
#   gc_skip NAME REASON            a step that did not run (it counts as a problem)
#   gc_leave_out NAME REASON       a step left out on purpose (it does not)
#   gc_summary [--print]           rewrites the summary; --print prints the table and the verdict
#                                  line; returns 0 for PASS, 1 for PROBLEMS
# A step's status: pass (exit 0), timeout (killed at its limit: TERM, then KILL 5 s later, and
# every process it started with it: `timeout` runs it in a process group of its own), fail.

GC_RESERVE_S=${GC_RESERVE_S:-5}  # left at the end for the last summary
GC_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

gc_begin() {
  GC_OUT=$1 GC_BUDGET=$2
  shift 2
  GC_START=$SECONDS GC_STOP=""
  mkdir -p "$GC_OUT/steps" || return 1
  rm -f "$GC_OUT"/steps/*.log "$GC_OUT/gpu_required.txt"
  : > "$GC_OUT/steps.tsv"
  printf '%s\n' "$@" > "$GC_OUT/plan.txt"
  gc_summary
}

gc_record() {  # NAME EXIT_CODE SECONDS STATUS LIMIT NOTE
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$GC_OUT/steps.tsv"
  gc_summary
}

gc_skip() {
  echo "==== [+$(( SECONDS - GC_START ))s] $1: not run: $2"
  gc_record "$1" - 0 skipped 0 "$2"
}

gc_leave_out() {
  echo "==== $1: left out: $2"
  gc_record "$1" - 0 left_out 0 "$2"
}

gc_step() {
  local name=$1 cap=$2
  shift 2
  if [ -n "${GC_ONLY:-}" ] && ! [[ $name =~ $GC_ONLY ]]; then
    gc_leave_out "$name" "not selected by GPU_CHECK_ONLY=$GC_ONLY"
    return 0
  fi
  if [ -n "$GC_STOP" ]; then
    gc_skip "$name" "$GC_STOP"
    return 1
  fi
  local left=$(( GC_BUDGET - (SECONDS - GC_START) - GC_RESERVE_S ))
  local limit=$(( cap < left ? cap : left ))
  if [ "$left" -lt 3 ]; then
    gc_skip "$name" "time budget spent"
    return 1
  fi
  echo "==== [+$(( SECONDS - GC_START ))s] $name (limit ${limit} s): $*"
  local t0 t1 rc secs status
  t0=$(date +%s.%N)
  GC_LIMIT=$limit timeout -k 5 "$limit" bash -c '"$@"' _ "$@" 2>&1 | tee "$GC_OUT/steps/$name.log"
  rc=${PIPESTATUS[0]}
  t1=$(date +%s.%N)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  status=fail
  if [ "$rc" -eq 0 ]; then
    status=pass
  elif { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && awk -v s="$secs" -v l="$limit" 'BEGIN { exit !(s >= l - 0.5) }'; then
    status=timeout  # (124 before the limit is the step's own inner timeout: a failure)
  fi
  echo "==== $name: $status (exit $rc, ${secs} s of ${limit} s)"
  gc_record "$name" "$rc" "$secs" "$status" "$limit" ""
  return "$rc"
}

gc_summary() {
  python3 "$GC_LIB_DIR/gpu_check_summary.py" "$GC_OUT" "$@"
}
