// The one place the CPU backend multiplies matrices: C = op(A) op(B) + beta C, row-major fp32.
//
// Which library, chosen by measurement (tools/bench_gemm_libs.py; the table and the reasons are
// in docs/benchmarks.md, "Which GEMM library"): oneDNN's sgemm where the build has it, except
// the form whose A is transposed (the weight gradient, d^T x) when the widest vectors in use
// are AVX2: oneDNN 2.6's AVX2 kernels take about twice OpenBLAS's time there, so OpenBLAS does
// it. Without oneDNN (a build that did not find libdnnl-dev) OpenBLAS does everything.
//
// The instruction sets: oneDNN is capped with the loops (TINYTRAIN_CPU_SIMD, cpu_simd.h) from
// within, before its first call. OpenBLAS chooses its kernels when it is loaded, before main,
// so it can only be capped from outside: OPENBLAS_CORETYPE=Haswell (doctor says so when the
// two disagree; tools/bench_cpu.py --isa avx2 sets it).
#pragma once
#include <string>
#include <vector>

namespace tt {

// C (M, N) = op(A) op(B) + beta C with op(A) (M, K) and op(B) (K, N); op transposes when
// transpose_a / transpose_b. Row-major with leading dimensions lda, ldb, ldc. On the OpenMP
// threads in use (omp_set_num_threads; OpenBLAS's own count: engine/backend_select.cpp).
void gemm_f32(bool transpose_a, bool transpose_b, int M, int N, int K, const float* A, int lda, const float* B,
              int ldb, float beta, float* C, int ldc);

// A library gemm_f32 uses, and for which products: what doctor and tools/bench_cpu.py report.
struct GemmLibrary {
  std::string name;     // "oneDNN 2.6.3", "OpenBLAS 0.3.21 ..."
  std::string kernels;  // the kernels it chose on this CPU: "avx2", "avx512_core_bf16", "Haswell", "SkylakeX"
  std::string isa;      // the widest vectors those kernels use: "avx2", "avx512", "avx", "sse", or "unknown"
  std::string products; // which of gemm_f32's products it computes
};
std::vector<GemmLibrary> gemm_libraries();

}  // namespace tt
