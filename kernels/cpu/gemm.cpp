// gemm_f32 and gemm_libraries (kernels/cpu/gemm.h): oneDNN's sgemm, OpenBLAS's for A^T on AVX2.
#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <stdexcept>

#include "kernels/cpu/cpu_simd.h"

#ifdef TINYTRAIN_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

namespace tt {
namespace {

// The widest vectors OpenBLAS's kernels for a core use (its DYNAMIC_ARCH core names).
std::string openblas_isa(const std::string& core) {
  for (const char* name : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (core == name) return "avx512";
  for (const char* name : {"Haswell", "Zen"})
    if (core == name) return "avx2";
  if (core == "Sandybridge") return "avx";
  return "unknown";
}

#ifdef TINYTRAIN_HAVE_ONEDNN
// Caps oneDNN at the loops' width, once, before its first product (a later cap is refused).
// Uncapped, oneDNN takes the CPU's widest (or what ONEDNN_MAX_CPU_ISA allows).
void cap_onednn_once() {
  static const bool capped = [] {
    const CpuSimd simd = best_cpu_simd();
    if (simd == detected_cpu_simd()) return false;
    const dnnl_cpu_isa_t isa = simd == CpuSimd::Avx2 ? dnnl_cpu_isa_avx2 : dnnl_cpu_isa_sse41;
    if (dnnl_set_max_cpu_isa(isa) != dnnl_success)
      throw std::runtime_error("oneDNN refused the instruction-set cap TINYTRAIN_CPU_SIMD asks for");
    return true;
  }();
  (void)capped;
}

// oneDNN 2.6's AVX2 sgemm takes about twice OpenBLAS's time when A is transposed (the weight
// gradient; docs/benchmarks.md); its AVX-512 one is the fastest in every form.
bool onednn_computes(bool transpose_a) { return !transpose_a || best_cpu_simd() == CpuSimd::Avx512; }

std::string onednn_isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}
#endif

}  // namespace

void gemm_f32(bool transpose_a, bool transpose_b, int M, int N, int K, const float* A, int lda, const float* B,
              int ldb, float beta, float* C, int ldc) {
#ifdef TINYTRAIN_HAVE_ONEDNN
  if (onednn_computes(transpose_a)) {
    cap_onednn_once();
    const dnnl_status_t status = dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', M, N, K, 1.0f, A, lda,
                                            B, ldb, beta, C, ldc);
    if (status != dnnl_success) throw std::runtime_error("oneDNN's sgemm failed (status " + std::to_string(status) + ")");
    return;
  }
#endif
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans, M, N,
              K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

std::vector<GemmLibrary> gemm_libraries() {
  const std::string core = openblas_get_corename();
  const std::string config = openblas_get_config();  // "OpenBLAS 0.3.21 NO_LAPACKE ...": name and version
  const std::string openblas = config.substr(0, config.find(' ', config.find(' ') + 1));
#ifdef TINYTRAIN_HAVE_ONEDNN
  cap_onednn_once();
  const dnnl_version_t* v = dnnl_version();
  const std::string name = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                           std::to_string(v->patch);
  const std::string kernels = onednn_isa_name(dnnl_get_effective_cpu_isa());
  const std::string isa = kernels.rfind("avx512", 0) == 0 ? "avx512" : kernels.rfind("avx2", 0) == 0 ? "avx2" : kernels;
  if (onednn_computes(true)) return {{name, kernels, isa, "all"}};
  return {{name, kernels, isa, "out = x W^T and dx = d W"}, {openblas, core, openblas_isa(core), "dW = d^T x"}};
#else
  return {{openblas, core, openblas_isa(core), "all"}};
#endif
}

}  // namespace tt
