// libFuzzer target: any bytes as a token shard (data/token_shard.h), checked against a byte
// vocabulary and against the largest one a shard can hold.
// The contract under test: whatever the bytes, the only exception is InputError, no sanitizer
// report, no allocation beyond what the bytes hold (run_fuzz.sh sets -malloc_limit_mb), and a
// shard that parses has 1 + its tokens, each below the vocabulary.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "data/token_shard.h"
#include "engine/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tt;
  for (int vocab_size : {256, 65536}) {
    try {
      const TokenShard shard = TokenShard::parse("fuzz-input", reinterpret_cast<const char*>(data), size, vocab_size);
      if (shard.tokens().empty() || kTokenShardHeaderBytes + 2 * shard.tokens().size() != size) std::abort();
      for (uint16_t token : shard.tokens())
        if (token >= vocab_size) std::abort();
    } catch (const InputError&) {
      // the documented outcome for bad input
    }
  }
  return 0;
}
