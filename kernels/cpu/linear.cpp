// Linear layer y = x W^T + b with PyTorch's weight layout (out_features, in_features),
// forward and backward, on the CPU backend's one GEMM (gemm.h).
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/storage.h"

namespace tt {

// inp (N,I), weight (O,I), bias (O) or null -> out (N,O)
void CpuBackend::linear_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  Fp32Scope fp32({&out, &inp, &weight, &bias});  // bf16/fp16 storage: see storage.h
  const int N = inp.shape[0], I = inp.shape[1], O = weight.shape[0];
  float* o = out.f32();
  float beta = 0.0f;
  if (bias.data) {
    // Start from the bias broadcast over rows, then let sgemm add x W^T on top (beta = 1).
    const float* b = bias.f32();
#pragma omp parallel for
    for (int n = 0; n < N; ++n)
      for (int j = 0; j < O; ++j) o[static_cast<int64_t>(n) * O + j] = b[j];
    beta = 1.0f;
  }
  gemm_f32(false, true, N, O, I, inp.f32(), I, weight.f32(), I, beta, o, O);
}

// dout (N,O) -> dinp (N,I) = dout W (skipped when null; InputGrad::Add: added to dinp),
// dweight (O,I) = dout^T inp, dbias (O) = column sums of dout (written or added: grads; both
// skipped when dweight has null data: a frozen weight)
void CpuBackend::linear_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                                 ParamGrads grads, InputGrad input) {
  if (input == InputGrad::Add && dinp.data) {
    // The product in a buffer of dinp's storage type, then the residual add: the roundings of
    // a linear_backward followed by residual_forward, one after the other.
    std::vector<unsigned char> product_bytes(dinp.bytes());
    const Tensor product{product_bytes.data(), dinp.dtype, dinp.shape};
    linear_backward(product, dweight, dbias, dout, inp, weight, grads, InputGrad::Write);
    residual_forward(dinp, dinp, product);
    return;
  }
  Fp32Scope fp32({&dinp, &dout, &inp, &weight});  // bf16/fp16 storage: see storage.h
  const int N = inp.shape[0], I = inp.shape[1], O = weight.shape[0];
  const float* d = dout.f32();
  const bool add = grads == ParamGrads::Add;
  if (dinp.data)
    gemm_f32(false, false, N, I, O, d, O, weight.f32(), I, 0.0f, dinp.f32(), I);
  if (!dweight.data) return;  // a frozen weight (LoRA's base): no weight or bias gradient
  gemm_f32(true, false, O, I, N, d, O, inp.f32(), I, add ? 1.0f : 0.0f, dweight.f32(), I);
  if (dbias.data) {
    // Column sums, a block of columns per task, walking dout row by row: each row's span is
    // contiguous, so the adds vectorise across columns (a column at a time would stride O
    // floats per add). Each column is still summed over n = 0..N-1 in order, as before.
    float* db = dbias.f32();
    constexpr int kColumns = 256;
#pragma omp parallel for
    for (int j0 = 0; j0 < O; j0 += kColumns) {
      const int width = O - j0 < kColumns ? O - j0 : kColumns;
      float sum[kColumns] = {};
      for (int n = 0; n < N; ++n) {
        const float* row = d + static_cast<int64_t>(n) * O + j0;
        for (int j = 0; j < width; ++j) sum[j] += row[j];
      }
      for (int j = 0; j < width; ++j) db[j0 + j] = add ? db[j0 + j] + sum[j] : sum[j];
    }
  }
}

}  // namespace tt
