#!/usr/bin/env bash
# The toy-LM Python tools, without tinytrain:
#   toy_lm_tools.sh plot   tools/plot_metrics.py: two synthetic runs -> a PNG (checked by its
#                          signature); a malformed line, a missing file and a --labels count
#                          that does not match are each refused in one line (exit 1), the
#                          malformed line by its number.
#   toy_lm_tools.sh train  tools/train_torch_lm.py: shards written here (its write_shard),
#                          20 steps of a tiny model with warm-up + cosine schedule and clipping:
#                          the final line, the step lines, a metrics file that parses with the
#                          lr of every logged step equal to the schedule's formula, evaluations
#                          at the steps due; and a shard with a bad magic refused in one line.
# Exit 77 (ctest: skipped) when no Python with torch and matplotlib is found.
set -euo pipefail
mode=${1:?usage: toy_lm_tools.sh plot|train}
here=$(cd "$(dirname "$0")/.." && pwd)
python=$("$here/scripts/find_python.sh" torch matplotlib) ||
  { echo "SKIPPED: no python3 with torch and matplotlib (install python3-torch python3-matplotlib)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# expect_error WANT_REGEX COMMAND...: exit status 1 and exactly one line on stderr matching WANT.
expect_error() {
  local want=$1
  shift
  local status=0
  "$@" > "$work/out" 2> "$work/err" || status=$?
  [ "$status" -eq 1 ] || { cat "$work/out" "$work/err"; fail "exit $status, not 1: $*"; }
  [ "$(wc -l < "$work/err")" -eq 1 ] || { cat "$work/err"; fail "not one line on stderr: $*"; }
  grep -Eq -- "$want" "$work/err" || { cat "$work/err"; fail "stderr does not match '$want': $*"; }
  echo "refused as expected: $(cat "$work/err")"
}

case $mode in
plot)
  plot=$here/tools/plot_metrics.py
  "$python" - "$work" <<'EOF'
import json, math, sys
work = sys.argv[1]
for name, scale in (("a", 1.0), ("b", 1.1)):
    with open(f"{work}/{name}.jsonl", "w") as f:
        for step in range(0, 200, 10):
            f.write(json.dumps({"step": step, "loss": scale * (8 - math.log1p(step)),
                                "val_loss": scale * (8.1 - math.log1p(step)) if step % 50 == 0 else None,
                                "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 9000 + step,
                                "ms_per_step": 100.0, "loss_scale": 1.0, "alloc_mb": 10.0}) + "\n")
        f.write(json.dumps({"step": 200, "loss": None, "val_loss": scale * 2.8}) + "\n")
EOF
  "$python" "$plot" "$work/a.jsonl" "$work/b.jsonl" --out "$work/runs.png" --labels one,two
  [ -s "$work/runs.png" ] || fail "no PNG written"
  [ "$(head -c 8 "$work/runs.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] ||
    fail "$work/runs.png does not start with the PNG signature"
  echo "PNG written: $(wc -c < "$work/runs.png") bytes"
  { head -3 "$work/a.jsonl"; echo '{"step": 30, "loss": 7.1,'; } > "$work/bad.jsonl"
  expect_error "bad\.jsonl:4: " "$python" "$plot" "$work/bad.jsonl" --out "$work/bad.png"
  [ ! -e "$work/bad.png" ] || fail "a PNG was written for a malformed file"
  { head -2 "$work/a.jsonl"; echo '{"loss": 7.1}'; } > "$work/nostep.jsonl"
  expect_error "nostep\.jsonl:3: .*step" "$python" "$plot" "$work/nostep.jsonl" --out "$work/x.png"
  expect_error "missing\.jsonl: cannot open" "$python" "$plot" "$work/missing.jsonl" --out "$work/x.png"
  expect_error "--labels" "$python" "$plot" "$work/a.jsonl" --out "$work/x.png" --labels one,two
  echo "PASS: plot_metrics.py"
  ;;
train)
  train=$here/tools/train_torch_lm.py
  mkdir -p "$work/data"
  # A byte-level corpus: 3000 train and 400 val tokens of repetitive text, vocab 256.
  "$python" - "$here/tools" "$work/data" <<'EOF'
import json, sys
sys.path.insert(0, sys.argv[1])
from train_torch_lm import write_shard
out = sys.argv[2]
text = b"the quick brown fox jumps over the lazy dog. " * 80
write_shard(f"{out}/train.bin", list(text[:3000]))
write_shard(f"{out}/val.bin", list(text[7:407]))
json.dump({"kind": "byte", "vocab_size": 256}, open(f"{out}/tokenizer.json", "w"))
EOF
  flags=(--data "$work/data" --d-model 32 --n-head 4 --n-layer 2 --d-ff 64 --activation gelu
         --norm-first true --causal true --pos-embedding learned --seq 16 --max-seq-len 16
         --batch 4 --steps 20 --lr 3e-3 --warmup-steps 5 --lr-schedule cosine --min-lr 3e-4
         --grad-clip 1.0 --eval-every 8 --eval-batches 2 --log-every 3 --threads 1 --seed 7)
  "$python" "$train" "${flags[@]}" --metrics "$work/metrics.jsonl" > "$work/train.log" 2>&1 ||
    { cat "$work/train.log"; fail "train_torch_lm.py failed"; }
  cat "$work/train.log"
  tail -1 "$work/train.log" | grep -Eq '^final val loss [0-9]+\.[0-9]{4} \| tokens/s [0-9.]+$' ||
    fail "the last line is not 'final val loss X | tokens/s Y'"
  grep -Eq '^step 0/20 \| loss [0-9.]+ \| val [0-9.]+ \| lr [0-9.e+-]+ \| \? tokens/s \| ETA \? \| alloc [0-9.]+ MB$' "$work/train.log" ||
    fail "no 'step 0/20 | loss | val | lr | ? tokens/s | ETA ? | alloc' line"
  grep -Eq '^step 18/20 \| loss [0-9.]+ \| val [0-9.]+ \| lr [0-9.e+-]+ \| [0-9]+ tokens/s \| ETA [0-9]+s \| alloc [0-9.]+ MB$' "$work/train.log" ||
    fail "no 'step 18/20 | loss | val | lr | N tokens/s | ETA Ns | alloc' line"
  "$python" - "$here/tools" "$work/metrics.jsonl" "$work/train.log" <<'EOF'
import json, math, sys
sys.path.insert(0, sys.argv[1])
from train_torch_lm import lr_at
steps, peak, warmup, min_lr, log_every, eval_every = 20, 3e-3, 5, 3e-4, 3, 8
records = [json.loads(l) for l in open(sys.argv[2])]
keys = {"step", "loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "ms_per_step", "loss_scale", "alloc_mb"}
def check(cond, what):
    if not cond:
        sys.exit(f"FAIL: {what}")
for r in records:
    check(set(r) == keys, f"keys of {r}")
train = [r for r in records if r["loss"] is not None]
val_only = [r for r in records if r["loss"] is None]
want_steps = list(range(0, steps, log_every))
check([r["step"] for r in train] == want_steps, f"logged steps {[r['step'] for r in train]}, want {want_steps}")
for r in train:
    want = lr_at(r["step"], steps, peak, warmup, "cosine", min_lr)
    check(math.isclose(r["lr"], want, rel_tol=1e-12), f"lr at step {r['step']}: {r['lr']} != {want}")
    check((r["val_loss"] is not None) == (r["step"] % eval_every == 0), f"val_loss at step {r['step']}: {r['val_loss']}")
    check(math.isfinite(r["loss"]) and r["grad_norm"] > 0 and r["loss_scale"] == 1.0 and r["alloc_mb"] > 0,
          f"values of {r}")
    # The first window is not timed (null), every later one is.
    check((r["tokens_per_s"] is None) == (r["step"] == 0) and (r["ms_per_step"] is None) == (r["step"] == 0),
          f"speed at step {r['step']}: {r}")
# Evaluations at steps that are not logged, and the final one: val-only lines.
want_val_only = [s for s in range(steps) if s % eval_every == 0 and s % log_every != 0] + [steps]
check([r["step"] for r in val_only] == want_val_only, f"val-only steps {[r['step'] for r in val_only]}, want {want_val_only}")
check(all(r["val_loss"] is not None and r["lr"] is None for r in val_only), "val-only lines")
# The formula itself at a few points: warm-up, peak, half way (mean of peak and min), the end.
check(math.isclose(lr_at(0, steps, peak, warmup, "cosine", min_lr), peak / 5), "warm-up step 0")
check(math.isclose(lr_at(4, steps, peak, warmup, "cosine", min_lr), peak), "warm-up end")
check(math.isclose(lr_at(5, 25, peak, 5, "cosine", min_lr), peak), "cosine start")
check(math.isclose(lr_at(15, 25, peak, 5, "cosine", min_lr), 0.5 * (peak + min_lr)), "cosine half way")
check(math.isclose(lr_at(15, 25, peak, 5, "linear", min_lr), 0.5 * (peak + min_lr)), "linear half way")
check(lr_at(9, 20, peak, 5, "constant", min_lr) == peak, "constant")
final = records[-1]
check(final["step"] == steps and final["loss"] is None and final["val_loss"] is not None,
      f"the last line is not the final evaluation: {final}")
last_line = open(sys.argv[3]).read().splitlines()[-1]
check(f"final val loss {final['val_loss']:.4f} " in last_line, f"'{last_line}' vs metrics {final['val_loss']}")
check(final["val_loss"] < train[0]["val_loss"], "val loss did not fall over 20 steps")
print(f"metrics: {len(records)} lines, lr matches the schedule at steps {[r['step'] for r in train]}, "
      f"val-only lines at {want_val_only}; "
      f"val loss {train[0]['val_loss']:.4f} -> {final['val_loss']:.4f}")
EOF
  # A broken shard: one line naming it.
  cp -r "$work/data" "$work/bad"
  printf '\x00\x00\x00\x00' | dd of="$work/bad/val.bin" bs=1 seek=0 conv=notrunc status=none
  expect_error "val\.bin: magic 0, expected 20240520" "$python" "$train" --data "$work/bad" --causal true --steps 1 --threads 1
  head -c 1030 "$work/data/train.bin" > "$work/bad/train.bin"
  expect_error "train\.bin: the header's token count 3000 needs a file of 7024 bytes; the file has 1030" \
    "$python" "$train" --data "$work/bad" --causal true --steps 1 --threads 1
  echo "PASS: train_torch_lm.py"
  ;;
*) fail "unknown mode $mode (plot|train)" ;;
esac
