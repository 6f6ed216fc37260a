#!/usr/bin/env bash
# tests/check_layers.sh can fail, and docs/architecture.md draws its order and names every unit:
#   1. the tree as it is passes;
#   2. on a copy of the tree's code, each planted upward include (one at a time) fails the
#      check, which names the file, what it included and the two layers; a folder with code
#      that the order does not name fails too;
#   3. the layer diagram of docs/architecture.md lists the script's order, top first;
#   4. docs/architecture.md names every file of every layer (tools/ and tests/ aside).
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
check=$src/tests/check_layers.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
fail() {
  echo "FAIL: $*"
  status=1
}

# 1.
bash "$check" "$src" >"$tmp/out" 2>&1 || fail "the tree itself breaks the layering: $(cat "$tmp/out")"

# 2. A fresh copy of the code for each plant: file, the include planted in it, the phrase the
# check must print.
mkdir "$tmp/code"
(cd "$src" && find . -path ./build -prune -o -path './build-*' -prune -o -path ./.git -prune -o -path ./.venv -prune -o -type f \
   \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print0 | xargs -0 cp --parents -t "$tmp/code")
fresh_copy() {
  rm -rf "$tmp/tree"
  cp -a "$tmp/code" "$tmp/tree"
}
plant() {  # file, include, expected phrase
  fresh_copy
  printf '#include "%s"\n' "$2" >>"$tmp/tree/$1"
  if bash "$check" "$tmp/tree" >"$tmp/out" 2>&1; then
    fail "$1 including $2 passed the check"
  elif ! grep -qF -- "$3" "$tmp/out"; then
    fail "$1 including $2: expected '$3' in: $(cat "$tmp/out")"
  fi
}
plant data/token_shard.cpp engine/config.h 'data/token_shard.cpp includes "engine/config.h": data/ may not include engine/'
plant kernels/cuda/cuda_backend.h kernels/cudnn/cudnn_graph.h 'kernels/cuda/ may not include kernels/cudnn/'
plant kernels/common/half.h kernels/tensor.h 'kernels/common/ may not include kernels/'
plant base/checked_input.cpp kernels/tensor.h 'base/ may not include kernels/'
plant simt/scheduler.cpp engine/config.h 'simt/ may not include engine/'
plant optim/adamw.cpp parallel/communicator.h 'optim/ may not include parallel/'
plant engine/model.cpp cli/train_loop.h 'engine/ may not include cli/'
plant engine/trainer.cpp engine/profile/profiler.h 'engine/ may not include engine/profile/'
plant engine/io/checkpoint.cpp ../doctor/doctor.h 'engine/io/ may not include engine/doctor/'
plant engine/ops/op_harness.cpp engine/doctor/cpu_probes.h 'engine/ops/ may not include engine/doctor/'
plant cli/main.cpp tests/test_models.h 'cli/ may not include tests/'
fresh_copy
mkdir -p "$tmp/tree/newfolder"
printf '#include "engine/config.h"\n' >"$tmp/tree/newfolder/thing.cpp"
if bash "$check" "$tmp/tree" >"$tmp/out" 2>&1 || ! grep -qF 'newfolder/thing.cpp is in a folder the order does not name' "$tmp/out"; then
  fail "a folder outside the order was not refused: $(cat "$tmp/out")"
fi

# 3. The diagram: the lines of the block after the marker in docs/architecture.md, each
# starting with a folder ("cli/"), top first.
drawn=$(awk '/<!-- layers, top first/ {on = 1; next} on && /^```/ {if (inside) exit; inside = 1; next}
             on && inside {print $1}' "$src/docs/architecture.md" | sed 's|/$||' | tac)
if [ "$drawn" != "$(bash "$check" --order)" ]; then
  fail "docs/architecture.md's layer diagram differs from tests/check_layers.sh --order:
$(diff <(echo "$drawn") <(bash "$check" --order))"
fi

# 4. The map names every unit: each file's name (without its extension) of every folder of
# the order but tools/ and tests/ appears in docs/architecture.md.
for folder in $(bash "$check" --order); do
  case $folder in tools | tests) continue ;; esac
  for file in "$src/$folder"/*; do
    [ -f "$file" ] || continue
    case $file in *.h | *.cpp | *.cu | *.cuh | *.py | *.txt) ;; *) continue ;; esac
    unit=$(basename "${file%.*}")
    grep -qw -- "$unit" "$src/docs/architecture.md" || fail "docs/architecture.md does not name $folder/$(basename "$file")"
  done
done

[ $status -eq 0 ] && echo "check_layers.sh: passes on the tree, fails on each planted upward include; the docs draw its order and name every unit"
exit $status
