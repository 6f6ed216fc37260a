#!/usr/bin/env bash
# A tiny language model on the fortunes corpus, end to end, in one command (docs/toy-lm.md):
#   1. build tinytrain if needed (scripts/setup.sh)
#   2. text -> BPE token shards: tinytrain prepare (vocab 4096)
#   3. train a small causal pre-norm GELU model with learned positions, cosine schedule,
#      gradient clipping, evaluation and checkpoints, and crash it half way: the first run is
#      SIGKILLed (as a crash or a preemption would end it) once its mid-run checkpoint is saved
#   4. resume from the latest checkpoint (--resume DIR) and train to the end
#   5. sample 3 continuations from the final checkpoint
#   6. plot the loss curves (tools/plot_metrics.py) and print the final validation loss last
#
# Usage: examples/tiny_lm.sh [OUT_DIR]            (default /tmp/tiny_lm)
#   TINY_LM_STEPS=40 examples/tiny_lm.sh          a quick smoke run
# Writes OUT_DIR/data (the shards, reused when present), OUT_DIR/ckpt (checkpoints),
# OUT_DIR/train_part{1,2}.log, OUT_DIR/metrics.jsonl (both runs': the resumed run keeps the
# killed run's lines before its resume point and writes on), OUT_DIR/samples.txt, OUT_DIR/loss.png.
set -euo pipefail

# Training steps: about 10 minutes in all on the project's 2-core machine.
STEPS=${TINY_LM_STEPS:-2000}
# Checkpoint interval: 200, or half the run for short runs (so there is one to resume from).
SAVE_EVERY=${TINY_LM_SAVE_EVERY:-$(( STEPS >= 400 ? 200 : (STEPS / 2 > 0 ? STEPS / 2 : 1) ))}
# Warm-up and evaluation interval: 100 steps each, scaled down for short runs.
WARMUP=$(( STEPS >= 1000 ? 100 : STEPS / 10 ))
EVAL_EVERY=$(( STEPS >= 400 ? 100 : (STEPS / 4 > 0 ? STEPS / 4 : 1) ))
# The first run is killed once it has saved the checkpoint at (or just below) half the steps.
KILL_AFTER=$(( (STEPS / 2) / SAVE_EVERY * SAVE_EVERY ))
[ "$KILL_AFTER" -ge "$SAVE_EVERY" ] || KILL_AFTER=$SAVE_EVERY

OUT=${1:-/tmp/tiny_lm}
cd "$(dirname "$0")/.."
bin=build/tinytrain
header() { printf '\n=== %s ===\n' "$*"; }

header "1/6 build"
if [ -x "$bin" ]; then
  echo "using $bin (delete it, or run scripts/setup.sh, to rebuild)"
else
  scripts/setup.sh
fi
# A Python with matplotlib (and torch, as the other tools use): Debian's first.
python=$(scripts/find_python.sh torch matplotlib) ||
  { echo "error: no python3 with torch and matplotlib (scripts/setup.sh installs them)" >&2; exit 1; }
mkdir -p "$OUT"

header "2/6 prepare: /usr/share/games/fortunes -> $OUT/data"
if [ -f "$OUT/data/tokenizer.json" ]; then
  # prepare is deterministic (same inputs and seed, same bytes): the shards of a previous run are these.
  echo "reusing $OUT/data (delete it to prepare again)"
else
  [ -d /usr/share/games/fortunes ] || { echo "error: /usr/share/games/fortunes is missing (apt-get install fortunes, or scripts/setup.sh)" >&2; exit 1; }
  "$bin" prepare --input /usr/share/games/fortunes --out "$OUT/data" --tokenizer bpe --vocab-size 4096
fi

flags=(train --data "$OUT/data"
       --d-model 128 --n-head 4 --n-layer 4 --d-ff 512 --activation gelu --norm-first true
       --causal true --pos-embedding learned --seq 64 --max-seq-len 64 --batch 16 --dropout 0.1
       --steps "$STEPS" --lr 1e-3 --warmup-steps "$WARMUP" --lr-schedule cosine --min-lr 1e-4 --grad-clip 1.0
       --eval-every "$EVAL_EVERY" --eval-batches 8 --save-dir "$OUT/ckpt" --save-every "$SAVE_EVERY"
       --metrics "$OUT/metrics.jsonl")
rm -rf "$OUT/ckpt" "$OUT"/metrics*.jsonl "$OUT"/train_part*.log "$OUT/samples.txt" "$OUT/loss.png"

header "3/6 train $STEPS steps, killed (SIGKILL) after the checkpoint of step $KILL_AFTER"
echo "+ $bin ${flags[*]}"
log1=$OUT/train_part1.log
"$bin" "${flags[@]}" > "$log1" 2>&1 &
pid=$!
tail -n +1 -f --pid="$pid" "$log1" &  # show its log while it runs
tail_pid=$!
want="ckpt_$(printf '%08d' "$KILL_AFTER").safetensors"
killed=false
# The "checkpoint: PATH" line is logged once the file is complete and renamed into place.
until grep -q "^checkpoint: .*$want" "$log1"; do
  if ! kill -0 "$pid" 2>/dev/null; then break; fi
  sleep 0.1
done
if kill -0 "$pid" 2>/dev/null; then
  kill -9 "$pid"
  killed=true
fi
status=0
wait "$pid" 2>/dev/null || status=$?
sleep 0.2
kill "$tail_pid" 2>/dev/null || true
wait "$tail_pid" 2>/dev/null || true
if $killed; then
  echo ">>> killed the run with SIGKILL (exit status $status) after its checkpoint $want;" \
       "its last step line: $(grep '^step' "$log1" | tail -1)"
  echo ">>> checkpoints left: $(cd "$OUT/ckpt" && ls -m)"
elif [ "$status" -ne 0 ]; then
  echo "error: training failed with exit status $status (log: $log1)" >&2
  exit 1
else
  echo ">>> the run finished all $STEPS steps before it could be killed (a very short run): nothing to resume"
fi

header "4/6 resume from the latest checkpoint in $OUT/ckpt and train to step $STEPS"
if $killed; then
  echo "+ $bin ${flags[*]} --resume $OUT/ckpt"
  "$bin" "${flags[@]}" --resume "$OUT/ckpt" 2>&1 | tee "$OUT/train_part2.log"
  resumed_at=$(sed -n 's/^checkpoint: resumed from .* at step \([0-9]*\) .*/\1/p' "$OUT/train_part2.log")
  [ -n "$resumed_at" ] || { echo "error: the resumed run did not say where it resumed" >&2; exit 1; }
  echo ">>> resumed at step $resumed_at: the steps the killed run took after its checkpoint were taken again," \
       "and $OUT/metrics.jsonl kept its lines before step $resumed_at only"
else
  echo "(skipped: nothing to resume)"
fi

header "5/6 sample 3 continuations from the final checkpoint"
ckpt=$(ls "$OUT"/ckpt/ckpt_*.safetensors | sort | tail -1)
echo "+ $bin sample --checkpoint $ckpt --num-samples 3 --max-new-tokens 60 --temperature 0.8 --top-k 40"
"$bin" sample --checkpoint "$ckpt" --num-samples 3 --max-new-tokens 60 --temperature 0.8 --top-k 40 | tee "$OUT/samples.txt"

header "6/6 plot $OUT/loss.png"
title="tiny LM on fortunes, $STEPS steps"
$killed && title+=" (killed after step $KILL_AFTER's checkpoint, resumed at step $resumed_at)"
"$python" tools/plot_metrics.py "$OUT/metrics.jsonl" --out "$OUT/loss.png" --labels tinytrain --title "$title"

# Last line: the final validation loss (the last val_loss of the metrics).
"$python" - "$OUT/metrics.jsonl" <<'EOF'
import json, sys
vals = [r for r in map(json.loads, filter(str.strip, open(sys.argv[1]))) if r.get("val_loss") is not None]
if not vals:
    sys.exit("error: no val_loss in " + sys.argv[1])
print(f"final val loss {vals[-1]['val_loss']:.4f} (step {vals[-1]['step']})")
EOF
