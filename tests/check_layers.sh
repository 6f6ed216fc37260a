#!/usr/bin/env bash
# The layering rule: every folder of C++/CUDA code has a place in one order, and a file may
# include (#include "...") only files of its own folder and of folders below it. So the graph
# of folders has no circle, and a reader can learn the code bottom up. The order, bottom first
# (docs/architecture.md draws it, top first):
#
#   base                 what every layer shares: InputError, the checked parsers of untrusted input
#   kernels/common       math shared bit for bit by host and device: Philox, GELU, AdamW, bf16/fp16
#   kernels              the backend contract: tensor views, arenas, Backend, dtype dispatch
#   kernels/cpu          the CPU backend
#   kernels/cuda         the CUDA backend (and the interface of its optional cuDNN attention)
#   kernels/cudnn        cuDNN's fused attention behind that interface
#   kernels/instruments  not ops: doctor's GPU probes, the CUDA stream clock
#   simt                 the SIMT emulator: kernels/cuda/ on the CPU
#   optim                AdamW, the loss scaler
#   parallel             communicators, the launch, gradient buckets
#   data                 token shards, tokenizers, `prepare`
#   engine               the training core: config, model, trainer, plan, backend selection
#   engine/io            file formats: safetensors, checkpoints, references, metrics, datasets
#   engine/profile       observability: profiler, op costs, roofline, trace, MFU, peaks
#   engine/ops           the ops harness: every backend op against the CPU backend
#   engine/doctor        doctor and its probes
#   cli                  the commands: main.cpp dispatches, one file per command
#   tools                programs and scripts beside the engine
#   tests                the tests
#
# A folder not named here takes the place of the nearest named folder above it (simt/include
# is simt, tests/fuzz is tests); a top-level folder with code that is not named is an error.
#
#   tests/check_layers.sh [ROOT]   checks the tree at ROOT (default: this one); prints each
#                                  offending include and exits 1, or says the rule holds
#   tests/check_layers.sh --order  prints the order, bottom first, one folder per line
set -u
layers=(base kernels/common kernels kernels/cpu kernels/cuda kernels/cudnn kernels/instruments simt optim parallel
        data engine engine/io engine/profile engine/ops engine/doctor cli tools tests)

if [ "${1:-}" = "--order" ]; then
  printf '%s\n' "${layers[@]}"
  exit 0
fi
root=${1:-$(dirname "$0")/..}
cd "$root" || exit 2

declare -A rank
for i in "${!layers[@]}"; do rank[${layers[$i]}]=$i; done

# The layer of a file (its path from the root): the longest named folder its directory is in.
layer_of() {
  local dir
  dir=$(dirname "$1")
  while [ "$dir" != "." ]; do
    if [ -n "${rank[$dir]+set}" ]; then
      echo "$dir"
      return 0
    fi
    dir=$(dirname "$dir")
  done
  return 1
}

status=0
sources=$(find . -path ./build -prune -o -path './build-*' -prune -o -path ./.git -prune -o \
               -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print | sed 's|^\./||' | sort)
for file in $sources; do
  if ! own=$(layer_of "$file"); then
    echo "layering: $file is in a folder the order does not name: give its folder a place in tests/check_layers.sh"
    status=1
    continue
  fi
  # Each quoted include that names a file of the tree, from the root or from the file's folder.
  while IFS= read -r included; do
    target=""
    if [ -f "$included" ]; then
      target=$included
    elif [ -f "$(dirname "$file")/$included" ]; then
      target=$(dirname "$file")/$included
    fi
    [ -n "$target" ] || continue  # a library's header
    to=$(layer_of "$target") || continue
    if [ "${rank[$to]}" -gt "${rank[$own]}" ]; then
      echo "layering: $file includes \"$included\": $own/ may not include $to/, a layer above it"
      status=1
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done
if [ $status -eq 0 ]; then
  echo "layering: every include points down the order ${layers[*]}"
fi
exit $status
