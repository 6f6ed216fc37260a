// Fused softmax + cross-entropy on the GPU, as kernels/cpu/cross_entropy.cpp: per token row,
// the loss log(sum exp(z - max)) + max - z[target] and, when asked, the logit gradient
// (softmax - onehot) * dloss_scale / mean_over written over the row. No probability tensor is kept:
// the softmax is recomputed from the logits when the gradient is written, so dlogits may alias
// logits. Deterministic: block reductions in a fixed order, no atomics.
// Storage: logits and dlogits are in the activation storage type S (kernels/cuda/storage.cuh);
// the max, the sum of exps, the loss and each gradient are fp32, and the losses are F32.
#include <cmath>
#include <cstdint>

#include "kernels/common/half.h"

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/storage.cuh"
#include "kernels/cuda/warp.cuh"

namespace tt {

namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / kWarp;


// Block reductions (all kThreads threads call; every thread gets bitwise the same result):
// warp partials into shared memory, then every warp reduces the kWarps partials itself in the
// same order. The leading barrier keeps a previous reduction's readers ahead of these writers,
// and it also orders every thread's earlier global reads before anything after the call.
__device__ __forceinline__ float block_sum(float v, float* partials) {
  v = warp_sum(v);
  __syncthreads();
  if (threadIdx.x % kWarp == 0) partials[threadIdx.x / kWarp] = v;
  __syncthreads();
  const int lane = threadIdx.x % kWarp;
  return warp_sum(lane < kWarps ? partials[lane] : 0.0f);
}
__device__ __forceinline__ float block_max(float v, float* partials) {
  v = warp_max(v);
  __syncthreads();
  if (threadIdx.x % kWarp == 0) partials[threadIdx.x / kWarp] = v;
  __syncthreads();
  const int lane = threadIdx.x % kWarp;
  return warp_max(lane < kWarps ? partials[lane] : -INFINITY);
}

// logits (N,V), targets (N) int32 -> losses (N); dlogits (N,V) or null, may alias logits.
// Decomposition: one 512-thread block per token row (grid N); threads stride the V logits
// (coalesced, any V). Pass 1 the row max, pass 2 the sum of exp(z - max) (block reductions),
// then thread 0 writes the loss and, with dlogits, pass 3 rewrites each logit as its gradient.
// Aliasing: z[target] is read before the pass-2 reduction, and every read of pass 2 finishes
// before that reduction's barrier, so no thread overwrites a logit another still needs; in pass 3
// each thread reads a logit before it writes the same element.
// A target outside [0, V) gives a NaN loss (the CPU reads out of bounds) and no onehot term.
template <typename S>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_kernel(float* losses, S* dlogits, const S* logits, const int32_t* __restrict__ targets, int V,
                         const float* dloss_scale, float mean_over) {
  __shared__ float partials[kWarps];
  const int64_t row = blockIdx.x;
  const S* z = logits + row * V;

  float max_logit = -INFINITY;
  for (int v = threadIdx.x; v < V; v += kThreads) max_logit = fmaxf(max_logit, to_float(z[v]));
  max_logit = block_max(max_logit, partials);

  const int target = targets[row];
  const bool target_ok = target >= 0 && target < V;
  float target_logit = NAN;
  if (threadIdx.x == 0 && target_ok) target_logit = to_float(z[target]);  // before any thread can overwrite it

  float sum = 0.0f;
  for (int v = threadIdx.x; v < V; v += kThreads) sum += expf(to_float(z[v]) - max_logit);
  sum = block_sum(sum, partials);

  if (threadIdx.x == 0) losses[row] = logf(sum) + max_logit - target_logit;
  if (dlogits != nullptr) {
    const float grad_scale = *dloss_scale / mean_over;  // the loss scale, read when the kernel runs; as the CPU
    const float inv_sum = 1.0f / sum;
    S* d = dlogits + row * V;
    for (int v = threadIdx.x; v < V; v += kThreads) {
      const float prob = expf(to_float(z[v]) - max_logit) * inv_sum;
      d[v] = from_float<S>((prob - (v == target ? 1.0f : 0.0f)) * grad_scale);
    }
  }
}

}  // namespace

// logits (N,V), targets (N) -> losses (N); dlogits (N,V) = (softmax - onehot) * dloss_scale / mean_over
void CudaBackend::cross_entropy_forward_backward(Tensor losses, Tensor dlogits, Tensor logits, Tensor targets,
                                                 Tensor dloss_scale, int64_t mean_over) {
  const int N = static_cast<int>(logits.shape[0]), V = static_cast<int>(logits.shape[1]);
  const DType dtype = shared_storage_dtype("cross_entropy_forward_backward", {dlogits, logits});
  float* loss = losses.f32();  // per-token losses and the loss scale: F32
  const float* scale = dloss_scale.f32();
  if (N <= 0) return;
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    cross_entropy_kernel<S><<<N, kThreads, 0, stream_>>>(loss, data_or_null<S>(dlogits), logits.as<S>(),
                                                         targets.i32(), V, scale, static_cast<float>(mean_over));
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
