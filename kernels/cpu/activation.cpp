// ReLU and exact GELU, forward and backward (CPU).
#include "kernels/common/gelu.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"

namespace tt {

// inp (n) -> out (n)
void CpuBackend::activation_forward(Tensor out, Tensor inp, Activation act) {
  Fp32Scope fp32({&out, &inp});  // bf16/fp16 storage: see storage.h
  const int64_t n = inp.numel();
  const float* x = inp.f32();
  float* y = out.f32();
  if (act == Activation::Relu) {
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  } else {
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) y[i] = gelu(x[i]);
  }
}

// dout (n), inp (n) the pre-activation -> dinp (n), may alias dout
void CpuBackend::activation_backward(Tensor dinp, Tensor dout, Tensor inp, Activation act) {
  Fp32Scope fp32({&dinp, &dout, &inp});  // bf16/fp16 storage: see storage.h
  const int64_t n = inp.numel();
  const float* x = inp.f32();
  const float* d = dout.f32();
  float* dx = dinp.f32();
  if (act == Activation::Relu) {
#pragma omp parallel for simd
    for (int64_t i = 0; i < n; ++i) dx[i] = x[i] > 0.0f ? d[i] : 0.0f;
  } else {
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) dx[i] = d[i] * gelu_grad(x[i]);
  }
}

}  // namespace tt
