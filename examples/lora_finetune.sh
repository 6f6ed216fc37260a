#!/usr/bin/env bash
# Fine-tuning a small pretrained model on a corpus of another style, three ways (docs/finetune.md):
#   1. build tinytrain if needed (scripts/setup.sh)
#   2. two corpora as bytes (tinytrain prepare --tokenizer byte: one tokenizer for both):
#      the fortunes (/usr/share/games/fortunes: quips, poems, quotations) and the licence texts
#      every Debian system ships (/usr/share/common-licenses: GPL, Apache, Artistic, MPL, ...:
#      legal prose, another vocabulary and rhythm altogether)
#   3. pretrain a tiny Llama (--arch llama, 1.8 M parameters) on the fortunes, and export it as a
#      Hugging Face directory: the base
#   4. fine-tune the base on the licences the same number of steps three ways: every parameter;
#      LoRA (rank 8 on all seven linears of the block, the base frozen); QLoRA (the same
#      adapters, the base's linears stored in NF4). The adapters go out in PEFT's format and
#      are merged back (tinytrain export --format peft, tinytrain merge).
#   5. the table: validation loss on the licences before and after, trainable parameters, the
#      memory the run holds (the log's alloc) and the time per step, each from the run's log.
#
# Usage: examples/lora_finetune.sh [OUT_DIR]         (default /tmp/lora_finetune)
#   FINETUNE_BASE_STEPS=600 FINETUNE_STEPS=300       the defaults (about 4 minutes on 2 cores)
set -euo pipefail

BASE_STEPS=${FINETUNE_BASE_STEPS:-600}
STEPS=${FINETUNE_STEPS:-300}
OUT=${1:-/tmp/lora_finetune}
cd "$(dirname "$0")/.."
bin=build/tinytrain
header() { printf '\n=== %s ===\n' "$*"; }

header "1/5 build"
if [ -x "$bin" ]; then
  echo "using $bin (delete it, or run scripts/setup.sh, to rebuild)"
else
  scripts/setup.sh
fi
rm -rf "$OUT"
mkdir -p "$OUT"

header "2/5 prepare: fortunes and licences, as bytes"
[ -d /usr/share/games/fortunes ] || { echo "error: /usr/share/games/fortunes is missing (apt-get install fortunes, or scripts/setup.sh)" >&2; exit 1; }
"$bin" prepare --input /usr/share/games/fortunes --out "$OUT/fortunes" --tokenizer byte
"$bin" prepare --input /usr/share/common-licenses --out "$OUT/licenses" --tokenizer byte --val-fraction 0.1

# the model of examples/tiny_llama.sh, on bytes
model=(--arch llama --vocab-size 256 --d-model 128 --n-head 4 --n-kv-head 2 --n-layer 4 --d-ff 384 --seq 64
       --max-seq-len 64 --batch 16)
header "3/5 pretrain the base on the fortunes ($BASE_STEPS steps)"
"$bin" train --data "$OUT/fortunes" "${model[@]}" --steps "$BASE_STEPS" --lr 2e-3 --warmup-steps 50 \
  --lr-schedule cosine --min-lr 2e-4 --grad-clip 1.0 --dropout 0 --eval-every "$BASE_STEPS" --log-every 100 \
  --save-dir "$OUT/base_run" | tee "$OUT/base.log"
"$bin" export --checkpoint "$OUT/base_run" --format hf --out "$OUT/base"

header "4/5 fine-tune on the licences ($STEPS steps each)"
schedule=(--data "$OUT/licenses" --batch 16 --seq 64 --steps "$STEPS" --warmup-steps 20 --lr-schedule cosine
          --grad-clip 1.0 --dropout 0 --eval-every "$STEPS" --eval-batches 16 --log-every 50)
lora=(--lora-rank 8 --lora-alpha 16 --lora-targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj)
# (LoRA takes a larger lr than full fine-tuning: its B starts at zero and its updates are
# scaled by alpha / r, the usual 1e-4 -> 1e-3 step of PEFT's examples)
run() {  # NAME FLAGS...
  local name=$1
  shift
  echo "+ $bin train --init-from $OUT/base ${schedule[*]} $*"
  "$bin" train --init-from "$OUT/base" "${schedule[@]}" "$@" --save-dir "$OUT/$name" | tee "$OUT/$name.log"
}
run full --lr 1e-3 --min-lr 1e-4
run lora --lr 3e-3 --min-lr 3e-4 "${lora[@]}"
run qlora --lr 3e-3 --min-lr 3e-4 "${lora[@]}" --base-quant nf4
"$bin" export --checkpoint "$OUT/lora" --format peft --out "$OUT/lora_peft" --base-name "$OUT/base"
"$bin" merge --base "$OUT/base" --adapter "$OUT/lora" --out "$OUT/lora_merged"

header "5/5 the table"
# From each run's log: the val loss of the step-0 evaluation and the final one, the trainable
# parameters (the lora line; the whole model's otherwise), the alloc and the done line's ms/step.
whole=$("$bin" export --checkpoint "$OUT/base_run" --format hf --out "$OUT/base" | grep -oE '[0-9]+ parameters' | awk '{print $1}')
row() {
  local log=$OUT/$1.log
  local before after params alloc ms
  before=$(grep -m1 -E '^step 0/' "$log" | grep -oE 'val [0-9.]+' | awk '{print $2}')
  after=$(grep -oE 'final val loss [0-9.]+' "$log" | awk '{print $4}')
  params=$(grep -oE '[0-9]+ trainable' "$log" | awk '{print $1}' || true)
  alloc=$(grep -m1 -oE 'alloc [0-9.]+ MB' "$log" | awk '{print $2}')
  ms=$(grep -oE '[0-9.]+ ms/step' "$log" | tail -1 | awk '{print $1}')
  printf '| %-15s | %6s | %6s | %9s | %8s | %7s |\n' "$2" "$before" "$after" "${params:-$whole}" "$alloc" "$ms"
}
echo "the base: $whole parameters, fortunes val loss $(grep -oE 'final val loss [0-9.]+' "$OUT/base.log" | awk '{print $4}')"
echo "val loss on the licences (cross-entropy per byte), before and after $STEPS steps:"
printf '| %-15s | %6s | %6s | %9s | %8s | %7s |\n' run before after trainable "alloc MB" ms/step
printf '|-----------------|-------:|-------:|----------:|---------:|--------:|\n'
row full "full fine-tune"
row lora "LoRA"
row qlora "QLoRA (NF4)"
