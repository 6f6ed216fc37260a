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

# Every source file, then every quoted include in them ("file<TAB>included"), to one awk program
# that resolves each include (from the root, else from the file's folder) among the sources and
# compares the layers.
sources=$(find . -path ./build -prune -o -path './build-*' -prune -o -path ./.git -prune -o -path ./.venv -prune -o \
               -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print | sed 's|^\./||' | sort)
{
  printf '%s\n' "$sources"
  echo "--"
  # shellcheck disable=SC2086
  grep -H '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' $sources |
    sed 's/^\([^:]*\):[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1\t\2/'
} | awk -v order="${layers[*]}" '
  function folder(path) { sub(/\/[^\/]*$/, "", path); return path }
  # The layer of a file: the longest named folder its folder is in; "" when none.
  function layer_of(path,    dir) {
    for (dir = folder(path); dir != ""; dir = (dir ~ /\//) ? folder(dir) : "")
      if (dir in rank) return dir
    return ""
  }
  # a/b/../c -> a/c, ./a -> a
  function normal(path,    n, parts, out, i, k) {
    n = split(path, parts, "/"); k = 0
    for (i = 1; i <= n; i++) {
      if (parts[i] == "." || parts[i] == "") continue
      if (parts[i] == ".." && k > 0) { k--; continue }
      out[++k] = parts[i]
    }
    path = out[1]
    for (i = 2; i <= k; i++) path = path "/" out[i]
    return path
  }
  BEGIN { n = split(order, names, " "); for (i = 1; i <= n; i++) rank[names[i]] = i }
  !listed && $0 == "--" { listed = 1; next }
  !listed {
    source[$0] = 1
    if (layer_of($0) == "") {
      print "layering: " $0 " is in a folder the order does not name: give its folder a place in tests/check_layers.sh"
      bad = 1
    }
    next
  }
  {
    split($0, f, "\t"); file = f[1]; included = f[2]
    target = normal(included)
    if (!(target in source)) target = normal(folder(file) "/" included)
    if (!(target in source)) next  # a library header
    own = layer_of(file); to = layer_of(target)
    if (own != "" && to != "" && rank[to] > rank[own]) {
      print "layering: " file " includes \"" included "\": " own "/ may not include " to "/, a layer above it"
      bad = 1
    }
  }
  END { exit bad }'
status=$?
if [ $status -eq 0 ]; then
  echo "layering: every include points down the order ${layers[*]}"
fi
exit $status
