// Fused softmax + cross-entropy (CPU): one pass per token row gives the loss and, when
// asked, the logit gradient written over the logits; no probability tensor is kept.
#include <cmath>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"
#include "kernels/cpu/vector_exp.h"

namespace tt {

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
#pragma omp parallel for
  for (int n = 0; n < N; ++n) {
    const float* zr = z + static_cast<int64_t>(n) * V;
    float max_logit = -INFINITY;
    for (int v = 0; v < V; ++v) max_logit = zr[v] > max_logit ? zr[v] : max_logit;  // (NaNs skipped, as fmax)
    const int target = y[n];
    const float target_logit = zr[target];  // (read first: dlogits may alias the logits)
    float* dr = dz ? dz + static_cast<int64_t>(n) * V : nullptr;
    // exp(z - max) once per logit: kept in the gradient row when there is one, for its pass
    // (else a chunk at a time on the stack).
    float sum = 0.0f;
    constexpr int kChunk = 256;
    float chunk[kChunk];
    for (int v0 = 0; v0 < V; v0 += kChunk) {
      const int width = V - v0 < kChunk ? V - v0 : kChunk;
      float* e = dr ? dr + v0 : chunk;
      exp_shifted(zr + v0, max_logit, width, e, simd_);
      for (int v = 0; v < width; ++v) sum += e[v];
    }
    loss[n] = std::log(sum) + max_logit - target_logit;
    if (dr) {
      const float inv_sum = 1.0f / sum;
      for (int v = 0; v < V; ++v) dr[v] = (dr[v] * inv_sum - (v == target ? 1.0f : 0.0f)) * grad_scale;
    }
  }
}

}  // namespace tt
