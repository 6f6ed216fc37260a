// The dropout factor a warp's 32 lanes need for 32 consecutive mask elements, for the row
// kernels (LayerNorm's fused residual forms, attention) whose lanes stride a row by the warp.
// The rule and the bits are kernels/common/philox.h's, so the factors are dropout_forward's
// and the CPU backend's, bit for bit.
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

}  // namespace tt
