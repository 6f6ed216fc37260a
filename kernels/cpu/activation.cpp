// ReLU and exact GELU, forward and backward (CPU), alone and with the FFN's dropout folded in.
// SwiGLU runs as one op of its own (swiglu.cpp).
#include "kernels/common/gelu.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dropout_mask.h"
#include "kernels/cpu/storage.h"

namespace tt {

namespace {

// One element, forward: act(x); backward: the gradient d of act(x) taken back to x.
float relu(float x) { return x > 0.0f ? x : 0.0f; }
float relu_grad(float x, float d) { return x > 0.0f ? d : 0.0f; }
float gelu_grad_times(float x, float d) { return d * gelu_grad(x); }

// y[i] = f(i) for i < n, threads over blocks
template <typename Element>
void for_each_element(int64_t n, float* y, Element f) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) y[i] = f(i);
}

// y = act(x) * factor, element by element
template <typename Act>
void activation_dropout(int64_t n, const DropoutMask& dropout, CpuSimd simd, const float* x, float* y, Act act) {
  for_each_mask_block(n, dropout, simd, [=](int64_t start, int64_t count, const float* factor) {
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) y[start + i] = act(x[start + i]) * factor[i];
  });
}

// dx = act_grad(x, d * factor): the dropout's gradient first, as the two ops take it. (In two
// loops, so the select in ReLU's gradient picks between stored values and vectorises; a multiply
// inside the select's branch would stay a branch, as it might trap.)
template <typename ActGrad>
void activation_dropout_grad(int64_t n, const DropoutMask& dropout, CpuSimd simd, const float* x, const float* d,
                             float* dx, ActGrad act_grad) {
  for_each_mask_block(n, dropout, simd, [=](int64_t start, int64_t count, float* factor) {
    for (int64_t i = 0; i < count; ++i) factor[i] = d[start + i] * factor[i];
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) dx[start + i] = act_grad(x[start + i], factor[i]);
  });
}

}  // namespace

// inp (n) -> out (n)
void CpuBackend::activation_forward(Tensor out, Tensor inp, Activation act) {
  if (act == Activation::Swiglu) return swiglu_forward(out, inp, kNoDropout);
  Fp32Scope fp32({&out, &inp});  // bf16/fp16 storage: see storage.h
  const float* x = inp.f32();
  if (act == Activation::Relu)
    for_each_element(inp.numel(), out.f32(), [=](int64_t i) { return relu(x[i]); });
  else
    for_each_element(inp.numel(), out.f32(), [=](int64_t i) { return gelu(x[i]); });
}

// dout (n), inp (n) the pre-activation -> dinp (n), may alias dout
void CpuBackend::activation_backward(Tensor dinp, Tensor dout, Tensor inp, Activation act) {
  if (act == Activation::Swiglu) return swiglu_backward(dinp, dout, inp, kNoDropout);
  Fp32Scope fp32({&dinp, &dout, &inp});  // bf16/fp16 storage: see storage.h
  const float* x = inp.f32();
  const float* d = dout.f32();
  if (act == Activation::Relu)
    for_each_element(inp.numel(), dinp.f32(), [=](int64_t i) { return relu_grad(x[i], d[i]); });
  else
    for_each_element(inp.numel(), dinp.f32(), [=](int64_t i) { return gelu_grad_times(x[i], d[i]); });
}

// The fused FFN ops: one pass over memory instead of two (on the seed workload the hidden layer
// is 8 MB a layer, far more than the caches hold, so the second pass read it back from memory).
// Each element is computed as the two ops compute it: act(x) times the dropout factor, and the
// gradient times the factor, then through act. With bf16/fp16 storage the two ops round to the
// storage type between them, so there the two ops run.
void CpuBackend::activation_dropout_forward(Tensor out, Tensor inp, Activation act, const DropoutMask& dropout) {
  if (act == Activation::Swiglu) return swiglu_forward(out, inp, dropout);
  if (dropout.p == 0.0f || out.dtype != DType::F32 || inp.dtype != DType::F32) {
    Backend::activation_dropout_forward(out, inp, act, dropout);
    return;
  }
  if (act == Activation::Relu)
    activation_dropout(inp.numel(), dropout, simd_, inp.f32(), out.f32(), [](float v) { return relu(v); });
  else
    activation_dropout(inp.numel(), dropout, simd_, inp.f32(), out.f32(), [](float v) { return gelu(v); });
}

void CpuBackend::activation_dropout_backward(Tensor dinp, Tensor dout, Tensor inp, Activation act,
                                             const DropoutMask& dropout) {
  if (act == Activation::Swiglu) return swiglu_backward(dinp, dout, inp, dropout);
  if (dropout.p == 0.0f || dinp.dtype != DType::F32 || dout.dtype != DType::F32 || inp.dtype != DType::F32) {
    Backend::activation_dropout_backward(dinp, dout, inp, act, dropout);
    return;
  }
  if (act == Activation::Relu)
    activation_dropout_grad(inp.numel(), dropout, simd_, inp.f32(), dout.f32(), dinp.f32(),
                            [](float v, float g) { return relu_grad(v, g); });
  else
    activation_dropout_grad(inp.numel(), dropout, simd_, inp.f32(), dout.f32(), dinp.f32(),
                            [](float v, float g) { return gelu_grad_times(v, g); });
}

}  // namespace tt
