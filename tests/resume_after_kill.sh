#!/usr/bin/env bash
# Checkpoints as a user meets them. `tinytrain train --save-every 5 --keep 3` runs once without
# interruption, and once SIGKILLed after it has saved and gone on training (killed mid-step or
# mid-save: either way the last complete checkpoint must survive), then resumed with
# `--resume DIR` in a directory that also holds a half-written temporary file. The resumed run
# must log exactly the uninterrupted run's step lines from its resume point on, end with a final
# checkpoint byte-identical to the uninterrupted run's, and keep 3 checkpoints.
# MODE data trains a causal model on `train --data` (a byte-level dataset prepared here, with
# evaluation): its progress lines are compared on step, loss and val loss (tokens/s and ETA are
# timings).
# Usage: resume_after_kill.sh TINYTRAIN [random|data]
set -uo pipefail
bin=$1 mode=${2:-random}
flags=(train --backend cpu --threads 1 --d-model 32 --n-head 4 --d-ff 64 --seq 16 --max-seq-len 16
       --batch 8 --steps 300 --log-every 1 --save-every 5 --keep 3)  # dropout 0.1 (the default): masks resume too
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
if [ "$mode" = data ]; then
  for i in $(seq 1 80); do printf 'Fortune %d: a penny saved is a penny earned.\n%%\n' "$i"; done > "$work/text.txt"
  "$bin" prepare --input "$work/text.txt" --out "$work/data" --tokenizer byte > /dev/null || fail "prepare failed"
  flags+=(--data "$work/data" --causal true --norm-first true --activation gelu --pos-embedding learned
          --eval-every 7 --eval-batches 2 --lr 1e-3 --warmup-steps 10 --lr-schedule cosine --grad-clip 0.5)
  step_line='^step 12/'
  # "step N/300 | loss X", and "| val Y" on evaluation steps (between them a line shows the
  # latest val loss, which a resumed process has not measured yet: "-")
  keep_fields() { awk -F'|' '{split($1, w, "[ /]"); print $1 "|" $2 (w[2] % 7 == 0 ? "|" $3 : "")}'; }
else
  flags+=(--vocab-size 64)
  step_line='^step  12 '
  # "step N | loss X | alloc Y MB": the speed fields after it (TFLOP/s, MFU) are timings
  keep_fields() { sed 's/ | [^|]* TFLOP\/s.*$//'; }
fi

"$bin" "${flags[@]}" --save-dir "$work/straight" > "$work/straight.log" 2>&1 ||
  { cat "$work/straight.log"; fail "the uninterrupted run failed"; }

# The run to kill: once step 10's checkpoint is logged and step 12 has run, SIGKILL.
"$bin" "${flags[@]}" --save-dir "$work/killed" > "$work/killed.log" 2>&1 &
pid=$!
deadline=$((SECONDS + 120))
until grep -q '^checkpoint: .*ckpt_00000010.safetensors' "$work/killed.log" && grep -q "$step_line" "$work/killed.log"; do
  kill -0 "$pid" 2>/dev/null || { cat "$work/killed.log"; fail "the run ended before it could be killed"; }
  [ $SECONDS -lt $deadline ] || { kill -9 "$pid"; fail "no checkpoint of step 10 within 120 s"; }
  sleep 0.01
done
kill -9 "$pid"
wait "$pid" 2>/dev/null  # (bash would report the kill on stderr)
status=$?
[ $status -eq 137 ] || fail "the killed run exited with $status, not 137 (SIGKILL): it finished first?"
killed_at=$(grep '^step' "$work/killed.log" | tail -1 | awk '{split($2, s, "/"); print s[1]}')
echo "killed after step $killed_at; checkpoints: $(cd "$work/killed" && echo *)"

# What an interrupted save leaves behind (a newer step, half written) must not be resumed.
head -c 1000 "$work/straight/ckpt_00000300.safetensors" > "$work/killed/ckpt_00000295.safetensors.tmp.99999"

"$bin" "${flags[@]}" --save-dir "$work/killed" --resume "$work/killed" > "$work/resumed.log" 2>&1 ||
  { cat "$work/resumed.log"; fail "the resumed run failed"; }
resume_line=$(grep '^checkpoint: resumed from' "$work/resumed.log")
echo "$resume_line"
resumed_at=$(echo "$resume_line" | sed -n 's/.* at step \([0-9]*\) .*/\1/p')
[ -n "$resumed_at" ] && [ "$resumed_at" -ge 10 ] && [ $((resumed_at % 5)) -eq 0 ] ||
  fail "resumed at step '$resumed_at', expected a multiple of 5 from 10 on"
[ "$resumed_at" -le $((killed_at + 1)) ] || fail "resumed at step $resumed_at, after the killed run's last step $killed_at"

# Every step line from the resume point on: the same text (loss to 4 decimals, alloc).
awk -v from="$resumed_at" '$1 == "step" && $2 + 0 >= from' "$work/straight.log" | keep_fields > "$work/straight.steps"
grep '^step' "$work/resumed.log" | keep_fields > "$work/resumed.steps"
[ "$(wc -l < "$work/resumed.steps")" -eq $((300 - resumed_at)) ] || fail "the resumed run logged $(wc -l < "$work/resumed.steps") step lines"
diff "$work/straight.steps" "$work/resumed.steps" > "$work/steps.diff" ||
  { head -20 "$work/steps.diff"; fail "the resumed run's step lines differ from the uninterrupted run's"; }

# The final checkpoints: the same bytes (parameters, AdamW's moments and step, loss scaler, metadata).
cmp "$work/straight/ckpt_00000300.safetensors" "$work/killed/ckpt_00000300.safetensors" ||
  fail "the final checkpoints differ"
kept=$(ls "$work/killed" | grep -c '^ckpt_[0-9]*\.safetensors$')
[ "$kept" -eq 3 ] || fail "--keep 3 left $kept checkpoints: $(ls "$work/killed")"
echo "PASS ($mode): resumed at step $resumed_at; $((300 - resumed_at)) step lines and the final checkpoint identical"
