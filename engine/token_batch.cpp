// Synthetic batches and token-id validation.
#include "engine/token_batch.h"

#include "engine/config.h"
#include "engine/rng.h"

namespace tt {

void random_batch(uint64_t seed, uint32_t step, int B, int T, int vocab, int32_t* x, int32_t* y) {
  const int64_t n = static_cast<int64_t>(B) * T;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = rng_below(seed, RngStream::Data, 2 * step, i, vocab);
    y[i] = rng_below(seed, RngStream::Data, 2 * step + 1, i, vocab);
  }
}

void check_token_ids(const int32_t* ids, int64_t n, int vocab, const std::string& what) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      throw InputError(what + ": token id " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                       " is outside [0, " + std::to_string(vocab) + ")");
}

}  // namespace tt
