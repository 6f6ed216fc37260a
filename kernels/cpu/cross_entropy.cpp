// Fused softmax + cross-entropy (CPU): one pass per token row gives the loss and, when
// asked, the logit gradient written over the logits; no probability tensor is kept.
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/rows_in_turn.h"
#include "kernels/cpu/storage.h"
#include "kernels/cpu/vector_exp.h"

namespace tt {

namespace {

// Rows n0 .. n0 + kRows - 1 of logits z (.,V): their losses and, when dz is given, their logit
// gradients. exp(z - max) is computed once per logit and kept in the gradient row (or, without
// one, in this thread's scratch rows) for the gradient's pass. The max and the sum run over the
// vocabulary in order, each row as alone, the rows' chains interleaved (rows_in_turn.h).
template <int kRows>
void cross_entropy_rows(const float* z, const int32_t* y, float* loss, float* dz, float* scratch, int n0, int V,
                        float grad_scale, CpuSimd simd) {
  auto logits = [&](int r) { return z + static_cast<int64_t>(n0 + r) * V; };
  auto exps = [&](int r) { return dz ? dz + static_cast<int64_t>(n0 + r) * V : scratch + static_cast<int64_t>(r) * V; };
  auto whole_row = [&](int) { return V; };
  float max_logit[kRows], target_logit[kRows], sum[kRows];
  for (int r = 0; r < kRows; ++r) max_logit[r] = -INFINITY, sum[r] = 0.0f;
  rows_in_turn<kRows>(whole_row, [&](int r, int v) {
    const float zv = logits(r)[v];
    max_logit[r] = zv > max_logit[r] ? zv : max_logit[r];  // (NaNs skipped, as fmax)
  });
  for (int r = 0; r < kRows; ++r) {
    target_logit[r] = logits(r)[y[n0 + r]];  // (read first: dlogits may alias the logits)
    exp_shifted(logits(r), max_logit[r], V, exps(r), simd);
  }
  rows_in_turn<kRows>(whole_row, [&](int r, int v) { sum[r] += exps(r)[v]; });
  for (int r = 0; r < kRows; ++r) {
    loss[n0 + r] = std::log(sum[r]) + max_logit[r] - target_logit[r];
    if (!dz) continue;
    const float inv_sum = 1.0f / sum[r];
    const int target = y[n0 + r];
    float* dr = exps(r);
    for (int v = 0; v < V; ++v) dr[v] = (dr[v] * inv_sum - (v == target ? 1.0f : 0.0f)) * grad_scale;
  }
}

}  // namespace

// logits (N,V), targets (N) -> losses (N); dlogits (N,V) = (softmax - onehot) * dloss_scale / mean_over
void CpuBackend::cross_entropy_forward_backward(Tensor losses, Tensor dlogits, Tensor logits, Tensor targets,
                                                Tensor dloss_scale, int64_t mean_over) {
  Fp32Scope fp32({&dlogits, &logits});  // bf16/fp16 storage: see storage.h
  const int N = logits.shape[0], V = logits.shape[1];
  const float* z = logits.f32();
  const int32_t* y = targets.i32();
  float* loss = losses.f32();
  float* dz = dlogits.data ? dlogits.f32() : nullptr;
  const float grad_scale = *dloss_scale.f32() / static_cast<float>(mean_over);
#pragma omp parallel
  {
    std::vector<float> scratch(dz ? 0 : static_cast<size_t>(kRowsInTurn) * V);  // exps, without a gradient
#pragma omp for
    for (int n0 = 0; n0 < N; n0 += kRowsInTurn) {
      if (n0 + kRowsInTurn <= N)
        cross_entropy_rows<kRowsInTurn>(z, y, loss, dz, scratch.data(), n0, V, grad_scale, simd_);
      else
        for (int n = n0; n < N; ++n) cross_entropy_rows<1>(z, y, loss, dz, scratch.data(), n, V, grad_scale, simd_);
    }
  }
}

}  // namespace tt
