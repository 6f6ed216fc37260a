#!/usr/bin/env bash
# llm.c's data and tokenizer, end to end (docs/toy-lm.md, "llm.c's data"): a directory of
# llm.c shards written by tests/llmc_files.py after llm.c's own layout (two train shards, one
# val shard, gpt2_tokenizer.bin; no tokenizer.json) trains with --data, and `sample --tokenizer
# FILE --prompt-ids` decodes the model's ids with the tokenizer file, text alone on stdout. Then
# each bad input is one line naming the flag or file, exit 1.
#   tests/llmc_data.sh TINYTRAIN
set -u
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }
py=$(command -v python3 || command -v /usr/bin/python3) || { echo "no python3"; exit 1; }

"$py" "$here/llmc_files.py" "$work/data" 300 || exit 1
common=(--backend cpu --threads 1 --d-model 32 --n-head 4 --n-layer 1 --d-ff 64 --seq 16 --batch 4
        --causal true --pos-embedding learned --max-seq-len 32 --lr 1e-2 --log-every 1)

# trains: the two train shards are one stream (3000 + 2000 tokens); vocab padded past the ids (300 -> 320)
"$bin" train "${common[@]}" --data "$work/data" --vocab-size 320 --steps 3 --eval-every 3 \
  --save-dir "$work/ckpt" > "$work/train.log" 2>&1 || { cat "$work/train.log"; fail "train on llm.c shards"; }
grep -q "train 5000 tokens, val 1200 tokens, vocab 320" "$work/train.log" ||
  { cat "$work/train.log"; fail "the data line should count both train shards as one stream"; }
grep -q "^step 2/3 | loss" "$work/train.log" || fail "no step 2 line"

# samples with the tokenizer file: text only on stdout, each id's "<i>" or "|" pieces
"$bin" sample --backend cpu --threads 1 --checkpoint "$work/ckpt" --tokenizer "$work/data/gpt2_tokenizer.bin" \
  --prompt-ids 299,0,7 --max-new-tokens 8 --seed 3 > "$work/out1" 2> "$work/err1" ||
  { cat "$work/out1" "$work/err1"; fail "sample with the llm.c tokenizer file"; }
"$bin" sample --backend cpu --threads 1 --checkpoint "$work/ckpt" --tokenizer "$work/data/gpt2_tokenizer.bin" \
  --prompt-ids 299,0,7 --max-new-tokens 8 --seed 3 > "$work/out2" 2> /dev/null
grep -q "^<0><7>" "$work/out1" || { cat "$work/out1"; fail "the sample should start with the prompt's pieces <0><7>"; }
grep -qv "^[<>|0-9]*$" "$work/out1" && { cat "$work/out1"; fail "stdout holds something other than decoded pieces"; }
cmp -s "$work/out1" "$work/out2" || fail "two runs with one seed printed different text"
grep -q "^generated .* tokens/s" "$work/err1" || { cat "$work/err1"; fail "the statistics line belongs on stderr"; }

# bad input: one line, exit 1, naming the flag or the file
expect_error() {  # WHAT PHRASE COMMAND...
  local what=$1 phrase=$2
  shift 2
  "$@" > "$work/bad.out" 2> "$work/bad.err"
  local rc=$?
  if [ $rc -ne 1 ] || [ "$(wc -l < "$work/bad.err")" -ne 1 ] || ! grep -q -- "$phrase" "$work/bad.err"; then
    cat "$work/bad.out" "$work/bad.err"
    fail "$what: want exit 1 and one line holding '$phrase', got exit $rc"
  fi
}
mkdir -p "$work/no_train" && cp "$work/data/tiny_val.bin" "$work/no_train/"
expect_error "no train shard" "no llm.c train shard" "$bin" train "${common[@]}" --data "$work/no_train" --vocab-size 320
expect_error "no --vocab-size" "give --vocab-size" "$bin" train "${common[@]}" --data "$work/data"
expect_error "a token beyond the vocabulary" "tiny_train_000.bin" "$bin" train "${common[@]}" --data "$work/data" --vocab-size 200
"$py" "$here/llmc_files.py" "$work/short" 300 --truncate-tokenizer
expect_error "a truncated tokenizer file" "gpt2_tokenizer.bin: id 298 needs" "$bin" sample --backend cpu \
  --checkpoint "$work/ckpt" --tokenizer "$work/short/gpt2_tokenizer.bin" --prompt-ids 299
expect_error "text to encode" "--prompt-ids" "$bin" sample --backend cpu --checkpoint "$work/ckpt" \
  --tokenizer "$work/data/gpt2_tokenizer.bin" --prompt "hello"
expect_error "an id beyond the tokenizer" "--prompt-ids" "$bin" sample --backend cpu --checkpoint "$work/ckpt" \
  --tokenizer "$work/data/gpt2_tokenizer.bin" --prompt-ids 300

[ $status -eq 0 ] && echo "PASS: llm.c shards train, the GPT-2 tokenizer file decodes, bad input is one line"
exit $status
