// SwiGLU forward and backward (CPU), with the FFN's dropout folded in: inp (N,2F) holds
// [gate | up] per row, out (N,F) = dropout(silu(gate) up) (kernels/common/swiglu.h for the math
// and its order). One pass over the elements; with bf16/fp16 storage each output is rounded
// once, as the CUDA kernel rounds it.
#include <stdexcept>
#include <string>

#include "kernels/common/swiglu.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dropout_mask.h"
#include "kernels/cpu/storage.h"

namespace tt {

namespace {

// Calls element(e, factor) for every element e of the (N,F) output with its dropout factor
// (1 when p is 0, without drawing a mask); threads over blocks of elements.
template <typename Element>
void for_each_output(int64_t n, const DropoutMask& dropout, CpuSimd simd, Element element) {
  if (dropout.p == 0.0f) {
#pragma omp parallel for
    for (int64_t e = 0; e < n; ++e) element(e, 1.0f);
    return;
  }
  for_each_mask_block(n, dropout, simd, [&](int64_t start, int64_t count, const float* factor) {
    for (int64_t i = 0; i < count; ++i) element(start + i, factor[i]);
  });
}

}  // namespace

// inp (N,2F) [gate | up] -> out (N,F) = dropout(silu(gate) up)
void CpuBackend::swiglu_forward(Tensor out, Tensor inp, const DropoutMask& dropout) {
  const int64_t F = check_swiglu_views("swiglu_forward", out, inp);
  Fp32Scope fp32({&out, &inp});  // bf16/fp16 storage: see storage.h
  const float* x = inp.f32();
  float* y = out.f32();
  for_each_output(out.numel(), dropout, simd_, [=](int64_t e, float factor) {
    const int64_t row = e / F, i = e - row * F;
    const float gate = x[2 * F * row + i], up = x[2 * F * row + F + i];
    y[e] = silu(gate) * up * factor;
  });
}

// dout (N,F), inp (N,2F) -> dinp (N,2F) [dgate | dup]; dinp may alias inp (each gate and up
// pair is read before its gradients are written over it)
void CpuBackend::swiglu_backward(Tensor dinp, Tensor dout, Tensor inp, const DropoutMask& dropout) {
  const int64_t F = check_swiglu_views("swiglu_backward", dout, inp);
  if (dinp.shape != inp.shape)
    throw std::invalid_argument("swiglu_backward: dinp " + dinp.shape.str() + " is not the input's " +
                                inp.shape.str());
  Fp32Scope fp32({&dinp, &dout, &inp});  // bf16/fp16 storage: see storage.h (aliases share a copy)
  const float* x = inp.f32();
  const float* dy = dout.f32();
  float* dx = dinp.f32();
  for_each_output(dout.numel(), dropout, simd_, [=](int64_t e, float factor) {
    const int64_t row = e / F, i = e - row * F;
    const float gate = x[2 * F * row + i], up = x[2 * F * row + F + i];
    const float d = dy[e] * factor;
    dx[2 * F * row + i] = d * up * silu_grad(gate);
    dx[2 * F * row + F + i] = d * silu(gate);
  });
}

}  // namespace tt
