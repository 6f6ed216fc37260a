// Inverted dropout with Philox masks, forward and backward (CPU). The mask is never stored:
// both directions recompute it from (seed, step, layer, site, index).
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"
#include "kernels/cpu/dropout_mask.h"

namespace tt {

// inp (n) -> out (n), may alias; identity when p == 0
void CpuBackend::dropout_forward(Tensor out, Tensor inp, const DropoutMask& dropout) {
  Fp32Scope fp32({&out, &inp});  // bf16/fp16 storage: see storage.h
  const int64_t n = inp.numel();
  const float p = dropout.p;
  const float* x = inp.f32();
  float* y = out.f32();
  if (p == 0.0f) {
    if (y != x)
      for (int64_t i = 0; i < n; ++i) y[i] = x[i];
    return;
  }
  const int64_t block = 256;  // elements per task; a multiple of 4 so Philox groups stay whole
#pragma omp parallel for
  for (int64_t start = 0; start < n; start += block) {
    float scale[block];
    const int64_t count = start + block <= n ? block : n - start;
    dropout_scales(dropout.key(), dropout.index_offset + static_cast<uint64_t>(start), count, p, scale, simd_);
    for (int64_t i = 0; i < count; ++i) y[start + i] = x[start + i] * scale[i];
  }
}

// dout (n) -> dinp (n), may alias: the same mask and scale as the forward
void CpuBackend::dropout_backward(Tensor dinp, Tensor dout, const DropoutMask& dropout) {
  dropout_forward(dinp, dout, dropout);
}

}  // namespace tt
