// Column windows of a row-major matrix (CPU): a LoRA adapter's product added to its part of a
// fused projection's output, and its part of the output gradient read out (engine/lora.h).
#include <stdexcept>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"

namespace tt {

namespace {

void check_window(const char* op, Tensor wide, Tensor narrow, int64_t first) {
  if (wide.shape.rank != 2 || narrow.shape.rank != 2 || wide.shape[0] != narrow.shape[0] || first < 0 ||
      first + narrow.shape[1] > wide.shape[1])
    throw std::invalid_argument(std::string(op) + ": the window does not fit the matrix");
}

}  // namespace

// delta (N,W) -> out (N,O) columns [first, first + W) += scale * delta (scale * delta rounded
// first, then the sum, in fp32: -ffp-contract=off keeps the two roundings)
void CpuBackend::add_scaled_columns(Tensor out, int64_t first, Tensor delta, float scale) {
  check_window("add_scaled_columns", out, delta, first);
  Fp32Scope fp32({&out, &delta});  // bf16/fp16 storage: see storage.h
  const int64_t N = out.shape[0], O = out.shape[1], W = delta.shape[1];
  float* o = out.f32();
  const float* d = delta.f32();
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < W; ++j) o[n * O + first + j] += scale * d[n * W + j];
}

// inp (N,O) -> out (N,W) = scale * inp columns [first, first + W)
void CpuBackend::copy_scaled_columns(Tensor out, Tensor inp, int64_t first, float scale) {
  check_window("copy_scaled_columns", inp, out, first);
  Fp32Scope fp32({&out, &inp});
  const int64_t N = out.shape[0], O = inp.shape[1], W = out.shape[1];
  float* o = out.f32();
  const float* x = inp.f32();
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < W; ++j) o[n * W + j] = scale * x[n * O + first + j];
}

}  // namespace tt
