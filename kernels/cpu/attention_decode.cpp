// Incremental decoding with a KV cache (CPU): the attention of ONE new token per sequence
// over the keys and values of every earlier position, kept from earlier steps in a cache, so
// a token costs O(t) work instead of recomputing the whole O(t^2) prefix. Inference only: no
// dropout, no backward, nothing kept for one.
//
// attention_decode computes, for the new token, exactly what attention_forward
// (attention.cpp) computes for row t of a causal sequence, in the same order: the same
// scaled dot products, the same max, exp and sum, the same weighted sum of v in key order.
// Given the same q, k and v, its output is the same bits as that row of the full forward.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"

namespace tt {

// qkv (B,C+2KC) -> k_cache[:,pos,:] = k, v_cache[:,pos,:] = v; caches (B,maxT,KC)
void CpuBackend::kv_cache_append(Tensor k_cache, Tensor v_cache, Tensor qkv, int pos) {
  check_decode_views("kv_cache_append", k_cache, v_cache, qkv, pos, 0);
  // A copy of stored values: no rounding, so the storage type only sets the element size.
  const int64_t B = qkv.shape[0], W = qkv.shape[1], maxT = k_cache.shape[1], KC = k_cache.shape[2];
  const size_t elem = dtype_size(qkv.dtype), row = static_cast<size_t>(KC) * elem;
  const char* x = static_cast<const char*>(qkv.data);
  for (int64_t b = 0; b < B; ++b) {
    const size_t k = static_cast<size_t>(b * W + W - 2 * KC) * elem;  // k of sequence b (after its q); v at +KC
    const size_t dst = static_cast<size_t>(b * maxT + pos) * row;      // (b, pos, 0) of a cache
    std::memcpy(static_cast<char*>(k_cache.data) + dst, x + k, row);
    std::memcpy(static_cast<char*>(v_cache.data) + dst, x + k + row, row);
  }
}

// qkv (B,C+2KC) (q part), k_cache, v_cache (B,maxT,KC) filled for [0,pos] -> out (B,C)
void CpuBackend::attention_decode(Tensor out, Tensor qkv, Tensor k_cache, Tensor v_cache, int pos, int NH) {
  const QkvLayout at = check_decode_views("attention_decode", k_cache, v_cache, qkv, pos, NH);
  Fp32Scope fp32({&out, &qkv, &k_cache, &v_cache});  // bf16/fp16 storage: see storage.h
  const int B = static_cast<int>(qkv.shape[0]), maxT = static_cast<int>(k_cache.shape[1]);
  const int64_t C = at.q_width(), KC = at.kv_width(), W = at.width();
  const int HS = at.HS;
  const int keys = pos + 1;  // the new token sees itself and every earlier position
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const float* x = qkv.f32();
  const float* K = k_cache.f32();
  const float* V = v_cache.f32();
  float* o = out.f32();
#pragma omp parallel for collapse(2)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      std::vector<float> weight(keys);  // scores, then softmax weights, of this (b,h)
      const float* q = x + b * W + at.q(h);
      // position t2 of the key/value head query head h reads, in a cache (B,maxT,KC)
      auto cached = [&](const float* cache, int t2) {
        return cache + (static_cast<int64_t>(b) * maxT + t2) * KC + at.kv_head(h) * HS;
      };
      float max_score = -INFINITY;
      for (int t2 = 0; t2 < keys; ++t2) {
        const float* k = cached(K, t2);
        float dot = 0.0f;
        for (int d = 0; d < HS; ++d) dot += (q[d] * scale) * k[d];
        weight[t2] = dot;
        max_score = std::fmax(max_score, dot);
      }
      float sum = 0.0f;
      for (int t2 = 0; t2 < keys; ++t2) {
        weight[t2] = std::exp(weight[t2] - max_score);
        sum += weight[t2];
      }
      const float inv_sum = 1.0f / sum;
      for (int t2 = 0; t2 < keys; ++t2) weight[t2] *= inv_sum;

      float* orow = o + static_cast<int64_t>(b) * C + h * HS;
      for (int d = 0; d < HS; ++d) orow[d] = 0.0f;
      for (int t2 = 0; t2 < keys; ++t2) {
        const float* v = cached(V, t2);
        for (int d = 0; d < HS; ++d) orow[d] += weight[t2] * v[d];
      }
    }
  }
}

}  // namespace tt
