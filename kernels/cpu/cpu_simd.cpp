// best_cpu_simd (kernels/cpu/cpu_simd.h): asked of the CPU once.
#include "kernels/cpu/cpu_simd.h"

namespace tt {

CpuSimd best_cpu_simd() {
#if defined(__AVX2__)
  static const CpuSimd best = __builtin_cpu_supports("avx512f") ? CpuSimd::Avx512 : CpuSimd::Avx2;
  return best;
#else
  return CpuSimd::Scalar;
#endif
}

}  // namespace tt
