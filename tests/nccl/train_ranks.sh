#!/usr/bin/env bash
# NCCL data parallelism end to end, as users launch it without MPI: W ranks started
# torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) on the machine's
# GPUs, LOCAL_RANK = rank mod GPUs. Ranks sharing one GPU get distinct NCCL_HOSTID values (NCCL
# otherwise refuses with "Duplicate GPU detected"). Needs a GPU: exits 77 (ctest: skipped)
# without one.
#   1. equivalence: the seed model, 10 steps logged every step, one process against W ranks
#      with buckets (--bucket-mb 1), one all-reduce (--bucket-mb 0) and ZeRO-1 (--zero 1):
#      every loss within 1e-4 (verify's fp32 loss tolerance: the ranks' sums differ from the
#      single process's only in rounding);
#   2. speed: the seed workload (100 steps) on W ranks with and without overlap, and ZeRO-1:
#      each run's "done:" line (ms/step, global tokens/s).
# Usage: train_ranks.sh TINYTRAIN W
set -uo pipefail
bin=$1 W=$2
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "${gpus:-0}" -ge 1 ] || { echo "SKIP: no GPU"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
port=$((29500 + RANDOM % 1000))

# Runs W ranks with the flags given; rank 0's output in $work/$name.log, the others' in
# $work/$name.rank<r>.log. Fails when any rank fails or the run exceeds 180 s.
ranks() {
  local name=$1 r pids=() rc=0
  shift
  port=$((port + 1))
  for r in $(seq 0 $((W - 1))); do
    local hostid=()
    [ "$W" -gt "$gpus" ] && hostid=(NCCL_HOSTID="tinytrain-rank-$r")
    env RANK=$r WORLD_SIZE=$W LOCAL_RANK=$((r % gpus)) MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "${hostid[@]}" \
      timeout 180 "$bin" "$@" > "$work/$name$([ "$r" -gt 0 ] && echo ".rank$r").log" 2>&1 &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do wait "${pids[$r]}" || rc=1; done
  if [ $rc -ne 0 ]; then
    tail -n 5 "$work/$name"*.log
    echo "FAIL: $name: a rank failed"
    status=1
  fi
  return $rc
}

# The losses of a log, one per line.
losses() { grep '^step' "$1" | awk '{print $5}'; }

small=(train --backend cuda --steps 10 --log-every 1)
timeout 180 "$bin" "${small[@]}" > "$work/one.log" 2>&1 || { cat "$work/one.log"; echo "FAIL: one process"; exit 1; }
for variant in "bucket1:--bucket-mb 1" "bucket0:--bucket-mb 0" "zero1:--zero 1"; do
  name=${variant%%:*}
  read -r -a flags <<< "${variant#*:}"
  ranks "$name" "${small[@]}" "${flags[@]}" || continue
  if paste <(losses "$work/one.log") <(losses "$work/$name.log") |
     awk -v n="$name" '{d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; if (d > 1e-4) bad = 1}
                       END {printf "%s: %d ranks, worst loss difference %.2e over %d steps\n", n, '"$W"', m, NR; exit bad || NR != 10}'; then
    :
  else
    echo "FAIL: $name: the losses of $W ranks differ from one process's by more than 1e-4"
    status=1
  fi
done

timeout 180 "$bin" train --backend cuda > "$work/seed_one.log" 2>&1 && echo "seed, 1 process: $(grep '^done' "$work/seed_one.log")"
for variant in "overlap (--bucket-mb 1):--bucket-mb 1" "no overlap (--bucket-mb 0):--bucket-mb 0" "zero-1:--zero 1"; do
  read -r -a flags <<< "${variant#*:}"
  ranks seed "train" --backend cuda "${flags[@]}" && echo "seed, $W ranks, ${variant%%:*}: $(grep '^done' "$work/seed.log")"
done
[ $status -eq 0 ] && echo "PASS: $W NCCL ranks match one process"
exit $status
