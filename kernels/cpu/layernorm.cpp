// LayerNorm over the last dimension, forward and backward (CPU), as nn.LayerNorm: biased
// variance, eps inside the square root. And RMSNorm (mean null, kernels/backend.h): the same
// code with the mean fixed at 0, neither subtracted nor kept, as Llama's RMSNorm computes it in
// fp32; an absent bias adds nothing.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/rows_in_turn.h"
#include "kernels/cpu/storage.h"

namespace tt {

namespace {

// Rows n0 .. n0 + kRows - 1: mean, biased variance, rstd, and the normalised, scaled rows. Each
// row's sums run over c in order, as alone; the rows' chains are interleaved (rows_in_turn.h).
// RMSNorm: mu null, the mean is 0 (the "variance" is the mean square); b null: no bias.
template <int kRows>
void layernorm_forward_rows(const float* x, const float* w, const float* b, float* o, float* mu, float* rs, int n0,
                            int C, float eps) {
  auto xr = [&](int r) { return x + static_cast<int64_t>(n0 + r) * C; };
  auto channels = [&](int) { return C; };
  float sum[kRows], m[kRows], var[kRows];
  for (int r = 0; r < kRows; ++r) sum[r] = 0.0f, var[r] = 0.0f, m[r] = 0.0f;
  if (mu) {
    rows_in_turn<kRows>(channels, [&](int r, int c) { sum[r] += xr(r)[c]; });
    for (int r = 0; r < kRows; ++r) m[r] = sum[r] / C;
  }
  rows_in_turn<kRows>(channels, [&](int r, int c) { var[r] += (xr(r)[c] - m[r]) * (xr(r)[c] - m[r]); });
  for (int r = 0; r < kRows; ++r) {
    const float rstd = 1.0f / std::sqrt(var[r] / C + eps);
    float* orow = o + static_cast<int64_t>(n0 + r) * C;
    for (int c = 0; c < C; ++c) orow[c] = (xr(r)[c] - m[r]) * rstd * w[c] + (b ? b[c] : 0.0f);
    if (mu) mu[n0 + r] = m[r];
    rs[n0 + r] = rstd;
  }
}

// The input gradient of rows n0 .. n0 + kRows - 1 (dinp may alias dout: a row is written after
// all the block's rows are read), the two means over the channels in order, rows interleaved.
// RMSNorm (mu null): no mean was subtracted, so no mean(g) term: dx = rstd (g - xhat mean(g xhat)).
template <int kRows>
void layernorm_backward_rows(const float* x, const float* d, const float* w, const float* mu, const float* rs,
                             float* dx, int n0, int C) {
  auto at = [&](int r) { return static_cast<int64_t>(n0 + r) * C; };
  auto mean_of = [&](int n) { return mu ? mu[n] : 0.0f; };
  float mean_g[kRows], mean_gx[kRows];
  for (int r = 0; r < kRows; ++r) mean_g[r] = 0.0f, mean_gx[r] = 0.0f;
  rows_in_turn<kRows>([&](int) { return C; }, [&](int r, int c) {
    const float xhat = (x[at(r) + c] - mean_of(n0 + r)) * rs[n0 + r];
    const float g = d[at(r) + c] * w[c];
    mean_g[r] += g;
    mean_gx[r] += g * xhat;
  });
  for (int r = 0; r < kRows; ++r) {
    const int n = n0 + r;
    mean_g[r] = mu ? mean_g[r] / C : 0.0f;
    mean_gx[r] /= C;
    for (int c = 0; c < C; ++c) {
      const float xhat = (x[at(r) + c] - mean_of(n)) * rs[n];
      dx[at(r) + c] = rs[n] * (d[at(r) + c] * w[c] - mean_g[r] - xhat * mean_gx[r]);
    }
  }
}

}  // namespace

// inp (N,C), weight (C), bias (C) -> out (N,C), mean (N), rstd (N)
void CpuBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias,
                                   float eps) {
  Fp32Scope fp32({&out, &inp, &weight, &bias});  // bf16/fp16 storage: see storage.h
  const int N = inp.shape[0], C = inp.shape[1];
  const float* x = inp.f32();
  const float* w = weight.f32();
  const float* b = bias.data ? bias.f32() : nullptr;
  float* o = out.f32();
  float* mu = mean.data ? mean.f32() : nullptr;
  float* rs = rstd.f32();
#pragma omp parallel for
  for (int n0 = 0; n0 < N; n0 += kRowsInTurn) {
    if (n0 + kRowsInTurn <= N)
      layernorm_forward_rows<kRowsInTurn>(x, w, b, o, mu, rs, n0, C, eps);
    else
      for (int n = n0; n < N; ++n) layernorm_forward_rows<1>(x, w, b, o, mu, rs, n, C, eps);
  }
}

// dout (N,C) -> dinp (N,C) (may alias dout), dweight (C), dbias (C) written or added (grads)
// With xhat = (x - mean) rstd and g = dout * weight:
// dx = rstd (g - mean(g) - xhat mean(g xhat)); RMSNorm: mean 0 and no mean(g) term.
void CpuBackend::layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                                    Tensor mean, Tensor rstd, ParamGrads grads) {
  Fp32Scope fp32({&dinp, &dout, &inp, &weight});  // bf16/fp16 storage: see storage.h
  const int N = inp.shape[0], C = inp.shape[1];
  const float* x = inp.f32();
  const float* d = dout.f32();
  const float* w = weight.f32();
  const float* mu = mean.data ? mean.f32() : nullptr;
  const float* rs = rstd.f32();
  // Parameter gradients reduce over rows: threads split the channels into blocks, and each block
  // walks the rows in order, so every channel is summed over n = 0..N-1 one add at a time while
  // the adds of neighbouring channels run side by side in vector registers.
  float* dw = dweight.f32();
  float* db = dbias.data ? dbias.f32() : nullptr;
  constexpr int kChannels = 64;
#pragma omp parallel for
  for (int c0 = 0; c0 < C; c0 += kChannels) {
    const int width = std::min(kChannels, C - c0);
    float sw[kChannels] = {}, sb[kChannels] = {};
    for (int n = 0; n < N; ++n) {
      const float* xr = x + static_cast<int64_t>(n) * C + c0;
      const float* dr = d + static_cast<int64_t>(n) * C + c0;
      for (int c = 0; c < width; ++c) {
        const float xhat = (xr[c] - (mu ? mu[n] : 0.0f)) * rs[n];
        sw[c] += dr[c] * xhat;
        sb[c] += dr[c];
      }
    }
    const bool add = grads == ParamGrads::Add;
    for (int c = 0; c < width; ++c) {
      dw[c0 + c] = add ? dw[c0 + c] + sw[c] : sw[c];
      if (db) db[c0 + c] = add ? db[c0 + c] + sb[c] : sb[c];
    }
  }
  // Then the input gradient, row by row (dinp may alias dout: each row is read before it is written).
  float* dx = dinp.f32();
#pragma omp parallel for
  for (int n0 = 0; n0 < N; n0 += kRowsInTurn) {
    if (n0 + kRowsInTurn <= N)
      layernorm_backward_rows<kRowsInTurn>(x, d, w, mu, rs, dx, n0, C);
    else
      for (int n = n0; n < N; ++n) layernorm_backward_rows<1>(x, d, w, mu, rs, dx, n, C);
  }
}

}  // namespace tt
