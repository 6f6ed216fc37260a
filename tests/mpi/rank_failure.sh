#!/usr/bin/env bash
# What happens when a rank goes wrong: the others must stop, non-zero, with a message, in a
# bounded time (never a hang), and ranks started with different settings must refuse to train.
#   killed:   rank 1 is killed (kill -9) mid-training: mpirun stops the job.
#   hung:     rank 1 is stopped (SIGSTOP: alive, silent, as a stuck rank is): rank 0's
#             collective waits --comm-timeout seconds, then rank 0 exits naming it.
#   settings: mpirun starts rank 0 with --lr 1e-3 and rank 1 with --lr 2e-3 (MPMD syntax):
#             both refuse in one line naming --lr.
#   launch:   torchrun-style variables without MASTER_ADDR: one line naming it.
# Usage: rank_failure.sh TINYTRAIN MPIEXEC
set -uo pipefail
bin=$1 mpiexec=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
model=(train --backend cpu --threads 1 --vocab-size 64 --d-model 32 --n-head 4 --d-ff 64 --seq 16 --max-seq-len 16
       --batch 4 --log-every 1)
work=$(mktemp -d)
# The ranks run through a link in $work: their command lines name it, so they can be found
# (and killed at exit) without touching anything else that runs.
ln -s "$(readlink -f "$bin")" "$work/tinytrain"
job=
cleanup() {
  [ -n "$job" ] && kill -9 "$job" 2>/dev/null
  pkill -9 -f "$work/tinytrain" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }

# The pid of rank $1 (its environment says its rank).
rank_pid() {
  local want=$1 pid
  for pid in $(pgrep -f "$work/tinytrain"); do
    [ "$(tr '\0' '\n' < /proc/$pid/environ 2>/dev/null | grep -x "OMPI_COMM_WORLD_RANK=$want")" ] &&
      [ "$(cat /proc/$pid/comm)" = tinytrain ] && { echo "$pid"; return; }
  done
}

# Starts a long 2-rank run (log in $work/$1.log), waits until it has logged 3 steps, then
# sends signal $2 to rank 1 and returns; $3: --comm-timeout.
start_and_signal() {
  local name=$1 signal=$2 timeout=$3 i pid
  "$mpiexec" --oversubscribe -np 2 "$work/tinytrain" "${model[@]}" --steps 1000000 --comm-timeout "$timeout" \
    > "$work/$name.log" 2>&1 &
  job=$!
  for i in $(seq 1 600); do
    [ "$(grep -c '^step' "$work/$name.log")" -ge 3 ] && break
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  pid=$(rank_pid 1)
  [ -n "$pid" ] || { cat "$work/$name.log"; fail "$name: rank 1 never started"; return 1; }
  kill "-$signal" "$pid"
  SECONDS=0
}

# Waits at most $2 s for the job; it must have exited non-zero and its log must match $3.
expect_stopped() {
  local name=$1 limit=$2 pattern=$3 rc
  while kill -0 "$job" 2>/dev/null && [ $SECONDS -lt "$limit" ]; do sleep 0.2; done
  if kill -0 "$job" 2>/dev/null; then
    fail "$name: the job still runs $limit s after rank 1 was signalled (a hang)"
    kill -9 "$job"
    return
  fi
  wait "$job"
  rc=$?
  job=
  echo "$name: the job stopped $SECONDS s after the signal, exit code $rc"
  [ $rc -ne 0 ] || fail "$name: the job exited 0"
  grep -Eq "$pattern" "$work/$name.log" || { cat "$work/$name.log"; fail "$name: no message matching '$pattern'"; }
  grep -E "$pattern" "$work/$name.log" | head -2
}

start_and_signal killed KILL 60 && expect_stopped killed 60 "signal 9|Killed|rank 1"
start_and_signal hung STOP 5 && expect_stopped hung 60 "rank 0: MPI_[A-Za-z_]+ waited more than 5 s .*--comm-timeout"

"$mpiexec" --oversubscribe -np 1 "$bin" "${model[@]}" --steps 2 --lr 1e-3 : -np 1 "$bin" "${model[@]}" --steps 2 \
  --lr 2e-3 > "$work/settings.log" 2>&1 && fail "settings: ranks with different --lr trained"
grep -q "rank 1's --lr differs from rank 0's" "$work/settings.log" || { cat "$work/settings.log"; fail "settings: no line naming --lr"; }
grep "differs" "$work/settings.log" | head -1

WORLD_SIZE=2 RANK=0 "$bin" "${model[@]}" --steps 1 > "$work/launch.log" 2>&1 && fail "launch: WORLD_SIZE=2 without MASTER_ADDR trained"
grep -q "MASTER_ADDR" "$work/launch.log" || { cat "$work/launch.log"; fail "launch: no line naming MASTER_ADDR"; }
[ "$(wc -l < "$work/launch.log")" -eq 1 ] || { cat "$work/launch.log"; fail "launch: more than one line"; }

[ $status -eq 0 ] && echo "PASS: a killed or hung rank stops the job in bounded time; different settings are refused"
exit $status
