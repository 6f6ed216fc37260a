#!/usr/bin/env bash
# tests/compare_step_losses.sh can fail: equal logs pass (and within the tolerance), while a
# loss past the tolerance, a missing step line and two logs without any step line fail.
set -u
compare=$(dirname "$0")/compare_step_losses.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
printf 'backend cpu\nstep   0 | loss 4.1000 | alloc 0.5 MB\nstep   1 | loss 4.0000 | alloc 0.5 MB\ndone: 2 steps\n' > "$work/a"
sed 's/4.0000/4.0001/' "$work/a" > "$work/near"
sed 's/4.0000/4.0100/' "$work/a" > "$work/far"
grep -v 'step   1' "$work/a" > "$work/short"
printf 'done: 0 steps\n' > "$work/none"
expect() {  # WANT (pass|fail) LOG_A LOG_B [PHRASE the output must hold]
  local want=$1 got=pass
  bash "$compare" "$2" "$3" 1e-3 > "$work/out" 2>&1 || got=fail
  if [ "$got" != "$want" ] || ! grep -q "${4:-}" "$work/out"; then
    cat "$work/out"
    echo "FAIL: comparing $(basename "$2") with $(basename "$3") should $want${4:+ saying '$4'}"
    status=1
  fi
}
expect pass "$work/a" "$work/a"
expect pass "$work/a" "$work/near"
expect fail "$work/a" "$work/far" "differs"
expect fail "$work/a" "$work/short" "2 step lines"
expect fail "$work/none" "$work/none" "nothing to compare"
[ $status -eq 0 ] && echo "PASS: the step comparison fails on a far loss, a missing step and no steps at all"
exit $status
