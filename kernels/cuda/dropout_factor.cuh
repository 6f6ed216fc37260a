// Dropout factors on the GPU, drawn two ways: element by element for the elementwise kernels
// (dropout, the FFN's activation-dropout pair, SwiGLU), and 32 at a time for the row kernels
// (LayerNorm's fused residual forms, attention) whose lanes stride a row by the warp. The rule
// and the bits are kernels/common/philox.h's, so the factors are dropout_forward's and the CPU
// backend's, bit for bit.
#pragma once
#include <cstdint>

#include "kernels/common/philox.h"
#include "kernels/cuda/warp.cuh"

namespace tt {

// The factor (0 or keep_scale) of mask element start + lane of the mask named by `key`. All 32
// lanes must call. 32 consecutive elements span at most 9 Philox groups of four, so lanes 0..8
// run Philox once each and shuffles hand every lane its 32-bit word: one Philox call per four
// elements, as dropout_forward, instead of one per element.
__device__ __forceinline__ float warp_dropout_factor(const DropoutKey& key, uint64_t start, float p,
                                                     float keep_scale, int lane) {
  const uint64_t first_group = start >> 2;
  Philox4 bits = {{0u, 0u, 0u, 0u}};
  if (lane < 9) bits = dropout_bits4(key, first_group + lane);
  const uint64_t element = start + static_cast<uint64_t>(lane);
  const int src = static_cast<int>((element >> 2) - first_group);  // 0..8
  const int word = static_cast<int>(element & 3);
  const uint32_t w0 = __shfl_sync(kFullMask, bits.v[0], src);
  const uint32_t w1 = __shfl_sync(kFullMask, bits.v[1], src);
  const uint32_t w2 = __shfl_sync(kFullMask, bits.v[2], src);
  const uint32_t w3 = __shfl_sync(kFullMask, bits.v[3], src);
  const uint32_t w = word == 0 ? w0 : word == 1 ? w1 : word == 2 ? w2 : w3;
  return dropout_factor(w, p, keep_scale);
}

// The grid-stride walk of the elementwise kernels: element(i, factor) for every element i < n
// of a tensor under `mask` (element i is mask element index_offset + i, so the groups are the
// mask's whatever the offset), one thread per group of 4 consecutive mask elements: one Philox
// call gives the group's 4 words, one 32-bit lane per element, as dropout_uniform defines them.
// p == 0 draws nothing: every factor is 1 (exact). The training step is read from device memory
// (DropoutMask::key() dereferences mask.step) when the kernel runs, so a captured graph sees the
// step the trainer wrote for this step.
template <typename Element>
__device__ __forceinline__ void for_each_dropout_element(int64_t n, const DropoutMask& mask, Element element) {
  const float p = mask.p;
  const DropoutKey key = p > 0.0f ? mask.key() : DropoutKey{};
  const float keep_scale = 1.0f / (1.0f - p);
  const uint64_t first = mask.index_offset;
  const int64_t first_group = static_cast<int64_t>(first >> 2);
  const int64_t groups = static_cast<int64_t>((first + n + 3) >> 2) - first_group;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Philox4 bits = {{0u, 0u, 0u, 0u}};
    if (p > 0.0f) bits = dropout_bits4(key, static_cast<uint64_t>(first_group + g));
#pragma unroll
    for (int lane = 0; lane < 4; ++lane) {
      const int64_t i = 4 * (first_group + g) + lane - static_cast<int64_t>(first);
      if (i >= 0 && i < n) element(i, p > 0.0f ? dropout_factor(bits.v[lane], p, keep_scale) : 1.0f);
    }
  }
}

}  // namespace tt
