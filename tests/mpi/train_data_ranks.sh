#!/usr/bin/env bash
# `train --data` on W ranks (ZeRO-1) against one process: the training windows are keyed by
# (seed, step, global row), so the W ranks train on the rows of the single process's batches,
# and every logged loss and validation loss (each rank evaluates its rows of the fixed val.bin
# windows; the sums meet across ranks) must agree within 1e-4, verify's fp32 loss tolerance.
# Usage: train_data_ranks.sh TINYTRAIN MPIEXEC W
set -uo pipefail
bin=$1 mpiexec=$2 W=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for i in $(seq 1 60); do
  echo "Line $i: the quick brown fox jumps over the lazy dog, and the dog sleeps."
  echo "%"
done > "$work/text.txt"
"$bin" prepare --input "$work/text.txt" --out "$work/data" --tokenizer byte --val-fraction 0.2 > "$work/prepare.log" 2>&1 ||
  { cat "$work/prepare.log"; echo "FAIL: prepare failed"; exit 1; }
flags=(train --backend cpu --threads 1 --data "$work/data" --causal true --norm-first true --activation gelu
       --pos-embedding learned --d-model 32 --n-head 4 --d-ff 64 --seq 16 --max-seq-len 16 --batch 12 --steps 6
       --log-every 1 --eval-every 2 --eval-batches 2 --lr 1e-3 --warmup-steps 2 --lr-schedule cosine --grad-clip 0.5)
"$bin" "${flags[@]}" > "$work/one.log" 2>&1 || { cat "$work/one.log"; echo "FAIL: the single process failed"; exit 1; }
"$mpiexec" --oversubscribe -np "$W" "$bin" "${flags[@]}" --zero 1 > "$work/ranks.log" 2>&1 ||
  { cat "$work/ranks.log"; echo "FAIL: mpirun -np $W failed"; exit 1; }
# "step 3/6 | loss 4.1234 | val 4.2345 | lr ..." -> fields 2 (step), 5 (loss), 8 (val); then the final val loss
extract() { grep -E '^(step|final val loss)' "$1" | awk '/^step/ {print $2, $5, $8} /^final/ {print "final", $4, $4}'; }
extract "$work/one.log" > "$work/one.values"
extract "$work/ranks.log" > "$work/ranks.values"
status=0
if [ "$(wc -l < "$work/one.values")" -ne 7 ] || [ "$(wc -l < "$work/ranks.values")" -ne 7 ]; then
  cat "$work/one.log" "$work/ranks.log"; echo "FAIL: expected 6 step lines and a final val loss from each run"; exit 1
fi
paste -d' ' "$work/one.values" "$work/ranks.values" |
  awk 'function off(a, b) { if (a == "-" || b == "-") return a != b; d = a - b; if (d < 0) d = -d; return d > 1e-4 }
       {printf "%s: loss %s / %s, val %s / %s\n", $1, $2, $5, $3, $6; if (off($2, $5) || off($3, $6)) bad = 1}
       END {exit bad}' || { echo "FAIL: a loss or val loss differs by more than 1e-4"; status=1; }
[ $status -eq 0 ] && echo "PASS: $W ranks (ZeRO-1) train on the single process's windows"
exit $status
