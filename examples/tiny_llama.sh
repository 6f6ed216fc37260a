#!/usr/bin/env bash
# The Llama-style block on the fortunes corpus of examples/tiny_lm.sh (docs/toy-lm.md):
#   1. build tinytrain if needed (scripts/setup.sh)
#   2. text -> BPE token shards: tinytrain prepare (vocab 4096), shared with tiny_lm.sh
#   3. train `--arch llama` (pre-norm, RMSNorm, rotary positions, SwiGLU, no biases, causal) with
#      two key/value heads for its four query heads, at the parameter count of tiny_lm.sh's
#      GPT-style model (1.84 M against 1.85 M), with its steps, batch, schedule and evaluation
#   4. sample 3 continuations from the final checkpoint (rotary positions and grouped heads in
#      the KV cache)
#   5. with TINY_LLAMA_TORCH=1: the same model in PyTorch (tools/tinytrain_model.py's LlamaModel,
#      Hugging Face LlamaForCausalLM's names), dropout 0, both sides from one exported start
#      (--init-from) on the same windows: the validation losses side by side
# The last line is the final validation loss.
#
# Usage: examples/tiny_llama.sh [OUT_DIR]            (default /tmp/tiny_llama)
#   TINY_LM_STEPS=40 examples/tiny_llama.sh          a quick smoke run
#   TINY_LLAMA_DATA=/tmp/tiny_lm/data                reuse tiny_lm.sh's shards (the default when present)
set -euo pipefail

# The schedule of tiny_lm.sh: 2000 steps, warm-up and evaluation every 100 (scaled down for short runs).
STEPS=${TINY_LM_STEPS:-2000}
WARMUP=$(( STEPS >= 1000 ? 100 : STEPS / 10 ))
EVAL_EVERY=$(( STEPS >= 400 ? 100 : (STEPS / 4 > 0 ? STEPS / 4 : 1) ))

OUT=${1:-/tmp/tiny_llama}
cd "$(dirname "$0")/.."
bin=build/tinytrain
header() { printf '\n=== %s ===\n' "$*"; }

header "1/5 build"
if [ -x "$bin" ]; then
  echo "using $bin (delete it, or run scripts/setup.sh, to rebuild)"
else
  scripts/setup.sh
fi
mkdir -p "$OUT"

DATA=${TINY_LLAMA_DATA:-}
if [ -z "$DATA" ]; then
  DATA=$OUT/data
  [ -f /tmp/tiny_lm/data/tokenizer.json ] && DATA=/tmp/tiny_lm/data
fi
header "2/5 prepare: /usr/share/games/fortunes -> $DATA"
if [ -f "$DATA/tokenizer.json" ]; then
  # prepare is deterministic: shards already there are these, and tiny_lm.sh trains on the same ones
  echo "reusing $DATA (delete it to prepare again)"
else
  [ -d /usr/share/games/fortunes ] || { echo "error: /usr/share/games/fortunes is missing (apt-get install fortunes, or scripts/setup.sh)" >&2; exit 1; }
  "$bin" prepare --input /usr/share/games/fortunes --out "$DATA" --tokenizer bpe --vocab-size 4096
fi

# tiny_lm.sh's model is d-model 128, 4 heads, 4 layers, d-ff 512 GELU with biases and learned
# positions. Here: the same width, heads and depth; k and v for 2 heads (each shared by 2 query
# heads) and a SwiGLU of 3 x 128 x 384 weights per layer, which brings the Llama block to the
# other's parameter count (no position table, no biases).
model=(--arch llama --d-model 128 --n-head 4 --n-kv-head 2 --n-layer 4 --d-ff 384 --seq 64 --max-seq-len 64
       --batch 16)
schedule=(--steps "$STEPS" --lr 1e-3 --warmup-steps "$WARMUP" --lr-schedule cosine --min-lr 1e-4 --grad-clip 1.0
          --eval-every "$EVAL_EVERY" --eval-batches 8)
rm -rf "$OUT/ckpt" "$OUT/metrics.jsonl" "$OUT/train.log" "$OUT/samples.txt" "$OUT"/torch_*.log "$OUT"/same_start*

header "3/5 train $STEPS steps"
# --init pytorch: tiny_lm.sh's initialisation (it has no --arch), so the two runs differ by the
# block alone; `--arch llama` alone would start from Hugging Face's (docs/toy-lm.md, "--init").
flags=(train --data "$DATA" "${model[@]}" --init pytorch --dropout 0.1 "${schedule[@]}" --save-dir "$OUT/ckpt" --save-every "$STEPS"
       --metrics "$OUT/metrics.jsonl")
echo "+ $bin ${flags[*]}"
"$bin" "${flags[@]}" 2>&1 | tee "$OUT/train.log"

header "4/5 sample 3 continuations from the final checkpoint"
ckpt=$(ls "$OUT"/ckpt/ckpt_*.safetensors | sort | tail -1)
echo "+ $bin sample --checkpoint $ckpt --num-samples 3 --max-new-tokens 60 --temperature 0.8 --top-k 40"
"$bin" sample --checkpoint "$ckpt" --num-samples 3 --max-new-tokens 60 --temperature 0.8 --top-k 40 | tee "$OUT/samples.txt"

header "5/5 against PyTorch (TINY_LLAMA_TORCH=1)"
if [ "${TINY_LLAMA_TORCH:-0}" = 1 ]; then
  python=$(scripts/find_python.sh torch) || { echo "error: no python3 with torch" >&2; exit 1; }
  # One start for both: PyTorch's LlamaModel initialised and exported; dropout 0 (the two sides
  # draw masks differently); tinytrain's windows on both sides (train_torch_lm.py --windows tinytrain).
  same=(--data "$DATA" "${model[@]}" --dropout 0 "${schedule[@]}" --threads 1 --seed 1)
  "$python" tools/torch_interop.py export --config '{"vocab_size": 4096}' "${model[@]:0:12}" --seed 1 \
    --out "$OUT/same_start.safetensors"
  # one thread each, side by side
  "$bin" train "${same[@]}" --init-from "$OUT/same_start.safetensors" > "$OUT/same_start_tinytrain.log" 2>&1 &
  tinytrain_pid=$!
  "$python" tools/train_torch_lm.py "${same[@]}" --windows tinytrain > "$OUT/same_start_torch.log" 2>&1 ||
    { cat "$OUT/same_start_torch.log" >&2; exit 1; }
  wait "$tinytrain_pid" || { cat "$OUT/same_start_tinytrain.log" >&2; exit 1; }
  echo "validation loss, same start and windows, dropout 0:"
  printf '%8s  %10s  %10s\n' step tinytrain PyTorch
  # "step S/N | loss L | val V | ..." lines (V: the latest evaluation) at the evaluated steps, then
  # "final val loss V ..."
  vals() { awk -v every="$EVAL_EVERY" '/^step/ && $7 == "val" {split($2, s, "/"); if (s[1] % every == 0) print s[1], $8}
                /^final val loss/ {print "final", $4}' "$1"; }
  paste -d' ' <(vals "$OUT/same_start_tinytrain.log") <(vals "$OUT/same_start_torch.log") |
    awk '{printf "%8s  %10s  %10s\n", $1, $2, $4}'
else
  echo "(skipped: TINY_LLAMA_TORCH=1 runs it, about 10 minutes on 2 cores)"
fi

# Last line: the final validation loss of the run in step 3.
awk '/^final val loss/ {v = $4} END {if (v == "") exit 1; print "final val loss " v}' "$OUT/train.log" ||
  grep -h 'val' "$OUT/train.log" | tail -1
