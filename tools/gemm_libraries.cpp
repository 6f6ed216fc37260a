// Times one CPU GEMM library on the GEMMs a training step makes (tools/bench_gemm_libs.py builds
// this file once per library and runs it; docs/benchmarks.md has the table).
//
// The CPU backend's linear op (kernels/cpu/linear.cpp) makes three products, all row-major:
//   forward  out[N,O]     = inp[N,I] . W[O,I]^T   (+ the bias already in out: beta 1)
//   dinp     dinp[N,I]    = d[N,O] . W[O,I]
//   dweight  dW[O,I]      = d[N,O]^T . inp[N,I]
// Each library is built in by the macro GEMM_LIB_<NAME>, which defines gemm_row_major(),
// set_threads() and kernels_in_use(). The instruction set a library uses is chosen by its own
// environment variable (the driver sets it); kernels_in_use() reports what it then chose.
//
// Usage: gemm_libraries_<lib> THREADS N,O,I [N,O,I ...]
// Prints one line per shape and form: `form N O I ms GFLOP/s`, after a line `kernels <what>`.
// Every result is first checked against a double-precision sum on sampled outputs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#if defined(GEMM_LIB_OPENBLAS) || defined(GEMM_LIB_BLIS)
#include <cblas.h>
#endif
#if defined(GEMM_LIB_BLIS)
#include <blis.h>
#endif
#if defined(GEMM_LIB_ONEDNN)
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#endif
#if defined(GEMM_LIB_LIBXSMM)
#include <libxsmm.h>
#include <omp.h>
#endif

namespace {

// C[M,Nc] = op(A) op(B) + beta C, row-major; op transposes when ta / tb.
void gemm_row_major(bool ta, bool tb, int M, int Nc, int K, const float* A, int lda, const float* B, int ldb,
                    float beta, float* C, int ldc) {
#if defined(GEMM_LIB_OPENBLAS) || defined(GEMM_LIB_BLIS)
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, Nc, K, 1.0f, A, lda,
              B, ldb, beta, C, ldc);
#elif defined(GEMM_LIB_ONEDNN)
  if (dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, Nc, K, 1.0f, A, lda, B, ldb, beta, C, ldc) != dnnl_success) {
    std::fprintf(stderr, "gemm_libraries: dnnl_sgemm failed\n");
    std::exit(1);
  }
#elif defined(GEMM_LIB_LIBXSMM)
  // Column-major: the row-major C = op(A) op(B) is C^T = op(B)^T op(A)^T, so B comes first.
  const char transb = tb ? 'T' : 'N', transa = ta ? 'T' : 'N';
  const libxsmm_blasint m = Nc, n = M, k = K, ldb_ = ldb, lda_ = lda, ldc_ = ldc;
  const float alpha = 1.0f;
  libxsmm_sgemm_omp(&transb, &transa, &m, &n, &k, &alpha, B, &ldb_, A, &lda_, &beta, C, &ldc_);
#else
#error "define one of GEMM_LIB_OPENBLAS, GEMM_LIB_BLIS, GEMM_LIB_ONEDNN, GEMM_LIB_LIBXSMM"
#endif
}

void set_threads(int n) {
#if defined(GEMM_LIB_OPENBLAS)
  openblas_set_num_threads(n);
#elif defined(GEMM_LIB_BLIS)
  bli_thread_set_num_threads(n);
#else
  omp_set_num_threads(n);
#endif
}

std::string kernels_in_use() {
#if defined(GEMM_LIB_OPENBLAS)
  return std::string("OpenBLAS ") + openblas_get_corename();
#elif defined(GEMM_LIB_BLIS)
  return std::string("BLIS ") + bli_info_get_version_str() + " " + bli_arch_string(bli_arch_query_id());
#elif defined(GEMM_LIB_ONEDNN)
  const dnnl_version_t* v = dnnl_version();
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  const char* name = isa == dnnl_cpu_isa_avx2 ? "avx2"
                     : isa == dnnl_cpu_isa_avx512_core ? "avx512_core"
                     : isa == dnnl_cpu_isa_avx512_core_vnni ? "avx512_core_vnni"
                     : isa == dnnl_cpu_isa_avx512_core_bf16 ? "avx512_core_bf16"
                     : isa == dnnl_cpu_isa_avx512_core_amx ? "avx512_core_amx"
                     : "other";
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
         " " + name;
#else
  libxsmm_init();
  return std::string("libxsmm ") + LIBXSMM_VERSION + " " + libxsmm_get_target_arch();
#endif
}

struct Form {
  const char* name;
  bool ta, tb;
  float beta;
};

// The three products of linear.cpp for a linear layer of O outputs and I inputs over N tokens.
struct Problem {
  int M, Nc, K, lda, ldb, ldc;
};
Problem problem(const Form& f, int N, int O, int I) {
  if (!f.ta && f.tb) return {N, O, I, I, I, O};   // forward: inp[N,I] . W[O,I]^T
  if (!f.ta && !f.tb) return {N, I, O, O, I, I};  // dinp: d[N,O] . W[O,I]
  return {O, I, N, O, I, I};                      // dweight: d[N,O]^T . inp[N,I]
}

// The result must match a double-precision sum: fp32 products summed over K terms in float
// drift by at most about K * 2^-24 of the sum of |terms| (a bound, not a fit); 4x that is allowed.
void check(const Form& f, const Problem& p, const std::vector<float>& A, const std::vector<float>& B,
           const std::vector<float>& C0, const std::vector<float>& C) {
  std::mt19937 rng(7);
  for (int s = 0; s < 64; ++s) {
    const int i = static_cast<int>(rng() % p.M), j = static_cast<int>(rng() % p.Nc);
    double sum = f.beta * C0[static_cast<size_t>(i) * p.ldc + j], mag = std::fabs(sum);
    for (int k = 0; k < p.K; ++k) {
      const double a = f.ta ? A[static_cast<size_t>(k) * p.lda + i] : A[static_cast<size_t>(i) * p.lda + k];
      const double b = f.tb ? B[static_cast<size_t>(j) * p.ldb + k] : B[static_cast<size_t>(k) * p.ldb + j];
      sum += a * b;
      mag += std::fabs(a * b);
    }
    const double got = C[static_cast<size_t>(i) * p.ldc + j];
    if (std::fabs(got - sum) > 4.0 * p.K * std::ldexp(1.0, -24) * mag + 1e-30) {
      std::fprintf(stderr, "gemm_libraries: %s %dx%dx%d: C[%d,%d] = %.9g, a double sum gives %.9g\n", f.name, p.M,
                   p.Nc, p.K, i, j, got, sum);
      std::exit(1);
    }
  }
}

// Median milliseconds per call over at least 10 calls and 0.2 s, after 3 warm-up calls.
double time_ms(const Form& f, const Problem& p, const std::vector<float>& A, const std::vector<float>& B,
               std::vector<float>& C) {
  using clock = std::chrono::steady_clock;
  for (int w = 0; w < 3; ++w)
    gemm_row_major(f.ta, f.tb, p.M, p.Nc, p.K, A.data(), p.lda, B.data(), p.ldb, f.beta, C.data(), p.ldc);
  std::vector<double> ms;
  const auto start = clock::now();
  while (ms.size() < 10 || std::chrono::duration<double>(clock::now() - start).count() < 0.2) {
    const auto t0 = clock::now();
    gemm_row_major(f.ta, f.tb, p.M, p.Nc, p.K, A.data(), p.lda, B.data(), p.ldb, f.beta, C.data(), p.ldc);
    ms.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s THREADS N,O,I [N,O,I ...]\n", argv[0]);
    return 2;
  }
  const int threads = std::atoi(argv[1]);
  if (threads < 1) {
    std::fprintf(stderr, "gemm_libraries: THREADS must be >= 1, got '%s'\n", argv[1]);
    return 2;
  }
  set_threads(threads);
  std::printf("kernels %s\n", kernels_in_use().c_str());
  const Form forms[] = {{"forward", false, true, 1.0f}, {"dinp", false, false, 0.0f}, {"dweight", true, false, 0.0f}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int a = 2; a < argc; ++a) {
    int N = 0, O = 0, I = 0;
    if (std::sscanf(argv[a], "%d,%d,%d", &N, &O, &I) != 3 || N < 1 || O < 1 || I < 1) {
      std::fprintf(stderr, "gemm_libraries: a shape is N,O,I with each >= 1, got '%s'\n", argv[a]);
      return 2;
    }
    for (const Form& f : forms) {
      const Problem p = problem(f, N, O, I);
      const size_t a_rows = f.ta ? p.K : p.M, b_rows = f.tb ? p.Nc : p.K;
      std::vector<float> A(a_rows * p.lda), B(b_rows * p.ldb), C0(static_cast<size_t>(p.M) * p.ldc);
      for (float& x : A) x = uniform(rng);
      for (float& x : B) x = uniform(rng);
      for (float& x : C0) x = uniform(rng);
      std::vector<float> C = C0;
      gemm_row_major(f.ta, f.tb, p.M, p.Nc, p.K, A.data(), p.lda, B.data(), p.ldb, f.beta, C.data(), p.ldc);
      check(f, p, A, B, C0, C);
      const double ms = time_ms(f, p, A, B, C);
      std::printf("%s %d %d %d %.4f %.2f\n", f.name, N, O, I, ms, 2.0 * p.M * p.Nc * p.K / (ms * 1e6));
    }
  }
  return 0;
}
