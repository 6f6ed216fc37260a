#!/usr/bin/env bash
# Bounded fuzzing of the readers of untrusted files: each libFuzzer target of tests/fuzz/
# (built with -DTINYTRAIN_FUZZ=ON, which scripts/test_sanitizers.sh does in build-asan/, with
# ASan and UBSan) runs for SECONDS, starting from its seed corpus (the committed references
# and hostile files, tests/fuzz/build_corpus.py). The time is fixed, so this stage can never
# make CI run long; what it finds fails it:
#   a crash, a sanitizer report, or an exception other than InputError (the target aborts);
#   any single allocation above 64 MB (inputs are at most 16 KB: nothing a file of that size
#     holds justifies more, so it is a count used before it was checked);
#   an input that takes more than 10 s (a hang).
# The failing input is saved and printed in base64 with the command that reproduces it; add
# it to tests/fuzz/regressions/ with a test, then fix. libFuzzer prints its random seed
# ("INFO: Seed:"); -seed=N repeats a run.
# Usage: scripts/run_fuzz.sh BUILD_DIR [SECONDS per target, default 30]
set -euo pipefail
build=$(cd "$1" && pwd)
seconds=${2:-30}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for target in reference config token_shard; do
  bin="$build/tests/fuzz/fuzz_$target"
  mkdir -p "$work/corpus_$target" "$work/found_$target"
  cp "$build/tests/fuzz/corpus/$target/"* "$work/corpus_$target/"
  echo "fuzz_$target: ${seconds} s from $(ls "$work/corpus_$target" | wc -l) seed inputs"
  if "$bin" -max_total_time="$seconds" -max_len=16384 -malloc_limit_mb=64 -rss_limit_mb=2048 -timeout=10 \
       -artifact_prefix="$work/found_$target/" -print_final_stats=1 "$work/corpus_$target" >"$work/$target.log" 2>&1; then
    grep -E "^INFO: Seed:|^Done|stat::number_of_executed_units|stat::new_units_added" "$work/$target.log" | sed 's/^/  /'
  else
    status=1
    echo "fuzz_$target FOUND A FAILURE; libFuzzer's output ends:"
    tail -40 "$work/$target.log" | sed 's/^/  /'
    for input in "$work/found_$target"/*; do
      [ -f "$input" ] || continue
      echo "failing input $(basename "$input"), base64 (reproduce: base64 -d > in && $bin in):"
      base64 -w 76 "$input" | sed 's/^/  /'
    done
  fi
done
exit $status
