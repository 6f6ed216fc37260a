#!/usr/bin/env bash
# Bundles what the build needs from this Debian 12 machine into .gpu-deps/ (git-ignored), so
# that a GPU machine without our dev packages (no OpenBLAS, nlohmann-json, CLI11, GoogleTest)
# can build and test the engine: carry ".gpu-deps" with the working tree and configure with
# -DTINYTRAIN_DEPS_DIR=$PWD/.gpu-deps (scripts/gpu_check.sh does; see the dependency section
# of CMakeLists.txt).
#
#   .gpu-deps/include/nlohmann/          from /usr/include/nlohmann       (header-only)
#   .gpu-deps/include/CLI/               from /usr/include/CLI            (header-only)
#   .gpu-deps/include/openblas/          cblas.h, openblas_config.h, f77blas.h (OpenMP build)
#   .gpu-deps/include/cudnn/             cudnn_graph.h, cudnn_version.h from /usr/local/cuda
#                                        (the backend API the cuDNN attention uses), for a
#                                        GPU machine whose cuDNN wheel ships no headers
#   .gpu-deps/lib/libopenblas.so.0.tar.xz  Debian's OpenMP OpenBLAS, under its soname, xz'd:
#                                        36.5 MB raw would put the bundle over 40 MiB; CMake
#                                        unpacks it into the build folder at configure time
#   .gpu-deps/lib/libgfortran.so.5, libquadmath.so.0   its runtime deps outside glibc and GCC
#   .gpu-deps/include/sentencepiece/     sentencepiece_processor.h, sentencepiece_trainer.h
#   .gpu-deps/lib/libsentencepiece.so.0, libsentencepiece_train.so.0   Debian's SentencePiece
#                                        (`prepare`'s BPE tokenizer; needs only libstdc++)
#   .gpu-deps/lib/fallback/libgomp.so.1, libgcc_s.so.1 GCC runtime parts; used only where
#                                        the GPU machine has none (CMake decides)
#   .gpu-deps/googletest/                a copy of /usr/src/googletest (its sources)
#   .gpu-deps/kernel_model/seed_{fp32,bf16}.json   the kernel model of the seed step, made here
#                                        on the emulator (profile --backend cuda-emu --estimate
#                                        h200 --kernel-json; needs build/tinytrain): gpu_check's
#                                        kernel_model step sets the GPU's times beside it
#   .gpu-deps/MANIFEST                   what came from where, with package versions
#
# No symlinks anywhere: the transfer does not carry them, so every file is a real copy.
# Usage: bash scripts/bundle_gpu_deps.sh [OUT_DIR]   (default: <repo>/.gpu-deps)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/.gpu-deps}
multiarch=x86_64-linux-gnu
blas_inc=/usr/include/$multiarch/openblas-openmp
blas_lib=/usr/lib/$multiarch/openblas-openmp/libopenblas.so.0
limit_mib=40

die() { echo "bundle_gpu_deps.sh: error: $*" >&2; exit 1; }
for need in /usr/include/nlohmann/json.hpp /usr/include/CLI/CLI.hpp "$blas_inc/cblas.h" \
            "$blas_lib" /usr/src/googletest/CMakeLists.txt /usr/include/sentencepiece_trainer.h; do
  [ -e "$need" ] || die "$need missing (run scripts/setup.sh: libopenblas-openmp-dev, nlohmann-json3-dev, libcli11-dev, googletest, libsentencepiece-dev)"
done
command -v xz >/dev/null || die "xz missing (apt-get install xz-utils)"

# Build into a fresh folder next to the target, then swap it in, so a failed run never
# leaves a half-made bundle that a later device run would carry.
tmp="$out.tmp.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/include/openblas" "$tmp/lib/fallback"

# -L: copy what links point to, under the link's name.
cp -rL /usr/include/nlohmann "$tmp/include/nlohmann"
cp -rL /usr/include/CLI "$tmp/include/CLI"
cudnn_inc=/usr/local/cuda/include
if [ -f "$cudnn_inc/cudnn_graph.h" ]; then
  mkdir -p "$tmp/include/cudnn"
  cp -L "$cudnn_inc/cudnn_graph.h" "$cudnn_inc/cudnn_version.h" "$tmp/include/cudnn/"
fi
cp -L "$blas_inc"/*.h "$tmp/include/openblas/"
mkdir -p "$tmp/include/sentencepiece"
cp -L /usr/include/sentencepiece_processor.h /usr/include/sentencepiece_trainer.h "$tmp/include/sentencepiece/"
cp -L "/usr/lib/$multiarch/libsentencepiece.so.0" "/usr/lib/$multiarch/libsentencepiece_train.so.0" "$tmp/lib/"
cp -rL /usr/src/googletest "$tmp/googletest"

# OpenBLAS, under its soname. The .tar.xz holds one real file, libopenblas.so.0.
stage="$tmp/stage"
mkdir -p "$stage"
cp -L "$blas_lib" "$stage/libopenblas.so.0"
tar -C "$stage" -cf - libopenblas.so.0 | xz -T0 -9 > "$tmp/lib/libopenblas.so.0.tar.xz"
rm -rf "$stage"

# OpenBLAS's runtime dependencies (ldd lists them transitively). glibc's own libraries exist
# on every Linux; GCC's runtime (libgomp, libgcc_s) exists wherever GCC does, and a copy of
# an older one placed first on the search path could shadow a newer one that binaries built
# there need, so those two go to lib/fallback/, which CMake adds only when the machine lacks
# them. The rest (libgfortran, libquadmath: not installed without gfortran) go to lib/.
deps=$(ldd "$blas_lib" | awk '$2 == "=>" && $3 ~ /^\// { print $1 " " $3 }')
[ -n "$deps" ] || die "ldd $blas_lib listed nothing"
while read -r soname path; do
  case "$soname" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libresolv.so.*) ;;
    libgomp.so.*|libgcc_s.so.*) cp -L "$path" "$tmp/lib/fallback/$soname" ;;
    *) cp -L "$path" "$tmp/lib/$soname" ;;
  esac
done <<< "$deps"
[ -f "$tmp/lib/libgfortran.so.5" ] || die "expected libgfortran.so.5 among OpenBLAS's dependencies"

# The kernel model of the seed step on the emulator (the GPU machine builds no emulator, and its
# compiler has no plugin headers to count arithmetic with).
[ -x "$root/build/tinytrain" ] || die "build/tinytrain missing: build first (scripts/setup.sh) for the kernel model"
mkdir -p "$tmp/kernel_model"
for precision in fp32 bf16; do
  "$root/build/tinytrain" profile --backend cuda-emu --estimate h200 --steps 2 --precision "$precision" \
    --kernel-json "$tmp/kernel_model/seed_$precision.json" > /dev/null || die "the kernel model ($precision) failed"
done

pkgver() { dpkg-query -W -f='${Package} ${Version}\n' "$1" 2>/dev/null || echo "$1 (version unknown)"; }
{
  echo "tinytrain GPU-machine dependency bundle, made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  echo "by scripts/bundle_gpu_deps.sh; use: cmake -DTINYTRAIN_DEPS_DIR=\$PWD/.gpu-deps ..."
  echo "glibc $(ldd --version | head -1 | awk '{print $NF}'); newest glibc symbol versions needed:"
  for f in "$blas_lib" "$tmp"/lib/*.so.[0-9] "$tmp"/lib/fallback/*.so.[0-9]; do
    echo "  $(basename "$f"): $(objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -V -u | tail -1)"
  done
  echo "packages:"
  for p in nlohmann-json3-dev libcli11-dev libopenblas0-openmp libopenblas-openmp-dev \
           libgfortran5 libquadmath0 libgomp1 googletest libsentencepiece0 libsentencepiece-dev; do
    echo "  $(pkgver "$p")"
  done
  echo "files:"
  (cd "$tmp" && find . -type f ! -path './googletest/*' ! -path './include/*' | sort | sed 's/^/  /')
} > "$tmp/MANIFEST"

links=$(find "$tmp" -type l | wc -l)
[ "$links" -eq 0 ] || die "$links symlinks in the bundle"

rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT

bytes=$(du -sb "$out" | cut -f1)
mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
echo "bundle: $out"
du -sh "$out"/include "$out"/lib "$out"/googletest | sed 's/^/  /'
echo "bundle size: $bytes bytes ($mib MiB, limit $limit_mib MiB), $(find "$out" -type f | wc -l) files, 0 symlinks"
awk -v b="$bytes" -v l="$limit_mib" 'BEGIN { exit !(b < l * 1048576) }' || die "bundle is over $limit_mib MiB"
