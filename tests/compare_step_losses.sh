#!/usr/bin/env bash
# The losses of two `tinytrain train` logs, step line by step line ("step   3 | loss 4.1234 | ..."
# or "step 3/6 | loss ..."): prints each pair and fails when the logs have different numbers of
# step lines, when they have none (a comparison of nothing would pass whatever the runs did),
# or when a pair differs by more than TOL. tests/compare_step_losses_test.sh checks it can fail.
# Usage: compare_step_losses.sh LOG_A LOG_B TOL [NAME_A NAME_B]
set -uo pipefail
a=$1 b=$2 tol=$3 name_a=${4:-$1} name_b=${5:-$2}
steps() { grep '^step ' "$1" | awk '{print $2, $5}'; }  # "step 3/6 | loss 4.1234" -> "3/6 4.1234"
na=$(steps "$a" | wc -l) nb=$(steps "$b" | wc -l)
if [ "$na" -ne "$nb" ]; then
  echo "FAIL: $name_a logged $na step lines, $name_b $nb"
  exit 1
fi
if [ "$na" -eq 0 ]; then
  echo "FAIL: neither $name_a nor $name_b logged a step line: nothing to compare"
  exit 1
fi
paste -d' ' <(steps "$a") <(steps "$b" | awk '{print $2}') |
  awk -v tol="$tol" -v A="$name_a" -v B="$name_b" \
    '{d = $2 - $3; if (d < 0) d = -d; printf "step %s: %s %s, %s %s\n", $1, A, $2, B, $3; if (d > tol) bad = 1}
     END {exit bad}' || { echo "FAIL: a loss of $name_b differs from $name_a's by more than $tol"; exit 1; }
