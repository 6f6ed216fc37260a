#!/usr/bin/env bash
# Everything that needs a GPU, in one call on the lent GPU machine (one H200, nvcc 13, CMake,
# ninja, PyTorch; none of our Debian dev packages, no package registry):
#
#   here, on Debian, first:  bash scripts/bundle_gpu_deps.sh        (makes .gpu-deps/, ~12 MiB)
#   then the device call:    run(command="bash scripts/gpu_check.sh $OUT",
#                                carry=[".gpu-deps"], timeout_s=570)
#
# Usage: bash scripts/gpu_check.sh OUT_DIR
# Writes OUT_DIR/gpu_check.log (all output), OUT_DIR/summary.json (every step: name, status,
# exit code, seconds, key numbers), OUT_DIR/bench.json, OUT_DIR/steps/*.log (each step's
# output), OUT_DIR/ctest_junit.xml and OUT_DIR/LastTest.log.gz. Steps, each under a time limit,
# all run even when one fails, within GPU_CHECK_BUDGET_S (default 480 s) in total:
#   (a) machine: nvidia-smi, nvcc --version, the python3 with torch
#   (b) configure + build for sm_90 (SASS + compute_90 PTX) with -j16, against .gpu-deps/
#       when it is there; checks that the binary holds sm_90 code and finds its libraries
#   (c) ctest -j8 (2 OpenMP threads per test, per-test timeout): passed / failed / skipped,
#       failing names; the CUDA (and cuDNN) tests must run, not skip
#   (d) tinytrain verify --backend cuda on every tests/data/*.safetensors and on a fresh
#       full-size GELU reference from this machine's PyTorch (the seed's sizes, GELU for the
#       reason in docs/numerics.md; seed 1, the next seed if make_reference.py refuses one as
#       ill-conditioned), the latter also with bf16 storage
#       and --attention cudnn: pass/fail, the worst row, which attention ran
#   (e) tools/bench_gpu.py: the seed workload and a larger GEMM-bound config (d_model 768,
#       12 layers, seq 1024), tinytrain fp32/bf16/fp16 (bf16 also with cuDNN attention) vs
#       PyTorch eager fp32 / autocast bf16 / fp16 and torch.compile: ms/step, tokens/s,
#       TFLOP/s, MFU vs a measured bf16 peak
#   (f) NCCL, two ranks forked onto the GPU (run after (c), before the longer (d) and (e)):
#       ctest -R '^nccl\.NcclCommunicator\.' (every collective against closed forms, the
#       overlapped all-reduce in a CUDA graph, a dead rank; they must run, not skip; the other
#       nccl-labelled tests are (g)'s), then nccl_busbw --ranks 2: the all-reduce table
#       1 MiB..256 MiB and the busbw at the largest size (two ranks on one GPU talk through
#       NCCL's socket transport: a check of the path, not of NVLink)
#   (g) data-parallel training on 2 torchrun-style NCCL ranks on the GPU (after (f);
#       tests/nccl/train_ranks.sh, also ctest's nccl.train_ranks.np2, left out of (c)): the
#       losses of 10 steps against one process with buckets, one all-reduce and ZeRO-1 (within
#       1e-4), then the seed workload's ms/step on 2 ranks with and without overlap and ZeRO-1
#   (h) tinytrain doctor --backend cuda (and --json to OUT_DIR/doctor.json; peaks saved under
#       OUT_DIR/cache), profile of the seed workload fp32 (trace OUT_DIR/profile_seed.json) and
#       bf16, ops check on the GPU against the CPU backend and ops perf bf16
# Exit status 0 only when every step passed and no CUDA test was skipped.
#
# Testing without a GPU: every step is recorded as failed or skipped, the JSON is still
# written, and the exit status is 1. GPU_CHECK_SKIP_BUILD=1 reuses an existing build folder
# (GPU_CHECK_BUILD_DIR, default build/) instead of configuring and building.
set -uo pipefail

if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: bash scripts/gpu_check.sh OUT_DIR" >&2
  exit 2
fi
mkdir -p "$1" || exit 2
out=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)

# Re-run under tee, so that the log holds everything and the pipeline waits for tee.
if [ -z "${GPU_CHECK_INNER:-}" ]; then
  GPU_CHECK_INNER=1 bash "$0" "$out" 2>&1 | tee "$out/gpu_check.log"
  exit "${PIPESTATUS[0]}"
fi

cd "$root" || exit 2
export out root
export BUILD=${GPU_CHECK_BUILD_DIR:-build}
case "$BUILD" in /*) ;; *) BUILD="$root/$BUILD" ;; esac
budget=${GPU_CHECK_BUDGET_S:-480}
jobs=${GPU_CHECK_JOBS:-16}
start=$SECONDS
mkdir -p "$out/steps"
steps_tsv="$out/steps.tsv"
: > "$steps_tsv"
rev=$(git -C "$root" rev-parse --short HEAD 2>/dev/null) &&
  { git -C "$root" diff --quiet HEAD 2>/dev/null || rev="$rev, with local changes"; } || rev="no git"
echo "gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), repo $root ($rev), out $out, budget ${budget} s"

# ---- finding the tools --------------------------------------------------------------------
NVCC=""
for c in "$(command -v nvcc 2>/dev/null)" /usr/local/cuda/bin/nvcc $(ls -d /usr/local/cuda-*/bin/nvcc 2>/dev/null | sort -V -r); do
  if [ -n "$c" ] && [ -x "$c" ]; then NVCC=$c; break; fi
done
PY=""
for c in python3 /usr/bin/python3 python; do
  if command -v "$c" >/dev/null 2>&1 && "$c" -c "import torch" >/dev/null 2>&1; then
    PY=$(command -v "$c"); break
  fi
done
SUMMARY_PY=$(command -v python3 || command -v python || true)
DEPS=""
[ -d "$root/.gpu-deps/include" ] && DEPS="$root/.gpu-deps"
# cuDNN (for --attention cudnn): next to the toolkit, else the one in PyTorch's wheels
# (site-packages/nvidia/cudnn/lib/libcudnn.so.9; its headers, if the wheel has none, come
# from the bundle). Its folder goes on LD_LIBRARY_PATH: libcudnn.so.9 loads its engine
# libraries from there at run time.
CUDNN_DIR=""
if [ -n "$NVCC" ] && ls "$(dirname "$(dirname "$NVCC")")"/lib*/libcudnn.so.9 >/dev/null 2>&1; then
  CUDNN_DIR=$(dirname "$(dirname "$NVCC")")
elif [ -n "$PY" ]; then
  CUDNN_DIR=$("$PY" -c 'import glob, os, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
hits = [h for d in dirs for h in sorted(glob.glob(os.path.join(d, "nvidia", "cudnn*", "lib", "libcudnn.so.9")))]
print(os.path.dirname(os.path.dirname(hits[0])) if hits else "")' 2>/dev/null)
fi
if [ -n "$CUDNN_DIR" ]; then
  for lib in "$CUDNN_DIR"/lib64 "$CUDNN_DIR"/lib; do
    [ -d "$lib" ] && export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  done
fi
# NCCL (the NCCL communicator, its tests and nccl_busbw): next to the toolkit, else the one in
# PyTorch's wheels (site-packages/nvidia/nccl/lib/libnccl.so.2), when that wheel also has
# include/nccl.h (the header must match the library). Its lib folder goes on LD_LIBRARY_PATH.
NCCL_DIR=""
if [ -n "$NVCC" ] && ls "$(dirname "$(dirname "$NVCC")")"/lib*/libnccl.so* >/dev/null 2>&1; then
  NCCL_DIR=$(dirname "$(dirname "$NVCC")")
elif [ -n "$PY" ]; then
  NCCL_DIR=$("$PY" -c 'import glob, os, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
hits = [h for d in dirs for h in sorted(glob.glob(os.path.join(d, "nvidia", "nccl*", "lib", "libnccl.so.2")))
        if os.path.exists(os.path.join(os.path.dirname(os.path.dirname(h)), "include", "nccl.h"))]
print(os.path.dirname(os.path.dirname(hits[0])) if hits else "")' 2>/dev/null)
fi
if [ -n "$NCCL_DIR" ]; then
  for lib in "$NCCL_DIR"/lib64 "$NCCL_DIR"/lib; do
    [ -d "$lib" ] && export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  done
fi
export NVCC PY DEPS jobs CUDNN_DIR NCCL_DIR
echo "gpu_check: nvcc ${NVCC:-none}, python with torch ${PY:-none}, bundle ${DEPS:-none}, cuDNN ${CUDNN_DIR:-none}, NCCL ${NCCL_DIR:-none}, build $BUILD"

# ---- running steps --------------------------------------------------------------------------
# step NAME CAP_S FUNCTION [ARGS...]: run FUNCTION in its own bash under `timeout`, the limit
# being CAP_S or what is left of the budget (less a reserve for the summary), output to
# OUT/steps/NAME.log and the console; one line in steps.tsv: name rc seconds status limit.
reserve=15
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "${6:-}" >> "$steps_tsv"; }
skip() {  # skip NAME WHY
  echo "==== skip $1: $2"
  record "$1" - 0 skipped 0 "$2"  # "-": no exit code (read would merge empty tab fields)
}
step() {
  local name=$1 cap=$2; shift 2
  local left=$(( budget - (SECONDS - start) - reserve ))
  local limit=$(( cap < left ? cap : left ))
  if [ "$limit" -lt 5 ]; then skip "$name" "time budget spent"; return 1; fi
  echo "==== [+$(( SECONDS - start ))s] $name (limit ${limit}s): $*"
  local t0 t1 rc status
  t0=$(date +%s.%N)
  timeout -k 10 "$limit" bash -c '"$@"' _ "$@" 2>&1 | tee "$out/steps/$name.log"
  rc=${PIPESTATUS[0]}
  t1=$(date +%s.%N)
  case $rc in
    0) status=pass ;;
    124|137) status=timeout ;;
    *) status=fail ;;
  esac
  local secs
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  echo "==== $name: $status (exit $rc, ${secs}s)"
  record "$name" "$rc" "$secs" "$status" "$limit"
  return $rc
}

# ---- (a) the machine --------------------------------------------------------------------------
s_nvidia_smi() {
  command -v nvidia-smi >/dev/null || { echo "nvidia-smi not found"; return 127; }
  nvidia-smi || return $?
  echo "--- query"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm,power.limit --format=csv
}
s_nvcc() {
  [ -n "$NVCC" ] || { echo "nvcc not found (PATH, /usr/local/cuda*/bin)"; return 127; }
  "$NVCC" --version
}
s_python_torch() {
  [ -n "$PY" ] || { echo "no python3 that imports torch"; return 1; }
  "$PY" - <<'PY'
import glob, os, site, sys, torch
print("python", sys.version.split()[0], sys.executable)
print("torch", torch.__version__, "| cuda", torch.version.cuda, "| cudnn",
      torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
      "| cuda available", torch.cuda.is_available(),
      "| device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
print("torch.compile", hasattr(torch, "compile"))
ok = torch.cuda.is_available()
try:
    import numpy
    print("numpy", numpy.__version__)
except Exception as e:
    print("numpy missing (tools/make_reference.py needs it):", type(e).__name__)
try:
    import triton
    print("triton", triton.__version__)
except Exception as e:
    print("triton missing:", type(e).__name__)
dirs = site.getsitepackages() + [site.getusersitepackages()]
for d in dirs:
    for lib in sorted(glob.glob(os.path.join(d, "nvidia", "*", "lib"))):
        print("wheel lib:", lib, " ".join(sorted(os.listdir(lib))[:6]))
sys.exit(0 if ok else "torch sees no CUDA device")
PY
}
export -f s_nvidia_smi s_nvcc s_python_torch
step nvidia_smi 30 s_nvidia_smi
step nvcc 20 s_nvcc
step python_torch 60 s_python_torch

# ---- (b) configure + build --------------------------------------------------------------------
s_configure() {
  local args=(-S "$root" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90)
  if command -v ninja >/dev/null; then args+=(-G Ninja); fi
  [ -n "$NVCC" ] && args+=(-DCMAKE_CUDA_COMPILER="$NVCC")
  [ -n "$DEPS" ] && args+=(-DTINYTRAIN_DEPS_DIR="$DEPS")
  [ -n "$CUDNN_DIR" ] && args+=(-DCUDNN_ROOT="$CUDNN_DIR")
  [ -n "$NCCL_DIR" ] && args+=(-DNCCL_ROOT="$NCCL_DIR")
  # A folder configured by another generator cannot be reused.
  if [ -f "$BUILD/CMakeCache.txt" ] && command -v ninja >/dev/null &&
     ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$BUILD/CMakeCache.txt"; then
    rm -rf "$BUILD"
  fi
  cmake --version | head -1
  echo "cmake ${args[*]}"
  cmake "${args[@]}" || return $?
  grep -E '^(TINYTRAIN_DEPS_DIR|CMAKE_CUDA_COMPILER|CMAKE_CUDA_ARCHITECTURES|CMAKE_CXX_COMPILER|CUDNN_LIBRARY|CUDNN_INCLUDE_DIR|NCCL_LIBRARY|NCCL_INCLUDE_DIR):' "$BUILD/CMakeCache.txt"
  # Without a CUDA compiler the build silently leaves the CUDA parts out: that is a failure here.
  grep -Eq '^CMAKE_CUDA_COMPILER:[A-Z]*=.*nvcc$' "$BUILD/CMakeCache.txt" ||
    { echo "ERROR: configured without CUDA (no nvcc found)"; return 1; }
}
s_build() {
  cmake --build "$BUILD" -j "$jobs"
}
s_binary() {  # what the build holds: CUDA code for sm_90 + PTX, and its libraries resolve
  local bin="$BUILD/tinytrain" rc=0 cuobjdump
  [ -x "$bin" ] || { echo "no $bin"; return 1; }
  grep -E '^(TINYTRAIN_DEPS_DIR|CMAKE_CUDA_COMPILER|CMAKE_CUDA_ARCHITECTURES):' "$BUILD/CMakeCache.txt" 2>/dev/null
  echo "--- ldd"
  ldd "$bin"
  if ldd "$bin" | grep -q "not found"; then echo "ERROR: unresolved libraries"; rc=1; fi
  ldd "$bin" | grep -q libcudnn || echo "NOTE: built without cuDNN: --attention cudnn falls back to our kernel"
  cuobjdump=$(dirname "${NVCC:-/nonexistent}")/cuobjdump
  [ -x "$cuobjdump" ] || cuobjdump=$(command -v cuobjdump || true)
  if [ -n "$cuobjdump" ]; then
    echo "--- cuobjdump --list-elf / --list-ptx"
    "$cuobjdump" --list-elf "$bin" | sed 's/^/elf: /' | sort | uniq -c | head -20
    "$cuobjdump" --list-ptx "$bin" | sed 's/^/ptx: /' | sort | uniq -c | head -20
    echo "sm_90 cubins: $("$cuobjdump" --list-elf "$bin" 2>/dev/null | grep -c 'sm_90')"
    echo "compute_90 ptx: $("$cuobjdump" --list-ptx "$bin" 2>/dev/null | grep -c 'sm_90\|compute_90')"
    "$cuobjdump" --list-elf "$bin" 2>/dev/null | grep -q 'sm_90' || { echo "ERROR: no sm_90 code"; rc=1; }
  else
    echo "cuobjdump not found: cannot list the embedded CUDA code (not counted as a failure)"
  fi
  "$bin" --help >/dev/null || rc=1
  return $rc
}
export -f s_configure s_build s_binary
if [ -n "${GPU_CHECK_SKIP_BUILD:-}" ]; then
  skip configure "GPU_CHECK_SKIP_BUILD: reusing $BUILD"
  skip build "GPU_CHECK_SKIP_BUILD: reusing $BUILD"
else
  step configure 120 s_configure && step build 300 s_build
  awk -F'\t' '$1 == "build" { found = 1 } END { exit !found }' "$steps_tsv" || skip build "configure failed"
fi
step binary 30 s_binary

# ---- (c) ctest ----------------------------------------------------------------------------------
s_ctest() {
  [ -f "$BUILD/CTestTestfile.cmake" ] || { echo "no $BUILD/CTestTestfile.cmake"; return 1; }
  cd "$BUILD" || return 1
  # 8 tests at a time, 2 OpenMP threads each: 16 cores without oversubscription. The CUDA
  # tests run on the GPU here (in both schedule registrations, which only the emulator uses);
  # the mutants (label mutants) check the SIMT emulator, which CI runs, and are left out; the
  # NCCL tests (label nccl) run alone in (f).
  OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 ctest -j8 --output-on-failure --timeout 150 -LE 'mutants|nccl' \
    --output-junit "$out/ctest_junit.xml"
  local rc=$?
  [ -f Testing/Temporary/LastTest.log ] && gzip -c Testing/Temporary/LastTest.log > "$out/LastTest.log.gz"
  return $rc
}
export -f s_ctest
step ctest 240 s_ctest

# ---- (f) NCCL: two ranks on the GPU -------------------------------------------------------------
s_nccl_ctest() {  # the NCCL tests must run here: a skip is a failure
  [ -f "$BUILD/CTestTestfile.cmake" ] || { echo "no $BUILD/CTestTestfile.cmake"; return 1; }
  cd "$BUILD" || return 1
  ctest -R '^nccl\.NcclCommunicator\.' --output-on-failure 2>&1 | tee "$BUILD/nccl_ctest.log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || return "$rc"
  grep -q "tests passed" "$BUILD/nccl_ctest.log" || { echo "ERROR: no NCCL tests (a build without NCCL?)"; return 1; }
  if grep -q "Skipped" "$BUILD/nccl_ctest.log"; then echo "ERROR: NCCL tests skipped on the GPU machine"; return 1; fi
}
s_nccl_busbw() {
  [ -x "$BUILD/nccl_busbw" ] || { echo "no $BUILD/nccl_busbw (built when CMake finds NCCL: NCCL_ROOT)"; return 1; }
  "$BUILD/nccl_busbw" --ranks 2 --timeout 60
}
export -f s_nccl_ctest s_nccl_busbw
step nccl_ctest 200 s_nccl_ctest
step nccl_busbw 120 s_nccl_busbw

# ---- (g) data-parallel training on 2 ranks ------------------------------------------------------
s_train_ranks() {
  [ -x "$BUILD/tinytrain" ] || { echo "no $BUILD/tinytrain"; return 1; }
  bash "$root/tests/nccl/train_ranks.sh" "$BUILD/tinytrain" 2
}
export -f s_train_ranks
step train_ranks 200 s_train_ranks

# ---- (h) doctor, profile and ops on the GPU (docs/doctor.md, docs/profiling.md, docs/ops.md) ----
s_doctor() {  # the chain and the measured peaks (saved under $out/cache for MFU and the roofline)
  TINYTRAIN_CACHE_DIR="$out/cache" "$BUILD/tinytrain" doctor --backend cuda &&
    TINYTRAIN_CACHE_DIR="$out/cache" "$BUILD/tinytrain" doctor --backend cuda --json > "$out/doctor.json"
}
s_profile() {  # the seed workload's per-op table against those peaks, and its Chrome trace
  TINYTRAIN_CACHE_DIR="$out/cache" "$BUILD/tinytrain" profile --backend cuda --steps 5 --trace "$out/profile_seed.json" &&
    TINYTRAIN_CACHE_DIR="$out/cache" "$BUILD/tinytrain" profile --backend cuda --precision bf16 --steps 5
}
s_ops() {  # every op against the CPU backend in every precision, then timed
  TINYTRAIN_CACHE_DIR="$out/cache" "$BUILD/tinytrain" ops check --backend cuda &&
    TINYTRAIN_CACHE_DIR="$out/cache" "$BUILD/tinytrain" ops perf --backend cuda --dtype bf16
}
export -f s_doctor s_profile s_ops
step doctor 90 s_doctor
step profile 60 s_profile
step ops 90 s_ops

# ---- (d) verify on the GPU ------------------------------------------------------------------
s_verify() {  # s_verify REFERENCE [FLAGS...]
  [ -x "$BUILD/tinytrain" ] || { echo "no $BUILD/tinytrain"; return 1; }
  "$BUILD/tinytrain" verify --backend cuda "$@"
}
s_make_reference() {  # seed 1, or the next seed when make_reference.py refuses it (exit 3)
  [ -n "$PY" ] || { echo "no python3 with torch"; return 1; }
  local ref_dir="$BUILD/gpu_check_refs" seed rc=1
  mkdir -p "$ref_dir"
  for seed in 1 2 3 4; do
    echo "--- make_reference.py --seed $seed"
    "$PY" "$root/tools/make_reference.py" --seed "$seed" --steps 5 --activation gelu --threads 16 \
      --out "$ref_dir/full_size_gelu.safetensors"
    rc=$?
    if [ $rc -eq 0 ]; then echo "reference seed: $seed"; return 0; fi
    [ $rc -eq 3 ] || return $rc
  done
  return $rc
}
export -f s_verify s_make_reference
for ref in "$root"/tests/data/*.safetensors; do
  step "verify_cuda.$(basename "$ref" .safetensors)" 60 s_verify "$ref"
done
rm -f "$BUILD/gpu_check_refs/full_size_gelu.safetensors"
if step make_reference 120 s_make_reference; then
  step verify_cuda.full_size_gelu 60 s_verify "$BUILD/gpu_check_refs/full_size_gelu.safetensors"
  # cuDNN's fused attention against the same PyTorch reference, with bf16 storage
  step verify_cuda.cudnn_bf16.full_size_gelu 60 s_verify "$BUILD/gpu_check_refs/full_size_gelu.safetensors" \
    --precision bf16 --attention cudnn
else
  skip verify_cuda.full_size_gelu "no fresh reference"
fi

# ---- (e) benchmark ----------------------------------------------------------------------------
s_bench() {  # s_bench PER_RUN_S BUDGET_S
  [ -n "$PY" ] || { echo "no python3 with torch"; return 1; }
  "$PY" "$root/tools/bench_gpu.py" --tinytrain "$BUILD/tinytrain" --python "$PY" \
    --configs seed,large --seed-steps 300 --seed-warmup 20 \
    --large-steps 35 --large-warmup 5 --large-window 5 --large-batch 8 \
    --timeout "$1" --eager-timeout 60 --budget "$2" --json "$out/bench.json"
}
export -f s_bench
rm -f "$out/bench.json"
# Two configs (seed, large) x tinytrain fp32/bf16/fp16 + PyTorch eager fp32/bf16/fp16 +
# torch.compile, and the matmul peak: ~4 minutes. bench_gpu.py gets its own budget, 15 s
# inside the step's limit, so that it ends (and writes bench.json; it also rewrites it after
# every run) before `timeout` would kill it; rows that do not fit are reported as skipped.
left=$(( budget - (SECONDS - start) - reserve ))
bench_cap=240
bench_limit=$(( bench_cap < left ? bench_cap : left ))
bench_budget=$(( bench_limit - 15 ))
[ "$bench_budget" -lt 20 ] && bench_budget=20
# A torch.compile run gets at most 150 s (it compiles in its warm-up), any other run 60 s.
per_run=$(( bench_budget < 150 ? bench_budget : 150 ))
step bench "$bench_cap" s_bench "$per_run" "$bench_budget"

# ---- summary ----------------------------------------------------------------------------------
total=$(( SECONDS - start ))
echo "==== summary (${total}s)"
if [ -n "$SUMMARY_PY" ] && "$SUMMARY_PY" - "$out" "$total" "$BUILD" <<'PY'
import json, os, re, sys

out, total, build = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def read(name):
    try:
        with open(os.path.join(out, "steps", name + ".log"), errors="replace") as f:
            return f.read()
    except OSError:
        return ""

steps = []
with open(os.path.join(out, "steps.tsv")) as f:
    for line in f:
        name, rc, secs, status, limit, note = (line.rstrip("\n").split("\t") + [""] * 6)[:6]
        s = {"name": name, "status": status, "exit_code": int(rc) if rc not in ("", "-") else None,
             "seconds": float(secs), "limit_s": int(limit)}
        if note:
            s["note"] = note
        steps.append(s)
by = {s["name"]: s for s in steps}
summary = {"total_seconds": total, "build_dir": build, "steps": steps}

# (a)
t = read("nvidia_smi")
m = re.search(r"^name, driver_version.*\n(.+)$", t, re.M)
if m:
    keys = ["name", "driver_version", "memory_total", "compute_cap", "max_sm_clock", "power_limit"]
    gpu = dict(zip(keys, [x.strip() for x in m.group(1).split(",")]))
    by["nvidia_smi"]["numbers"] = gpu
    summary["gpu"] = gpu
m = re.search(r"release ([0-9.]+), (V[0-9.]+)", read("nvcc"))
if m and "nvcc" in by:
    by["nvcc"]["numbers"] = {"release": m.group(1), "version": m.group(2)}
t = read("python_torch")
m = re.search(r"^torch (\S+) \| cuda (\S+) \| cudnn (\S+) \| cuda available (\S+) \| device (.*)$", t, re.M)
if m and "python_torch" in by:
    by["python_torch"]["numbers"] = {
        "torch": m.group(1), "cuda": m.group(2), "cudnn": m.group(3),
        "cuda_available": m.group(4) == "True", "device": m.group(5),
        "torch_compile": "torch.compile True" in t,
        "wheel_libs": re.findall(r"^wheel lib: (\S+)", t, re.M)}

# (b)
t = read("binary")
if "binary" in by:
    nums = {}
    for key, pat in (("sm_90_cubins", r"^sm_90 cubins: (\d+)"), ("compute_90_ptx", r"^compute_90 ptx: (\d+)")):
        m = re.search(pat, t, re.M)
        if m:
            nums[key] = int(m.group(1))
    nums["unresolved_libraries"] = re.findall(r"^\s*(\S+) => not found", t, re.M)
    libs = {}
    for lib in ("libopenblas", "libgfortran", "libcudart", "libcublasLt", "libcudnn", "libnccl", "libgomp"):
        m = re.search(r"^\s*(" + lib + r"\S*) => (\S+)", t, re.M)
        if m:
            libs[m.group(1)] = m.group(2)
    nums["libraries"] = libs
    by["binary"]["numbers"] = nums
if "build" in by and by["build"]["status"] != "skipped":
    t = read("build")
    warn = len(re.findall(r"warning", t, re.I))
    by["build"]["numbers"] = {"warning_lines": warn}

# (c) ctest: result lines `12/282 Test  #7: Name ....   Passed    0.33 sec` (or ***Skipped,
# ***Failed, ***Timeout, ***Exception: SegFault, ***Not Run); the last status word before the
# time is the status, whatever the name holds.
CTEST_RESULT = re.compile(r"^\s*\d+/\d+ Test\s+#\d+: (\S+)(?: .*)?[ .](?:\*\*\*)?"
                          r"(Passed|Failed|Skipped|Timeout|Exception|Not Run|Disabled)\b[^\n]*?\s[0-9.]+ sec\s*$", re.M)
t = read("ctest")
res = {}
for m in CTEST_RESULT.finditer(t):
    res[m.group(1)] = m.group(2)
if "ctest" in by:
    passed = sorted(n for n, r in res.items() if r == "Passed")
    skipped = sorted(n for n, r in res.items() if r == "Skipped")
    failed = sorted(n for n, r in res.items() if r not in ("Passed", "Skipped"))
    cuda = {n: r for n, r in res.items() if "cuda" in n.lower() or "cudnn" in n.lower()}
    m = re.search(r"(\d+)% tests passed, (\d+) tests failed out of (\d+)", t)
    planned = re.search(r"^\s*\d+/(\d+) Test\s+#", t, re.M)
    c = {"passed": len(passed), "failed": len(failed), "skipped": len(skipped),
         "ran": len(res),
         "total": int(m.group(3)) if m else int(planned.group(1)) if planned else None,
         "finished": m is not None,
         "failed_names": [f"{n} ({res[n]})" for n in failed],
         "skipped_names": skipped[:50],
         "cuda_tests": {"total": len(cuda),
                        "passed": sum(r == "Passed" for r in cuda.values()),
                        "skipped": sum(r == "Skipped" for r in cuda.values()),
                        "failed": sum(r not in ("Passed", "Skipped") for r in cuda.values())}}
    by["ctest"]["numbers"] = c
    summary["ctest"] = c

# (d) verify rows: `name   max_err  1.490e-08  tol  2.000e-06  ok|FAIL...`
verify = {}
for s in steps:
    if not s["name"].startswith("verify_cuda."):
        continue
    t = read(s["name"])
    rows = []
    for m in re.finditer(r"^(\S+)\s+max_err\s+(\S+)\s+tol\s+(\S+)\s+(\S+)", t, re.M):
        try:
            err, tol = float(m.group(2)), float(m.group(3))
        except ValueError:
            continue
        rows.append({"row": m.group(1), "max_err": err, "tol": tol, "ok": m.group(4) == "ok",
                     "err_over_tol": err / tol if tol > 0 else float("inf")})
    m = re.search(r"^verify: (\d+) rows, (\d+) failed \((\w+)\)", t, re.M)
    v = {"pass": s["status"] == "pass" and bool(m) and m.group(3) == "PASS",
         "rows": len(rows), "failed_rows": [r["row"] for r in rows if not r["ok"]][:20]}
    if rows:
        v["worst"] = max(rows, key=lambda r: r["err_over_tol"])
    m = re.search(r"^attention: (.*)$", t, re.M)
    if m:
        v["attention"] = m.group(1)
    if not rows:
        v["error"] = "\n".join(t.strip().splitlines()[-3:])
    s["numbers"] = v
    verify[s["name"][len("verify_cuda."):]] = v
m = re.search(r"^reference seed: (\d+)", read("make_reference"), re.M)
if m and "make_reference" in by:
    by["make_reference"]["numbers"] = {"seed": int(m.group(1))}
    if "full_size_gelu" in verify:
        verify["full_size_gelu"]["reference_seed"] = int(m.group(1))
summary["verify"] = verify

# (e)
try:
    with open(os.path.join(out, "bench.json")) as f:
        bench = json.load(f)
    summary["bench"] = bench
    if "bench" in by:
        by["bench"]["numbers"] = {k: {"ms_per_step": e.get("ms_per_step"),
                                      "tokens_per_s": e.get("tokens_per_s"),
                                      "vs_pytorch_eager": e.get("vs_pytorch_eager"),
                                      "vs_torch_compile": e.get("vs_torch_compile"),
                                      "ok": e.get("ok")}
                                  for k, e in bench.get("engines", {}).items()}
except (OSError, ValueError):
    summary["bench"] = None

# (f) NCCL: the tests' results, and nccl_busbw's table (`bytes time_us algbw_GB/s busbw_GB/s`)
# with its closing `busbw at <bytes> bytes: <GB/s> GB/s`
if "nccl_ctest" in by:
    nres = {m.group(1): m.group(2) for m in CTEST_RESULT.finditer(read("nccl_ctest"))}
    by["nccl_ctest"]["numbers"] = {
        "passed": sum(r == "Passed" for r in nres.values()),
        "skipped": sum(r == "Skipped" for r in nres.values()),
        "failed_names": sorted(f"{n} ({r})" for n, r in nres.items() if r not in ("Passed", "Skipped"))}
t = read("nccl_busbw")
if "nccl_busbw" in by:
    rows = [{"bytes": int(m.group(1)), "time_us": float(m.group(2)), "algbw_gbs": float(m.group(3)),
             "busbw_gbs": float(m.group(4))}
            for m in re.finditer(r"^\s*(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s*$", t, re.M)]
    nums = {"rows": rows}
    m = re.search(r"^nccl_busbw: (\d+) rank\(s\), (.*); NCCL ([0-9.]+);", t, re.M)
    if m:
        nums.update({"ranks": int(m.group(1)), "launch": m.group(2), "nccl_version": m.group(3)})
    m = re.search(r"^busbw at (\d+) bytes: ([0-9.]+) GB/s", t, re.M)
    if m:
        nums.update({"largest_bytes": int(m.group(1)), "busbw_gbs": float(m.group(2))})
    by["nccl_busbw"]["numbers"] = nums
    summary["nccl"] = {k: nums.get(k) for k in ("ranks", "launch", "nccl_version", "largest_bytes", "busbw_gbs")}
# (g) `bucket1: 2 ranks, worst loss difference 1.2e-06 over 10 steps` and
# `seed, 2 ranks, overlap (--bucket-mb 1): done: 100 steps | ... | 1.23 ms/step | 2 ranks`
t = read("train_ranks")
if "train_ranks" in by:
    nums = {"worst_loss_difference": {m.group(1): float(m.group(2)) for m in
                                      re.finditer(r"^(\w+): \d+ ranks, worst loss difference (\S+)", t, re.M)},
            "ms_per_step": {m.group(1): float(m.group(2)) for m in
                            re.finditer(r"^seed, ([^:]+): done: .*?\| ([0-9.]+) ms/step", t, re.M)}}
    by["train_ranks"]["numbers"] = nums
    summary["data_parallel"] = nums

problems = [f"{s['name']}: {s['status']}" for s in steps
            if s["status"] not in ("pass",) and not s.get("note", "").startswith("GPU_CHECK_SKIP_BUILD")]
ct = summary.get("ctest")
if ct and ct["cuda_tests"]["skipped"]:
    problems.append(f"ctest: {ct['cuda_tests']['skipped']} CUDA tests skipped")
if ct and not ct["cuda_tests"]["total"]:
    problems.append("ctest: no CUDA tests ran")
summary["ok"] = not problems
summary["problems"] = problems
summary["exit_code"] = 0 if not problems else 1
with open(os.path.join(out, "summary.json.tmp"), "w") as f:
    json.dump(summary, f, indent=2)
    f.write("\n")
os.replace(os.path.join(out, "summary.json.tmp"), os.path.join(out, "summary.json"))

# The console version.
for s in steps:
    extra = ""
    n = s.get("numbers") or {}
    if s["name"] == "ctest" and n:
        extra = (f"passed {n['passed']} failed {n['failed']} skipped {n['skipped']} of "
                 f"{n['total']}; CUDA tests {n['cuda_tests']}; failures {n['failed_names'][:10]}")
    elif s["name"].startswith("verify_cuda.") and n.get("worst"):
        w = n["worst"]
        extra = f"{n['rows']} rows, worst {w['row']} {w['max_err']:.3e} / tol {w['tol']:.3e}"
    elif s["name"] == "bench" and n:
        extra = "; ".join(f"{k} {v['ms_per_step']} ms" if v["ok"] else f"{k} failed" for k, v in n.items())
    elif s["name"] == "nccl_ctest" and n:
        extra = f"passed {n['passed']} skipped {n['skipped']} failures {n['failed_names'][:5]}"
    elif s["name"] == "nccl_busbw" and n.get("busbw_gbs") is not None:
        extra = f"busbw {n['busbw_gbs']} GB/s at {n['largest_bytes']} bytes ({n.get('launch')})"
    elif s["name"] == "binary" and n:
        extra = f"sm_90 cubins {n.get('sm_90_cubins')}, ptx {n.get('compute_90_ptx')}, unresolved {n['unresolved_libraries']}"
    print(f"{s['name']:<40} {s['status']:<8} {s['seconds']:7.1f}s  {extra}")
print("OK" if not problems else "PROBLEMS: " + "; ".join(problems))
sys.exit(summary["exit_code"])
PY
then
  rc=0
else
  rc=$?
  if [ ! -s "$out/summary.json" ] || [ "$rc" -ne 1 ]; then
    # No python, or the summariser broke: the bare step table as JSON, from bash.
    {
      echo '{"ok": false, "summary_error": "python summary failed (exit '"$rc"')", "total_seconds": '"$total"', "steps": ['
      first=1
      while IFS=$'\t' read -r name code secs status limit _note; do
        [ $first -eq 1 ] || echo ','
        first=0
        [ "$code" = "-" ] && code=null
        printf '  {"name": "%s", "status": "%s", "exit_code": %s, "seconds": %s, "limit_s": %s}' \
          "$name" "$status" "${code:-null}" "$secs" "${limit:-0}"
      done < "$steps_tsv"
      echo ']}'
    } > "$out/summary.json"
    rc=1
  fi
fi
echo "gpu_check: wrote $out/summary.json, exit $rc"
exit $rc
