// CPU helper: the dropout factors of a contiguous index range, with one Philox call per four
// elements (the per-element dropout_scale would call Philox four times as often).
#pragma once
#include <cstdint>

#include "kernels/common/philox.h"

namespace tt {

// out[i] = dropout_scale(key, start + i, p) for i in [0, count)
inline void dropout_scales(const DropoutKey& key, uint64_t start, int64_t count, float p, float* out) {
  const float keep_scale = 1.0f / (1.0f - p);
  uint64_t index = start;
  const uint64_t end = start + static_cast<uint64_t>(count);
  while (index < end) {
    const Philox4 bits = dropout_bits4(key, index >> 2);
    for (uint64_t lane = index & 3; lane < 4 && index < end; ++lane, ++index)
      out[index - start] = dropout_factor(bits.v[lane], p, keep_scale);
  }
}

}  // namespace tt
