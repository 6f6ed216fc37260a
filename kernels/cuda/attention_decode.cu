// Incremental decoding with a KV cache on the GPU: the attention of ONE new token per sequence
// over the keys and values of every earlier position, kept from earlier steps in a cache
// (B,maxT,KC) per layer, so a token costs O(t) work instead of recomputing the whole O(t^2)
// prefix. Inference only: no dropout, no backward. The CPU reference is
// kernels/cpu/attention_decode.cpp; this computes the same thing in the same order wherever
// one thread owns a sum (the score dot products, the weighted sum of v); they differ from it
// only where the compiler fuses a multiply-add (nvcc does, the CPU backend does not) and where
// the softmax's max and sum are block reductions (the max is exact in any order, the sum is
// not), and expf may differ by an ulp.
//
// Storage: qkv, the caches and out are in the activation storage type S (float, bf16 or f16;
// kernels/cuda/storage.cuh): loaded into fp32, all math fp32, out rounded once on store. The
// fp32 softmax weights of every (b,h) live in CudaBackend::attention_work() while the kernel runs.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/common/half.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid_size.h"
#include "kernels/cuda/storage.cuh"
#include "kernels/cuda/warp.cuh"

namespace tt {

namespace {

constexpr int kDecodeThreads = 128;                    // one block per (b,h): 4 warps
constexpr int kDecodeWarps = kDecodeThreads / kWarp;

// qkv (B,W) -> k_cache, v_cache (B,maxT,KC): row (b,pos) of each cache = the k (v) part of
// qkv row b, which starts at W - 2 KC (after the q heads). A copy of stored values: nothing is
// rounded. Decomposition: one thread per (b,c), grid-stride; consecutive threads copy
// consecutive channels (coalesced).
template <typename S>
__global__ void kv_cache_append_kernel(S* k_cache, S* v_cache, const S* qkv, int64_t B, int64_t W, int KC, int maxT,
                                       int pos) {
  const int64_t total = B * KC;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = i / KC;
    const int c = static_cast<int>(i % KC);
    const S* k = qkv + b * W + W - 2 * KC;  // the k part of sequence b; v follows it
    const int64_t dst = (b * maxT + pos) * KC + c;
    k_cache[dst] = k[c];
    v_cache[dst] = k[KC + c];
  }
}

// A block-wide reduction finished: every warp has reduced its threads' values by butterfly
// (warp_sum / warp_max: each lane holds the warp's result); here the warps' results meet in
// shared `slots` and every thread combines them in warp order, so every thread returns the
// same bits, run after run. All threads of the block must call it.
template <typename Combine>
__device__ __forceinline__ float combine_warps(float warp_result, float* slots, Combine combine) {
  __syncthreads();  // every thread has read the slots of the previous reduction
  if (threadIdx.x % kWarp == 0) slots[threadIdx.x / kWarp] = warp_result;
  __syncthreads();
  float result = slots[0];
  for (int w = 1; w < kDecodeWarps; ++w) result = combine(result, slots[w]);
  return result;
}

// qkv (B,W) (q part), k_cache, v_cache (B,maxT,KC) filled for positions [0,keys) -> out (B,C);
// weights (B*NH, keys) fp32 scratch. Query head h reads key/value head at.kv_head(h).
// Decomposition: one block per (b,h), grid B*NH, kDecodeThreads threads:
//   pass 1: thread i scores keys i, i + 128, ...: (q*scale).k over HS in the CPU's order, raw
//           score into the weights row, then the block max;
//   pass 2: each thread exponentiates and sums the entries it wrote itself, block sum,
//           normalises its entries; a barrier, since pass 3 reads every thread's entries;
//   pass 3: thread d (d < HS, then d + 128, ...) owns output channel d and adds weight * v over
//           the keys in order (the CPU's order); threads of a warp read consecutive channels of
//           one cache row (coalesced).
// Shared memory: HS floats (the scaled query) + kDecodeWarps slots.
template <typename S>
__global__ void __launch_bounds__(kDecodeThreads)
    attention_decode_kernel(S* __restrict__ out, float* __restrict__ weights, const S* __restrict__ qkv,
                            const S* __restrict__ k_cache, const S* __restrict__ v_cache, int keys, int maxT,
                            QkvLayout at) {
  __shared__ float slots[kDecodeWarps];
  extern __shared__ float q_s[];  // [HS]
  const int NH = at.NH, HS = at.HS;
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int64_t C = at.q_width(), KC = at.kv_width();
  const int64_t head = static_cast<int64_t>(b) * maxT * KC + static_cast<int64_t>(at.kv_head(h)) * HS;  // (b, 0, its kv head) of a cache
  float* w = weights + static_cast<int64_t>(bh) * keys;
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));

  const S* q = qkv + b * at.width() + at.q(h);
  for (int d = threadIdx.x; d < HS; d += blockDim.x) q_s[d] = to_float(q[d]) * scale;
  __syncthreads();

  // pass 1: scores and the max
  float max_score = -INFINITY;
  for (int t2 = threadIdx.x; t2 < keys; t2 += blockDim.x) {
    const S* k = k_cache + head + static_cast<int64_t>(t2) * KC;
    float dot = 0.0f;
    for (int d = 0; d < HS; ++d) dot += q_s[d] * to_float(k[d]);
    w[t2] = dot;
    max_score = fmaxf(max_score, dot);
  }
  max_score = combine_warps(warp_max(max_score), slots, [](float a, float c) { return fmaxf(a, c); });

  // pass 2: softmax over the entries this thread wrote
  float sum = 0.0f;
  for (int t2 = threadIdx.x; t2 < keys; t2 += blockDim.x) {
    const float e = expf(w[t2] - max_score);
    w[t2] = e;
    sum += e;
  }
  sum = combine_warps(warp_sum(sum), slots, [](float a, float c) { return a + c; });
  const float inv_sum = 1.0f / sum;
  for (int t2 = threadIdx.x; t2 < keys; t2 += blockDim.x) w[t2] *= inv_sum;
  __syncthreads();  // pass 3 reads every thread's weights

  // pass 3: out = sum over keys of weight * v, one channel per thread
  S* orow = out + static_cast<int64_t>(b) * C + h * HS;
  for (int d = threadIdx.x; d < HS; d += blockDim.x) {
    const S* v = v_cache + head + d;
    float acc = 0.0f;
    for (int t2 = 0; t2 < keys; ++t2) acc += w[t2] * to_float(v[static_cast<int64_t>(t2) * KC]);
    orow[d] = from_float<S>(acc);
  }
}

}  // namespace

// qkv (B,C+2KC) -> k_cache[:,pos,:] = k, v_cache[:,pos,:] = v; caches (B,maxT,KC)
void CudaBackend::kv_cache_append(Tensor k_cache, Tensor v_cache, Tensor qkv, int pos) {
  check_decode_views("kv_cache_append", k_cache, v_cache, qkv, pos, 0);
  const int64_t B = k_cache.shape[0], W = qkv.shape[1];
  const int maxT = static_cast<int>(k_cache.shape[1]), KC = static_cast<int>(k_cache.shape[2]);
  if (B * KC == 0) return;
  dispatch_storage(qkv.dtype, [&](auto storage) {
    using S = decltype(storage);
    kv_cache_append_kernel<S><<<grid_stride_blocks(B * KC), kThreadsPerBlock, 0, stream_>>>(
        k_cache.as<S>(), v_cache.as<S>(), qkv.as<S>(), B, W, KC, maxT, pos);
  });
  CUDA_CHECK(cudaGetLastError());
}

// qkv (B,C+2KC) (q part), k_cache, v_cache (B,maxT,KC) filled for [0,pos] -> out (B,C)
void CudaBackend::attention_decode(Tensor out, Tensor qkv, Tensor k_cache, Tensor v_cache, int pos, int NH) {
  const QkvLayout at = check_decode_views("attention_decode", k_cache, v_cache, qkv, pos, NH);
  const DType dtype = shared_storage_dtype("attention_decode", {out, qkv, k_cache, v_cache});
  const int64_t B = k_cache.shape[0];
  const int maxT = static_cast<int>(k_cache.shape[1]), HS = at.HS;
  const int keys = pos + 1;
  const int64_t blocks = B * NH;
  if (blocks == 0 || HS == 0) return;
  if (blocks > 0x7fffffff) throw std::runtime_error("attention_decode: too many blocks for one launch");
  // The head's query, at most a few KiB: HS floats (48 KiB would need HS = 12288).
  const size_t smem = sizeof(float) * static_cast<size_t>(HS);
  if (smem > 48 * 1024) throw std::runtime_error("attention_decode: head size " + std::to_string(HS) + " is too large");
  float* weights = attention_work(static_cast<size_t>(blocks) * keys);
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    attention_decode_kernel<S><<<static_cast<unsigned>(blocks), kDecodeThreads, smem, stream_>>>(
        out.as<S>(), weights, qkv.as<S>(), k_cache.as<S>(), v_cache.as<S>(), keys, maxT, at);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
