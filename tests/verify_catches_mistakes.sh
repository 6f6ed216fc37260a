#!/usr/bin/env bash
# `tinytrain verify` catches what it is there to catch: on each reference given, in each
# precision, tools/plant_mistake.py writes copies with a mistake planted in them, and verify
# (CPU backend) must
#   PASS the reference itself and every check's tensor pushed by 0.5 x its tolerance,
#   FAIL (exit 1) every check's tensor pushed by 1.5 x its tolerance, on that check's rows only,
#   FAIL (exit 1) the final.* of a run with every update scaled by 1.5, without AdamW's bias
#   corrections, and with one layer never updated.
# usage: verify_catches_mistakes.sh TINYTRAIN_BIN WORK_DIR REF...   (docs/numerics.md)
# Exit 77 (ctest: skipped) when no Python with torch is found.
set -uo pipefail
bin=$1 work=$2
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
python=$("$here/scripts/find_python.sh" torch) ||
  { echo "SKIPPED: no python3 with torch (install python3-torch)"; exit 77; }
failures=0

# expect PRECISION FILE pass|fail [PREFIX...]: with fail, every FAIL row starts with one of the PREFIXes
expect() {
  local precision=$1 file=$2 want=$3
  shift 3
  local out rc failed_rows=0 wrong_rows=0 row prefix matched
  out=$("$bin" verify --backend cpu --threads 2 --precision "$precision" "$file" 2>&1)
  rc=$?
  while IFS= read -r row; do
    failed_rows=$((failed_rows + 1))
    matched=0
    for prefix in "$@"; do [[ $row == "$prefix"* ]] && matched=1; done
    [ $matched -eq 1 ] || wrong_rows=$((wrong_rows + 1))
  done < <(grep ' FAIL$' <<<"$out")
  local verdict="ok"
  if [ "$want" = pass ]; then
    [ $rc -eq 0 ] || verdict="WRONG: expected PASS, got exit $rc"
  elif [ $rc -ne 1 ] || ! grep -q '^verify: .* failed$' <<<"$out"; then
    verdict="WRONG: expected FAIL (exit 1), got exit $rc"
  elif [ "$wrong_rows" -ne 0 ]; then
    verdict="WRONG: $wrong_rows failing rows outside $*"
  fi
  printf '%-5s %-44s expect %-4s exit %d, %3d rows failed  %s\n' "$precision" "$(basename "$file")" "$want" "$rc" \
    "$failed_rows" "$verdict"
  if [ "$verdict" != ok ]; then
    grep -E ' FAIL$|^verify:|error' <<<"$out" | head -5
    failures=$((failures + 1))
  fi
}

for ref in "$@"; do
  name=$(basename "$ref" .safetensors)
  for precision in fp32 bf16 fp16; do
    dir="$work/${name}_$precision"
    rm -rf "$dir"
    # the mistakes do not depend on the precision: written once, with the fp32 probes
    mistakes=$([ $precision = fp32 ] || echo --no-mistakes)
    "$python" "$here/tools/plant_mistake.py" "$ref" "$dir" --precision "$precision" $mistakes || exit 1
    expect "$precision" "$ref" pass
    for check in logits0 loss grads step1 grad_norm final final_key_rows; do
      [ -f "$dir/push_${check}_0.5.safetensors" ] || continue  # not in this file or precision
      case $check in
        final_key_rows) rows=("final.encoder.layers.0.self_attn.in_proj_bias[key rows]") ;;
        final) rows=("final.lm_head.weight") ;;
        logits0|loss|grad_norm) rows=("$check") ;;
        # step1.* is our AdamW on the reference's gradients: a pushed gradient moves it, and
        # with clipping the global norm moves every step1 element
        grads) rows=("grads.lm_head.weight" "step1.") ;;
        step1) rows=("step1.lm_head.weight") ;;
      esac
      expect "$precision" "$dir/push_${check}_0.5.safetensors" pass
      expect "$precision" "$dir/push_${check}_1.5.safetensors" fail "${rows[@]}"
    done
    for mistake in scale_updates no_bias_correction skip_layer; do
      expect "$precision" "$work/${name}_fp32/$mistake.safetensors" fail "final."
    done
  done
done
[ $failures -eq 0 ] && echo "all as expected" || echo "FAIL: $failures results not as expected"
[ $failures -eq 0 ]
