#!/usr/bin/env bash
# The CPU engine and the CUDA backend's code on the SIMT emulator, built with clang's
# AddressSanitizer and UndefinedBehaviorSanitizer (float-cast-overflow named, since GCC leaves
# it out of "undefined") in build-asan/; the real CUDA build is left out, so nothing of NVIDIA's
# libraries runs here. Device memory is host memory and every block's shared memory its own
# allocation, so an out-of-bounds access in a kernel is a report too. Any report fails its
# test (-fno-sanitize-recover). Needs scripts/setup.sh's packages (clang, libclang-rt-14-dev,
# libomp-dev). It runs what the release build's stages cannot see, memory and undefined
# behaviour, on code the release stages test for its results. In one ctest pool:
#   - the CPU suite: the GoogleTest suites, verify_cpu* on the committed references, the CLI;
#   - the emulated CUDA kernel suites (ops, cuDNN attention, KV-cache decode) in the random
#     schedule only: an out-of-bounds index does not depend on the order threads run in (a
#     race does, and the release stage runs each kernel suite in two or three orders);
#   - of the end-to-end emulated suites, the parts no other test here covers: verify_cuda_emu
#     in fp32 on each reference (the CUDA backend's host code: the arena, the step, the
#     optimizer), CudaGraphMemory (the emulator's graph capture and replay) and
#     CudaActivationPlan; the emulator's own tests;
#   - the replay of the fuzz corpus, through the libFuzzer builds of tests/fuzz/ (TINYTRAIN_FUZZ).
# Then each fuzz target fuzzes for 30 s (scripts/run_fuzz.sh, docs/hostile-input.md): a fixed
# time, so this stage cannot make CI run long; what it finds fails it.
# Left out:
#   - forward.* and reverse.*: the other schedules (above);
#   - CudaTraining.*: seed-size training on the emulator, about 13 s a step here; their kernels
#     and shapes are the op and memory tests' (which run here) at a larger size, and their
#     verify test is the in-process twin of the verify_cuda_emu* tests;
#   - CudaRecompute.*, CudaGradAccumulation.*: their CPU twins (Recompute.*,
#     GradAccumulation.*) run the same trainer code here, and their kernels the op tests;
#   - verify_cuda_emu_bf16/fp16: the 16-bit kernels run here in the op tests, the 16-bit
#     trainer paths in verify_cpu_bf16/fp16; verify_cuda_emu_<rung>_gemm*: the GEMM ladder's
#     rungs run here in the op tests' {Naive,Tiled,RegBlock,Mma}Gemm cases and test_gemm_ladder,
#     the rest of the step in verify_cuda_emu_fp32;
#   - pytorch_parity.full_size_gelu: three quarters of its time is PyTorch making the
#     reference (10 s, then verify 3 s); the engine's part, fp32 steps at the seed's sizes,
#     runs here in MixedPrecisionSeedWorkload, and verify's code in verify_cpu*;
#   - verify_catches_mistakes: most of it is PyTorch planting mistakes in references; verify's
#     code runs here in verify_cpu*;
#   - the mutants (label "mutants"): they check the suite, not the code;
#   - the tests that run no C++ of tinytrain's, only scripts, so a sanitizer has nothing to
#     instrument: gpu_check.verdict (scripts/gpu_check.sh's verdict on fake steps, 25 s),
#     bench_attention.self_test (the attention benchmark's parsing),
#     toy_lm_tools.* (the Python tools, 9 s), layering* and compare_step_losses.can_fail
#     (shell), simt_mutants.missing_file_fails and simt_mutants.apply (simt/run_mutants.py on
#     a fake build, and on simt/mutants.txt alone). They
#     run in the release tree's CPU stage, with the same result.
# At reduced size (TINYTRAIN_TEST_REDUCED, tests/reduced_size.h), each test alone on 2 cores:
#   - MixedPrecisionSeedWorkload.LossCurvesStayWithinAQuarterUTimesLossOfFp32: 10 steps of the
#     three curves instead of 50: 40 s (about 200 s at full size, measured at 100 steps: 400 s);
#   - random.CudaGraphMemory.StepWithMicroBatchesAndRecomputeReplaysWithTheEagerBits: fp16
#     only, not fp32, bf16 and fp16: 29 s (84 s);
#   - GradAccumulation.*: grad_accum 8 only, not 2, 4 and 8.
# docs/testing.md has the stage's times.
#
#   scripts/test_sanitizers.sh            build, test and fuzz
#   scripts/test_sanitizers.sh build|test|fuzz   one phase (scripts/test.sh times them apart)
set -euo pipefail
cd "$(dirname "$0")/.."
phase=${1:-all}
case "$phase" in all | build | test | fuzz) ;; *) echo "usage: scripts/test_sanitizers.sh [build|test|fuzz]" >&2; exit 2 ;; esac

if [ "$phase" = all ] || [ "$phase" = build ]; then
  # A tree that an earlier version of this script configured with GCC starts afresh: CMake's
  # own change of compiler would drop the -D options below on that run.
  if [ -f build-asan/CMakeCache.txt ] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang++$' build-asan/CMakeCache.txt; then
    rm -rf build-asan
  fi
  launcher=$(command -v ccache || true)  # as scripts/setup.sh: ccache when installed
  # OpenBLAS for every GEMM (TINYTRAIN_ONEDNN=OFF): the sanitizers see nothing inside either
  # library, the release stages test the oneDNN path, and this one keeps the path of a build
  # without oneDNN (kernels/cpu/gemm.h) compiled and tested. (With oneDNN a subset of these
  # tests, 174 of them, took 43 s against 38.)
  # Line tables, not full debug info: a report's stack still names file and line, and the
  # objects are 40% smaller (4.3 against 2.5 MB for test_loss_scaler.cpp, 7% less compile time).
  cmake -S . -B build-asan -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" \
    -DCMAKE_C_COMPILER_LAUNCHER="$launcher" -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" \
    -DTINYTRAIN_CUDA=OFF -DTINYTRAIN_SANITIZE=ON -DTINYTRAIN_FUZZ=ON -DTINYTRAIN_ONEDNN=OFF >/dev/null
  cmake --build build-asan -j "$(nproc)"
fi

if [ "$phase" = all ] || [ "$phase" = test ]; then
  cd build-asan
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export TINYTRAIN_TEST_REDUCED=1
  export OMP_WAIT_POLICY=PASSIVE  # as scripts/test.sh: OpenMP threads sleep, not spin, while they wait
  # What the header leaves out: the C++ covered otherwise, then the tests that run scripts only.
  left_out='^(forward|reverse)\.|CudaTraining|CudaRecompute|CudaGradAccumulation|verify_cuda_emu_(bf16|fp16|[a-z]+_gemm_)|^pytorch_parity\.|^verify_catches_mistakes$'
  left_out+='|^gpu_check\.verdict$|^bench_attention\.|^toy_lm_tools\.|^layering|^compare_step_losses\.can_fail$|^simt_mutants\.missing_file_fails$|^simt_mutants\.apply$'
  ctest --output-on-failure -j "$(nproc)" -LE mutants -E "$left_out"
  cd ..
fi

if [ "$phase" = all ] || [ "$phase" = fuzz ]; then
  echo "== bounded fuzzing of the readers of untrusted files (30 s per target)"
  scripts/run_fuzz.sh build-asan 30
fi
