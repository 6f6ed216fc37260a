// detected_cpu_simd, best_cpu_simd (kernels/cpu/cpu_simd.h): asked of the CPU and the
// environment once.
#include "kernels/cpu/cpu_simd.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "base/input_error.h"

namespace tt {
namespace {

CpuSimd cap_from_environment() {
  const char* value = std::getenv("TINYTRAIN_CPU_SIMD");
  if (!value || !*value) return CpuSimd::Avx512;
  for (CpuSimd simd : {CpuSimd::Scalar, CpuSimd::Avx2, CpuSimd::Avx512})
    if (cpu_simd_name(simd) == std::string(value)) return simd;
  throw InputError(std::string("TINYTRAIN_CPU_SIMD must be scalar, avx2 or avx512, got '") + value + "'");
}

}  // namespace

CpuSimd detected_cpu_simd() {
#if defined(__AVX2__)
  static const CpuSimd detected = __builtin_cpu_supports("avx512f") ? CpuSimd::Avx512 : CpuSimd::Avx2;
  return detected;
#else
  return CpuSimd::Scalar;
#endif
}

CpuSimd best_cpu_simd() {
  static const CpuSimd best = std::min(detected_cpu_simd(), cap_from_environment());
  return best;
}

const char* cpu_simd_name(CpuSimd simd) {
  switch (simd) {
    case CpuSimd::Scalar: return "scalar";
    case CpuSimd::Avx2: return "avx2";
    case CpuSimd::Avx512: return "avx512";
  }
  return "?";
}

}  // namespace tt
