// Batches of token ids: the seed workload's random tokens, and the range check that every
// batch passes before it reaches a backend.
#pragma once
#include <cstdint>
#include <string>

namespace tt {

// x and y (B*T each): uniform random ids in [0, vocab) for training step `step`.
void random_batch(uint64_t seed, uint32_t step, int B, int T, int vocab, int32_t* x, int32_t* y);

// Throws InputError "<what>: token id <id> at index <i> is outside [0, vocab)" for the first bad id.
void check_token_ids(const int32_t* ids, int64_t n, int vocab, const std::string& what);

}  // namespace tt
