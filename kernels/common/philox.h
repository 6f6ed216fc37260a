// Philox4x32-10 counter-based RNG (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC11) and the dropout mask built on it. A counter-based generator has no state:
// the random bits of element i are a pure function of (key, counter), so forward, backward,
// recompute and resume all see the same mask, on the CPU and on the GPU.
#pragma once
#include <cstdint>

#include "kernels/common/host_device.h"

namespace tt {

struct Philox4 {
  uint32_t v[4];
};

TT_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  uint64_t product = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(product >> 32);
  *lo = static_cast<uint32_t>(product);
}

// counter (4 words) and key (2 words) -> 4 random words; 10 rounds with the key bumped
// between rounds, as Random123's philox4x32_R(10, ...).
TT_HD Philox4 philox4x32_10(Philox4 ctr, uint32_t key0, uint32_t key1) {
  const uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  const uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kMul0, ctr.v[0], &hi0, &lo0);
    philox_mulhilo(kMul1, ctr.v[2], &hi1, &lo1);
    Philox4 next = {{hi1 ^ ctr.v[1] ^ key0, lo1, hi0 ^ ctr.v[3] ^ key1, lo0}};
    ctr = next;
  }
  return ctr;
}

// Where a dropout mask is used: one site per dropout in a layer.
// LoraInput + i: the input of a layer's LoRA target i (engine/lora.h), one mask per adapter as
// PEFT's per-module lora_dropout draws.
enum class DropoutSite : uint32_t { AttentionWeights = 0, AttentionOutput = 1, FfnHidden = 2, FfnOutput = 3,
                                    LoraInput = 4 };

// Identifies one dropout mask: mask = f(seed, step, layer, site, element index).
struct DropoutKey {
  uint64_t seed;
  uint32_t step;
  uint32_t layer;
  DropoutSite site;
};

// A dropout as ops receive it. The training step is read from backend memory when the op
// runs (device memory on CUDA), not baked in when it is enqueued, so one captured CUDA graph
// serves every step: the trainer writes the step there with the batch.
struct DropoutMask {
  float p;               // drop probability; 0 is the identity
  uint64_t seed;
  const uint32_t* step;  // backend memory
  uint32_t layer;
  DropoutSite site;
  // Added to every element index: a micro-batch that holds rows [r, r + n) of the full batch
  // draws the masks those rows have in the full batch (gradient accumulation).
  uint64_t index_offset = 0;

  TT_HD DropoutKey key() const { return DropoutKey{seed, *step, layer, site}; }
};

// No dropout (p 0): an op that takes a mask and must not draw one.
inline constexpr DropoutMask kNoDropout{0.0f, 0, nullptr, 0, DropoutSite::FfnHidden};

// The Philox output that serves elements 4*group .. 4*group+3 of the mask named by `key`:
// one Philox call feeds four consecutive elements, one 32-bit lane each.
TT_HD Philox4 dropout_bits4(const DropoutKey& key, uint64_t group) {
  Philox4 ctr = {{static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32),
                  (key.layer << 8) | static_cast<uint32_t>(key.site), key.step}};
  return philox4x32_10(ctr, static_cast<uint32_t>(key.seed), static_cast<uint32_t>(key.seed >> 32));
}

// A 32-bit lane -> uniform in [0, 1) with its top 24 bits (exact in fp32).
TT_HD float uniform_from_bits(uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }

// Uniform in [0, 1) for element `index` of the mask named by `key`.
TT_HD float dropout_uniform(const DropoutKey& key, uint64_t index) {
  return uniform_from_bits(dropout_bits4(key, index >> 2).v[index & 3]);
}

// Inverted dropout, the one rule every backend applies: an element whose 32-bit word maps
// below p is dropped (factor 0), any other is kept and scaled by keep_scale = 1/(1-p).
TT_HD float dropout_factor(uint32_t bits, float p, float keep_scale) {
  return uniform_from_bits(bits) < p ? 0.0f : keep_scale;
}

// The factor that multiplies element `index` of the mask named by `key`.
TT_HD float dropout_scale(const DropoutKey& key, uint64_t index, float p) {
  return dropout_factor(dropout_bits4(key, index >> 2).v[index & 3], p, 1.0f / (1.0f - p));
}

}  // namespace tt
