// LayerNorm over the last dimension, forward and backward (CPU), as nn.LayerNorm:
// biased variance, eps inside the square root.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"

namespace tt {

// inp (N,C), weight (C), bias (C) -> out (N,C), mean (N), rstd (N)
void CpuBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias,
                                   float eps) {
  Fp32Scope fp32({&out, &inp, &weight, &bias});  // bf16/fp16 storage: see storage.h
  const int N = inp.shape[0], C = inp.shape[1];
  const float* x = inp.f32();
  const float* w = weight.f32();
  const float* b = bias.f32();
  float* o = out.f32();
  float* mu = mean.f32();
  float* rs = rstd.f32();
#pragma omp parallel for
  for (int n = 0; n < N; ++n) {
    const float* xr = x + static_cast<int64_t>(n) * C;
    float sum = 0.0f;
    for (int c = 0; c < C; ++c) sum += xr[c];
    const float m = sum / C;
    float var = 0.0f;
    for (int c = 0; c < C; ++c) var += (xr[c] - m) * (xr[c] - m);
    const float r = 1.0f / std::sqrt(var / C + eps);
    float* orow = o + static_cast<int64_t>(n) * C;
    for (int c = 0; c < C; ++c) orow[c] = (xr[c] - m) * r * w[c] + b[c];
    mu[n] = m;
    rs[n] = r;
  }
}

// dout (N,C) -> dinp (N,C) (may alias dout), dweight (C) +=, dbias (C) +=
// With xhat = (x - mean) rstd and g = dout * weight:
// dx = rstd (g - mean(g) - xhat mean(g xhat)).
void CpuBackend::layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                                    Tensor mean, Tensor rstd) {
  Fp32Scope fp32({&dinp, &dout, &inp, &weight});  // bf16/fp16 storage: see storage.h
  const int N = inp.shape[0], C = inp.shape[1];
  const float* x = inp.f32();
  const float* d = dout.f32();
  const float* w = weight.f32();
  const float* mu = mean.f32();
  const float* rs = rstd.f32();
  // Parameter gradients reduce over rows: threads split the channels into blocks, and each block
  // walks the rows in order, so every channel is summed over n = 0..N-1 one add at a time while
  // the adds of neighbouring channels run side by side in vector registers.
  float* dw = dweight.f32();
  float* db = dbias.f32();
  constexpr int kChannels = 64;
#pragma omp parallel for
  for (int c0 = 0; c0 < C; c0 += kChannels) {
    const int width = std::min(kChannels, C - c0);
    float sw[kChannels] = {}, sb[kChannels] = {};
    for (int n = 0; n < N; ++n) {
      const float* xr = x + static_cast<int64_t>(n) * C + c0;
      const float* dr = d + static_cast<int64_t>(n) * C + c0;
      for (int c = 0; c < width; ++c) {
        const float xhat = (xr[c] - mu[n]) * rs[n];
        sw[c] += dr[c] * xhat;
        sb[c] += dr[c];
      }
    }
    for (int c = 0; c < width; ++c) {
      dw[c0 + c] += sw[c];
      db[c0 + c] += sb[c];
    }
  }
  // Then the input gradient, row by row (dinp may alias dout: each row is read before it is written).
  float* dx = dinp.f32();
#pragma omp parallel for
  for (int n = 0; n < N; ++n) {
    const float* xr = x + static_cast<int64_t>(n) * C;
    const float* dr = d + static_cast<int64_t>(n) * C;
    float mean_g = 0.0f, mean_gx = 0.0f;
    for (int c = 0; c < C; ++c) {
      const float xhat = (xr[c] - mu[n]) * rs[n];
      const float g = dr[c] * w[c];
      mean_g += g;
      mean_gx += g * xhat;
    }
    mean_g /= C;
    mean_gx /= C;
    float* dxr = dx + static_cast<int64_t>(n) * C;
    for (int c = 0; c < C; ++c) {
      const float xhat = (xr[c] - mu[n]) * rs[n];
      dxr[c] = rs[n] * (dr[c] * w[c] - mean_g - xhat * mean_gx);
    }
  }
}

}  // namespace tt
