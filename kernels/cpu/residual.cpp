// Residual add (CPU). Its backward passes the gradient unchanged to both inputs, so the
// engine simply hands the same gradient view to both branches.
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"

namespace tt {

// a (n), b (n) -> out (n) = a + b, out may alias a or b
void CpuBackend::residual_forward(Tensor out, Tensor a, Tensor b) {
  Fp32Scope fp32({&out, &a, &b});  // bf16/fp16 storage: see storage.h
  const int64_t n = out.numel();
  const float* x = a.f32();
  const float* y = b.f32();
  float* o = out.f32();
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

}  // namespace tt
