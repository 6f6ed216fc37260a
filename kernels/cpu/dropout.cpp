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
  for_each_mask_block(n, dropout, simd_, [=](int64_t start, int64_t count, const float* factor) {
    for (int64_t i = 0; i < count; ++i) y[start + i] = x[start + i] * factor[i];
  });
}

// dout (n) -> dinp (n), may alias: the same mask and scale as the forward
void CpuBackend::dropout_backward(Tensor dinp, Tensor dout, const DropoutMask& dropout) {
  dropout_forward(dinp, dout, dropout);
}

}  // namespace tt
