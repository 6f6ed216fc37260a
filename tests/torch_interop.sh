#!/usr/bin/env bash
# PyTorch interoperability end to end (tools/torch_interop.py): a tiny causal model trained a
# few steps by `tinytrain train --save-dir`, its logits at every position of a prompt dumped by
# `tinytrain sample --dump-logits`, then the checkpoint loaded into PyTorch's model
# (tools/tinytrain_model.py) must give the same logits within 1e-5 (both fp32). The check must
# also be able to fail: another run's dump against this checkpoint is refused (exit 1). And
# `torch_interop.py export` writes a state_dict safetensors file; where `train --init-from`
# exists, a run started from it (lr 0) saves exactly those parameters. Then training itself:
# tools/train_torch_lm.py and `tinytrain train --data` from that start on the same windows give
# the same losses (below).
# Usage: torch_interop.sh TINYTRAIN. Exit 77 (ctest: skipped) when no Python with torch is found.
set -uo pipefail
bin=$1
here=$(cd "$(dirname "$0")/.." && pwd)
python=$("$here/scripts/find_python.sh" torch) ||
  { echo "SKIPPED: no python3 with torch (install python3-torch)"; exit 77; }
tool="$here/tools/torch_interop.py"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

echo '{"kind": "byte", "vocab_size": 256}' > "$work/tokenizer.json"
shape=(--vocab-size 256 --d-model 32 --n-head 4 --n-layer 2 --d-ff 64 --max-seq-len 64)
model=("${shape[@]}" --causal true --pos-embedding learned)
# the Llama block (Hugging Face LlamaForCausalLM's names, RoPE, SwiGLU, no biases, causal) with two
# key/value heads: PyTorch's side is tools/tinytrain_model.py's LlamaModel
llama=("${shape[@]}" --arch llama --n-kv-head 2)
prompt="The checkpoint's logits, position by position, in PyTorch."
run_and_dump() {  # NAME SEED [flags]: train 3 steps, dump the prompt's logits (model flags: "${model[@]}"
  local name=$1 seed=$2  # unless the flags start with --arch)
  shift 2
  local flags=("${model[@]}")
  [ "${1:-}" = --arch ] && flags=("${shape[@]}")
  "$bin" train --backend cpu --threads 1 "${flags[@]}" --seq 32 --batch 4 --steps 3 --lr 1e-3 --seed "$seed" \
    --save-dir "$work/$name" "$@" > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "train $name failed"; }
  "$bin" sample --backend cpu --threads 1 --checkpoint "$work/$name/ckpt_00000003.safetensors" \
    --tokenizer "$work" --prompt "$prompt" --dump-logits "$work/$name.logits.safetensors" ||
    fail "sample --dump-logits $name failed"
}
run_and_dump pre 11 --norm-first true --activation gelu
run_and_dump post 12 --norm-first false --activation relu
run_and_dump llama 13 --arch llama --n-kv-head 2

for name in pre post llama; do
  "$python" "$tool" logits --checkpoint "$work/$name/ckpt_00000003.safetensors" \
    --dump "$work/$name.logits.safetensors" || fail "$name: PyTorch's logits differ from the engine's"
done

# The check can fail: the pre-norm checkpoint against the post-norm run's dump (same shapes).
"$python" "$tool" logits --checkpoint "$work/pre/ckpt_00000003.safetensors" --dump "$work/post.logits.safetensors"
rc=$?
[ $rc -eq 1 ] || fail "another run's logits were not refused with exit 1 (exit $rc)"
echo "(expected: the mismatched dump above is refused)"

# export: a state_dict file under the engine's names; with `train --init-from`, the run starts there.
"$python" "$tool" export --config '{"vocab_size": 256, "d_model": 32, "n_head": 4, "n_layer": 2, "d_ff": 64}' \
  --causal true --max-seq-len 64 --pos-embedding learned --seed 3 --out "$work/init.safetensors" ||
  fail "export failed"
if "$bin" train --help 2>/dev/null | grep -q -- '--init-from'; then
  "$bin" train --backend cpu --threads 1 "${model[@]}" --norm-first false --seq 32 --batch 4 --steps 1 --lr 0 \
    --weight-decay 0 --init-from "$work/init.safetensors" --save-dir "$work/init" > "$work/init.log" 2>&1 ||
    { cat "$work/init.log"; fail "train --init-from failed"; }
  "$python" - "$work/init.safetensors" "$work/init/ckpt_00000001.safetensors" <<EOF || fail "train --init-from did not start from the exported parameters"
import sys
sys.path.insert(0, "$here/tools")
import torch
from make_reference import read_safetensors
exported, _ = read_safetensors(sys.argv[1])
saved, _ = read_safetensors(sys.argv[2])
for name, t in exported.items():
    assert torch.equal(saved[name], t), name
print(f"init-from: the {len(exported)} exported tensors are the run's parameters, bit for bit")
EOF
else
  echo "(train has no --init-from yet: the export is not loaded here)"
fi

# Training side by side: tools/train_torch_lm.py from the same exported start (its --seed 3
# initialises as export --seed 3 does), on tinytrain's own windows (--windows tinytrain), without
# dropout (whose masks are drawn differently), against `tinytrain train --data`: every logged
# loss and the final val loss agree within 2e-4. Both are fp32; only their sums' orders differ
# (OpenBLAS against PyTorch's kernels, ~1e-7 relative per op), and the example's 2000-step run
# agreed to 4 decimals throughout (docs/toy-lm.md). Control: PyTorch's own windows
# (--windows torch) put the losses well beyond that, so the comparison can fail.
for i in $(seq 1 60); do printf 'Fortune %d: a penny saved is a penny earned, said the engine.\n%%\n' "$i"; done > "$work/text.txt"
"$bin" prepare --input "$work/text.txt" --out "$work/data" --tokenizer byte > /dev/null || fail "prepare failed"
schedule=(--dropout 0 --seq 32 --batch 4 --steps 30 --lr 3e-3 --warmup-steps 5 --lr-schedule cosine --min-lr 3e-4
          --grad-clip 1.0 --eval-every 10 --eval-batches 2 --log-every 1 --threads 1 --seed 3)
run=(--data "$work/data" "${model[@]}" --norm-first false "${schedule[@]}")
"$bin" train --backend cpu "${run[@]}" --init-from "$work/init.safetensors" > "$work/tt.log" 2>&1 ||
  { cat "$work/tt.log"; fail "tinytrain train --data failed"; }
for windows in tinytrain torch; do
  "$python" "$here/tools/train_torch_lm.py" "${run[@]}" --windows "$windows" > "$work/torch_$windows.log" 2>&1 ||
    { cat "$work/torch_$windows.log"; fail "train_torch_lm.py --windows $windows failed"; }
done
# "step 3/30 | loss 4.1234 | val ..." -> step and loss; "final val loss X ..." -> final and X
losses() { awk '/^step/ {print $2, $5} /^final val loss/ {print "final", $4}' "$1"; }
compare() {  # LOG_A LOG_B: the largest difference of the same step's loss, and the pair count
  paste -d' ' <(losses "$1") <(losses "$2") |
    awk '$1 != $3 {print "misaligned: " $0; exit 1} {d = $2 - $4; if (d < 0) d = -d; if (d > m) m = d; n++}
         END {printf "%.6f %d\n", m, n}'
}
read -r worst pairs < <(compare "$work/tt.log" "$work/torch_tinytrain.log") || fail "the two logs do not align"
echo "same windows: $pairs losses, largest difference $worst"
[ "$pairs" -eq 31 ] || fail "expected 30 step losses and a final val loss from each side, got $pairs pairs"
awk -v w="$worst" 'BEGIN {exit !(w <= 2e-4)}' || fail "tinytrain and PyTorch differ by $worst on the same windows"
read -r control _ < <(compare "$work/tt.log" "$work/torch_torch.log") || fail "the control logs do not align"
echo "control, PyTorch's own windows: largest difference $control"
awk -v w="$control" 'BEGIN {exit !(w > 2e-3)}' || fail "other windows gave the same losses (difference $control): the comparison cannot fail"

# The same for the Llama block: PyTorch's LlamaModel exported, both sides trained from it.
"$python" "$tool" export "${llama[@]}" --seed 3 --out "$work/init_llama.safetensors" || fail "export --arch llama failed"
run_llama=(--data "$work/data" "${llama[@]}" "${schedule[@]}")
"$bin" train --backend cpu "${run_llama[@]}" --init-from "$work/init_llama.safetensors" > "$work/tt_llama.log" 2>&1 ||
  { cat "$work/tt_llama.log"; fail "tinytrain train --arch llama failed"; }
"$python" "$here/tools/train_torch_lm.py" "${run_llama[@]}" --windows tinytrain > "$work/torch_llama.log" 2>&1 ||
  { cat "$work/torch_llama.log"; fail "train_torch_lm.py --arch llama failed"; }
read -r worst pairs < <(compare "$work/tt_llama.log" "$work/torch_llama.log") || fail "the Llama logs do not align"
echo "Llama block, same windows: $pairs losses, largest difference $worst"
[ "$pairs" -eq 31 ] || fail "expected 31 Llama loss pairs, got $pairs"
awk -v w="$worst" 'BEGIN {exit !(w <= 2e-4)}' || fail "tinytrain and PyTorch's Llama differ by $worst on the same windows"
echo PASS
