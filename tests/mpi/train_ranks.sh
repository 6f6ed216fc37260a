#!/usr/bin/env bash
# `tinytrain train` as users launch it: one process, then `mpirun -np W` with the same flags.
# The W-rank log must have the single process's lines, one copy (only rank 0 logs), with
# every logged loss within 1e-4 (verify's fp32 loss tolerance; the ranks' gradient sums
# differ from the single process's only in rounding), and the speed line must say the ranks.
# Then the launches it cannot serve: one line each, non-zero exit.
# Usage: train_ranks.sh TINYTRAIN MPIEXEC W
set -uo pipefail
bin=$1 mpiexec=$2 W=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
model=(train --backend cpu --threads 1 --vocab-size 64 --d-model 32 --n-head 4 --d-ff 64 --seq 16 --max-seq-len 16
       --steps 6 --log-every 1)
flags=("${model[@]}" --batch 12)  # divisible by 2, 3, 4 and 6 ranks
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin" "${flags[@]}" > "$work/one.log" 2>&1 || { cat "$work/one.log"; echo "FAIL: the single process failed"; exit 1; }
"$mpiexec" --oversubscribe -np "$W" "$bin" "${flags[@]}" > "$work/ranks.log" 2>&1 ||
  { cat "$work/ranks.log"; echo "FAIL: mpirun -np $W failed"; exit 1; }
status=0
"$(dirname "$0")/../compare_step_losses.sh" "$work/one.log" "$work/ranks.log" 1e-4 "one process" "$W ranks" || status=1
grep -q "| $W ranks" "$work/ranks.log" || { echo "FAIL: the speed line does not say $W ranks"; status=1; }
if WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29400 "$bin" "${flags[@]}" > "$work/torchrun.log" 2>&1 ||
   ! grep -q "CPU ranks are launched with mpirun" "$work/torchrun.log" || [ "$(wc -l < "$work/torchrun.log")" -ne 1 ]; then
  cat "$work/torchrun.log"; echo "FAIL: torchrun-style variables on the CPU backend must be refused in one line"; status=1
fi
if "$mpiexec" --oversubscribe -np "$W" "$bin" "${model[@]}" --batch $((W + 1)) > "$work/odd.log" 2>&1 ||
   ! grep -q "must be divisible by the $W ranks" "$work/odd.log"; then
  cat "$work/odd.log"; echo "FAIL: a batch the ranks cannot split must be refused"; status=1
fi
[ $status -eq 0 ] && echo "PASS: $W ranks match the single process"
exit $status
