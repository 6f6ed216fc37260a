// Host-side random numbers for initialisation and synthetic data, built on the same
// counter-based Philox as dropout: value i of stream s is a pure function of (seed, s, i),
// so results do not depend on thread count or call order.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/common/philox.h"

namespace tt {

// Streams keep initialisation, data and dropout independent for one seed: Data, the seed
// workload's random tokens; Windows, the training windows of `train --data`.
enum class RngStream : uint32_t { Init = 0x1217, Data = 0xDA7A, Windows = 0x3A1D,
                                  // `tinytrain sample`'s draws: id = the sample's index, index = the
                                  // position of the token drawn
                                  Sample = 0x5A3E };

// The four Philox words of value `index` of (seed, stream, id).
inline Philox4 rng_bits(uint64_t seed, RngStream stream, uint32_t id, uint64_t index) {
  Philox4 ctr = {{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), id,
                  static_cast<uint32_t>(stream)}};
  return philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Uniform in [0, 1) with 24 random bits; lane selects one of Philox's four words.
inline float rng_uniform(uint64_t seed, RngStream stream, uint32_t id, uint64_t index, int lane = 0) {
  return uniform_from_bits(rng_bits(seed, stream, id, index).v[lane]);
}

// Standard normal by Box-Muller from two lanes of one Philox call.
inline float rng_normal(uint64_t seed, RngStream stream, uint32_t id, uint64_t index) {
  double u1 = rng_uniform(seed, stream, id, index, 0) + 0.5 / 16777216.0;  // in (0, 1): log is finite
  double u2 = rng_uniform(seed, stream, id, index, 1);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

// Integer in [0, n) (n well below 2^24, so the bias of scaling 24 bits is negligible).
inline int32_t rng_below(uint64_t seed, RngStream stream, uint32_t id, uint64_t index, int32_t n) {
  const uint32_t bits = rng_bits(seed, stream, id, index).v[0];
  return static_cast<int32_t>((static_cast<uint64_t>(bits) * static_cast<uint64_t>(n)) >> 32);
}

// Integer in [0, n) for any n up to 2^63, from 64 random bits (two Philox words): the bias of
// scaling 64 bits to n values is below n / 2^64, nothing for a token shard's window starts.
inline int64_t rng_below64(uint64_t seed, RngStream stream, uint32_t id, uint64_t index, int64_t n) {
  const Philox4 bits = rng_bits(seed, stream, id, index);
  const uint64_t word = (static_cast<uint64_t>(bits.v[1]) << 32) | bits.v[0];
  return static_cast<int64_t>((static_cast<unsigned __int128>(word) * static_cast<uint64_t>(n)) >> 64);
}

}  // namespace tt
