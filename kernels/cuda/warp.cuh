// Warp-level reductions shared by the row kernels (attention, layernorm, cross-entropy).
// Butterfly reductions: lane pairs combine the same two values (IEEE add and max commute), so
// every lane ends with bitwise the same result, and the order is fixed: deterministic.
#pragma once

namespace tt {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

}  // namespace tt
