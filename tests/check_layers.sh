#!/usr/bin/env bash
# The layering rule (CMakeLists.txt, docs/architecture.md): kernels/, optim/, parallel/ and
# simt/ include nothing from engine/ (the engine builds on them, never the other way), and
# kernels/ includes nothing from optim/ or parallel/. Prints each offending include and fails.
cd "$(dirname "$0")/.."
status=0
check() {  # directories, then the forbidden include prefix
  local prefix=$1
  shift
  if grep -rn --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' "#include \"$prefix" "$@"; then
    echo "layering: the files above include $prefix, a layer above them"
    status=1
  fi
}
check engine/ kernels optim parallel simt
check optim/ kernels
check parallel/ kernels
[ $status -eq 0 ] && echo "layering: kernels/, optim/, parallel/ and simt/ include nothing from the layers above"
exit $status
