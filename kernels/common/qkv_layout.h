// Where each head's q, k and v sit in a token's packed qkv row, shared by every attention
// kernel (CPU, flash, naive, decode) and by RoPE. A row is [q heads | k heads | v heads]:
// NH query heads, then KVH key heads, then KVH value heads, HS channels each. With KVH = NH
// that is nn.MultiheadAttention's in_proj output [q | k | v] of C each; with fewer key/value
// heads (grouped-query attention, Llama's n_kv_heads) query head h shares key/value head
// h / (NH / KVH) with the other heads of its group.
#pragma once
#include <cstdint>

#include "kernels/common/host_device.h"

namespace tt {

struct QkvLayout {
  int NH = 0, KVH = 0, HS = 0;  // query heads, key/value heads (dividing NH), channels per head

  TT_HD int group() const { return NH / KVH; }                          // query heads per key/value head
  TT_HD int kv_head(int h) const { return h / group(); }                // the key/value head query head h reads
  TT_HD int64_t width() const { return static_cast<int64_t>(NH + 2 * KVH) * HS; }  // one token's row
  TT_HD int64_t q_width() const { return static_cast<int64_t>(NH) * HS; }         // C: the attention output's row
  TT_HD int64_t kv_width() const { return static_cast<int64_t>(KVH) * HS; }       // a KV cache's row
  // offsets within a row: query head h, and the key and value heads query head h reads
  TT_HD int64_t q(int h) const { return static_cast<int64_t>(h) * HS; }
  TT_HD int64_t k(int h) const { return q_width() + static_cast<int64_t>(kv_head(h)) * HS; }
  TT_HD int64_t v(int h) const { return q_width() + kv_width() + static_cast<int64_t>(kv_head(h)) * HS; }
};

}  // namespace tt
