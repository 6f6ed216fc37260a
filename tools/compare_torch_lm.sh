#!/usr/bin/env bash
# tinytrain against PyTorch on the same toy-LM run: the same prepared data, model, schedule and
# steps, over several seeds on each side (3 by default), then a table of the final val loss
# (mean and min..max per side; the two agree when their means differ by no more than the
# larger of the two run-to-run ranges) and of tokens/s side by side.
#
# Usage: tools/compare_torch_lm.sh TINYTRAIN_BIN DATA_DIR OUT_DIR [train flags...]
#   e.g. tools/compare_torch_lm.sh build/tinytrain /tmp/fortunes /tmp/cmp --backend cpu --threads 2 \
#        --d-model 128 --n-head 4 --n-layer 4 --d-ff 512 --activation gelu --norm-first true \
#        --causal true --pos-embedding learned --seq 64 --max-seq-len 64 --batch 16 --steps 1000 \
#        --lr 1e-3 --warmup-steps 100 --lr-schedule cosine --min-lr 1e-4 --grad-clip 1.0 \
#        --eval-every 100 --eval-batches 8
# The flags go to both `tinytrain train --data DATA_DIR` and tools/train_torch_lm.py (which
# takes every flag of the run above; give --seed through SEEDS, not as a flag).
# SEEDS="1 2 3" (default) sets the seeds. WINDOWS=tinytrain (default) gives PyTorch the very
# training windows tinytrain draws (train_torch_lm.py --windows tinytrain), so that the two sides
# differ only in their dropout masks; WINDOWS=torch draws PyTorch's own. Runs alternate tinytrain/PyTorch seed by seed, so a
# drift in machine load hits both sides alike. Per run: OUT_DIR/{tinytrain,torch}_seed<S>.log
# and .jsonl (the --metrics file, whose last val_loss is the run's final val loss).
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 TINYTRAIN_BIN DATA_DIR OUT_DIR [train flags...]" >&2
  exit 2
fi
bin=$1 data=$2 out=$3
shift 3
here=$(cd "$(dirname "$0")/.." && pwd)
seeds=${SEEDS:-1 2 3}
windows=${WINDOWS:-tinytrain}
for flag in "$@"; do
  case $flag in
    --seed|--seed=*|--metrics|--metrics=*|--data|--data=*)
      echo "$0: error: $flag is set by this script (seeds: SEEDS=\"1 2 3\")" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "$0: error: $bin: not an executable" >&2; exit 1; }
[ -f "$data/tokenizer.json" ] || { echo "$0: error: $data: no tokenizer.json (run tinytrain prepare)" >&2; exit 1; }

python=$("$here/scripts/find_python.sh" torch) ||
  { echo "$0: error: no python3 with torch (install python3-torch)" >&2; exit 1; }
mkdir -p "$out"

# run NAME LOG -- COMMAND...: runs it, its output to LOG; on failure the log's tail and exit 1.
run() {
  local name=$1 log=$2
  shift 3
  local start=$SECONDS
  if ! "$@" > "$log" 2>&1; then
    tail -20 "$log" >&2
    echo "$0: error: $name failed (log: $log)" >&2
    exit 1
  fi
  echo "  $name: $((SECONDS - start)) s"
}

for seed in $seeds; do
  echo "seed $seed"
  run "tinytrain" "$out/tinytrain_seed$seed.log" -- \
    "$bin" train --data "$data" --seed "$seed" --metrics "$out/tinytrain_seed$seed.jsonl" "$@"
  run "pytorch  " "$out/torch_seed$seed.log" -- \
    "$python" "$here/tools/train_torch_lm.py" --data "$data" --seed "$seed" --windows "$windows" \
    --metrics "$out/torch_seed$seed.jsonl" "$@"
done

# The table: final val loss from each run's metrics file (the last val_loss), tokens/s from its
# log (tinytrain: the `done: ... | X tokens/s` line, PyTorch: `final val loss ... | tokens/s X`).
SEEDS_LIST=$seeds "$python" - "$out" <<'EOF'
import json, os, re, statistics, sys
out = sys.argv[1]
seeds = os.environ["SEEDS_LIST"].split()

def final_val(path):
    last = None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    v = json.loads(line).get("val_loss")
                except ValueError:
                    sys.exit(f"compare_torch_lm.sh: error: {path}:{n}: not JSON")
                if v is not None:
                    last = v
    if last is None:
        sys.exit(f"compare_torch_lm.sh: error: {path}: no val_loss (pass --eval-every N)")
    return last

def tokens_per_s(path):
    found = None
    for line in open(path):
        m = (re.search(r"([0-9.eE+-]+)\s+tokens/s", line) if line.startswith("done:")
             else re.search(r"tokens/s\s+([0-9.eE+-]+)", line) if line.startswith("final val loss")
             else None)
        if m:
            found = float(m.group(1))
    if found is None:
        sys.exit(f"compare_torch_lm.sh: error: {path}: no tokens/s line (done: or final val loss)")
    return found

sides = {}
for side in ("tinytrain", "torch"):
    vals = [final_val(os.path.join(out, f"{side}_seed{s}.jsonl")) for s in seeds]
    tps = [tokens_per_s(os.path.join(out, f"{side}_seed{s}.log")) for s in seeds]
    sides[side] = (vals, tps)

print()
print("final val loss per seed: " + "; ".join(
    f"seed {s}: tinytrain {a:.4f}, PyTorch {b:.4f}"
    for s, a, b in zip(seeds, sides["tinytrain"][0], sides["torch"][0])))
print()
print(f"{'':10} {'val loss mean':>13} {'min..max':>17} {'range':>7} {'tokens/s (median of seeds)':>27}")
for side, name in (("tinytrain", "tinytrain"), ("torch", "PyTorch")):
    vals, tps = sides[side]
    print(f"{name:10} {statistics.mean(vals):13.4f} {min(vals):8.4f}..{max(vals):.4f} "
          f"{max(vals) - min(vals):7.4f} {statistics.median(tps):27.1f}")
(tv, tt), (pv, pt) = sides["tinytrain"], sides["torch"]
diff = statistics.mean(tv) - statistics.mean(pv)
spread = max(max(tv) - min(tv), max(pv) - min(pv))
verdict = "agree" if abs(diff) <= spread else "DIFFER"
print()
print(f"val loss: tinytrain - PyTorch = {diff:+.4f}; run-to-run range {spread:.4f}: {verdict} "
      f"(within the larger of the two sides' min..max ranges over {len(seeds)} seeds)")
print(f"tokens/s: tinytrain {statistics.median(tt):.1f}, PyTorch {statistics.median(pt):.1f}: "
      f"tinytrain/PyTorch {statistics.median(tt) / statistics.median(pt):.2f}x")
EOF
