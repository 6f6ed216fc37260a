// Fused softmax + cross-entropy on the GPU, as kernels/cpu/cross_entropy.cpp: per token row,
// the loss log(sum exp(z - max)) + max - z[target] and, when asked, the logit gradient
// (softmax - onehot) * dloss_scale / mean_over written over the row. No probability tensor is kept:
// the softmax is recomputed from the logits when the gradient is written, so dlogits may alias
// logits. Two passes over a row: the max and the sum of exps together (the online softmax of
// Milakov and Gimelshein, "Online normalizer calculation for softmax", 2018), then the gradient.
// Deterministic: fixed-order block reductions, no atomics.
// Storage: logits and dlogits are in the activation storage type S (kernels/cuda/storage.cuh),
// read and written 16 bytes at a time (8 bf16/fp16 values, 4 fp32) where the row is aligned so;
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

// A running softmax normaliser: the largest logit seen, m, and the sum of exp(z - m) over the
// logits seen. Seeing z: a larger z rescales the sum to the new maximum.
struct MaxSum {
  float max = -INFINITY;
  float sum = 0.0f;
  __device__ __forceinline__ void see(float z) {
    if (z > max) {
      sum = sum * expf(max - z) + 1.0f;  // max = -inf at first: expf(-inf) = 0
      max = z;
    } else {
      sum += z == -INFINITY ? 0.0f : expf(z - max);  // a NaN logit makes the sum NaN
    }
  }
};

// The normaliser of two disjoint sets of logits. Not symmetric in its bits (the two products
// may fuse differently), so callers always pass the lower lane's or partial's value as `a`.
__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  MaxSum c;
  c.max = fmaxf(a.max, b.max);
  if (c.max == -INFINITY) return c;  // neither has seen a finite logit
  c.sum = a.sum * expf(a.max - c.max) + b.sum * expf(b.max - c.max);
  return c;
}

// The block's normaliser (all kThreads threads call; every thread gets bitwise the same result):
// a butterfly within each warp, each pair combined in lane order, so both lanes of a pair compute
// the same expression; then the warps' results through shared memory, which every warp combines
// itself in warp order. The leading barrier orders every thread's earlier reads of the row before
// anything after the call (the gradient pass may overwrite the logits).
__device__ __forceinline__ MaxSum block_max_sum(MaxSum v, MaxSum* partials) {
  const int lane = threadIdx.x % kWarp;
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) {
    MaxSum other;
    other.max = __shfl_xor_sync(kFullMask, v.max, offset);
    other.sum = __shfl_xor_sync(kFullMask, v.sum, offset);
    v = (lane & offset) ? combine(other, v) : combine(v, other);
  }
  __syncthreads();
  if (lane == 0) partials[threadIdx.x / kWarp] = v;
  __syncthreads();
  MaxSum total = partials[0];
  for (int w = 1; w < kWarps; ++w) total = combine(total, partials[w]);
  return total;
}

// Visits a row of V values of S, each element once, in an order fixed by V and the row's
// alignment: the elements before the row's first 16-byte boundary one per thread, then whole
// 16-byte chunks (thread t takes chunks t, t + kThreads, ...; its elements in order), then the
// elements after the last chunk, one per thread. visit(v, z) gets the index and the widened value;
// with `out`, it returns the value to store there (out may be the row itself).
template <typename S, typename Visit>
__device__ __forceinline__ void for_each_logit(const S* row, S* out, int V, Visit visit) {
  constexpr int kPerChunk = 16 / static_cast<int>(sizeof(S));
  const int misaligned = static_cast<int>(reinterpret_cast<uintptr_t>(row) % 16 / sizeof(S));
  const int head = misaligned == 0 ? 0 : min(V, kPerChunk - misaligned);
  const int chunks = (V - head) / kPerChunk;
  // out at the same alignment as row (dlogits is logits, or laid out alike): chunks there too
  const bool out_chunks = out && reinterpret_cast<uintptr_t>(out + head) % 16 == 0;
  const auto one = [&](int v) {
    const float r = visit(v, to_float(row[v]));
    if (out) out[v] = from_float<S>(r);
  };
  if (static_cast<int>(threadIdx.x) < head) one(threadIdx.x);
  const Chunk<S>* chunked = reinterpret_cast<const Chunk<S>*>(row + head);
  for (int i = threadIdx.x; i < chunks; i += kThreads) {
    const Chunk<S> in = chunked[i];
    Chunk<S> result;
    const int v0 = head + i * kPerChunk;
    for (int j = 0; j < kPerChunk; ++j) result.v[j] = from_float<S>(visit(v0 + j, to_float(in.v[j])));
    if (out_chunks)
      reinterpret_cast<Chunk<S>*>(out + head)[i] = result;
    else if (out)
      for (int j = 0; j < kPerChunk; ++j) out[v0 + j] = result.v[j];
  }
  for (int v = head + chunks * kPerChunk + static_cast<int>(threadIdx.x); v < V; v += kThreads) one(v);
}

// logits (N,V), targets (N) int32 -> losses (N); dlogits (N,V) or null, may alias logits.
// Decomposition: one 512-thread block per token row (grid N). Pass 1: each thread's running max
// and sum of exps over its logits, then one block reduction of the pairs; thread 0 writes the
// loss. Pass 2, with dlogits: each logit rewritten as its gradient.
// Aliasing: z[target] is read before the reduction, and every read of pass 1 finishes before
// that reduction's barrier, so no thread overwrites a logit another still needs; in pass 2 each
// thread reads its logits before it writes the same elements.
// A target outside [0, V) gives a NaN loss (the CPU reads out of bounds) and no onehot term.
template <typename S>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_kernel(float* losses, S* dlogits, const S* logits, const int32_t* __restrict__ targets, int V,
                         const float* dloss_scale, float mean_over) {
  __shared__ MaxSum partials[kWarps];
  const int64_t row = blockIdx.x;
  const S* z = logits + row * V;

  const int target = targets[row];
  const bool target_ok = target >= 0 && target < V;
  float target_logit = NAN;
  if (threadIdx.x == 0 && target_ok) target_logit = to_float(z[target]);  // before any thread can overwrite it

  MaxSum mine;
  for_each_logit(z, static_cast<S*>(nullptr), V, [&](int, float x) {
    mine.see(x);
    return x;
  });
  const MaxSum all = block_max_sum(mine, partials);

  if (threadIdx.x == 0) losses[row] = logf(all.sum) + all.max - target_logit;
  if (dlogits != nullptr) {
    const float grad_scale = *dloss_scale / mean_over;  // the loss scale, read when the kernel runs; as the CPU
    const float inv_sum = 1.0f / all.sum;
    for_each_logit(z, dlogits + row * V, V, [&](int v, float x) {
      const float prob = expf(x - all.max) * inv_sum;
      return (prob - (v == target ? 1.0f : 0.0f)) * grad_scale;
    });
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
