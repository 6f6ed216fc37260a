// Training and validation windows over a prepared data directory.
#include "engine/io/token_dataset.h"

#include <filesystem>
#include <utility>

#include "engine/io/checksum.h"
#include "engine/config.h"
#include "engine/rng.h"

namespace tt {

namespace {

// "train.bin holds 40 tokens; --seq 64 needs at least 65 (one window of seq + 1)"
void require_window(const TokenShard& shard, int T) {
  if (static_cast<int64_t>(shard.tokens().size()) < static_cast<int64_t>(T) + 1)
    throw InputError(shard.path() + ": holds " + std::to_string(shard.tokens().size()) + " tokens; --seq " +
                     std::to_string(T) + " needs at least " + std::to_string(T + 1) + " (one window of seq + 1)");
}

std::string shard_identity(const TokenShard& shard) {
  Checksum sum;
  sum.add(shard.tokens().data(), shard.tokens().size() * sizeof(uint16_t));
  return "{\"tokens\":" + std::to_string(shard.tokens().size()) + ",\"fnv1a\":\"" + sum.hex() + "\"}";
}

// x, y of one row: the window of T + 1 tokens starting at `start`.
void copy_window(const std::vector<uint16_t>& tokens, int64_t start, int T, int32_t* x, int32_t* y) {
  for (int t = 0; t < T; ++t) {
    x[t] = tokens[static_cast<size_t>(start + t)];
    y[t] = tokens[static_cast<size_t>(start + t + 1)];
  }
}

}  // namespace

TokenDataset::TokenDataset(std::string dir, TokenShard train, TokenShard val, std::string identity)
    : dir_(std::move(dir)), train_(std::move(train)), val_(std::move(val)), identity_(std::move(identity)) {}

int TokenDataset::tokenizer_vocab_size(const std::string& dir) { return load_tokenizer(dir)->vocab_size(); }

TokenDataset TokenDataset::open(const std::string& dir, int vocab_size, int T) {
  std::error_code ec;
  const std::string absolute = std::filesystem::absolute(dir, ec).lexically_normal().string();
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(dir);
  if (tokenizer->vocab_size() > vocab_size)
    throw InputError("--data " + dir + ": its tokenizer has " + std::to_string(tokenizer->vocab_size()) +
                     " ids but the model's --vocab-size is " + std::to_string(vocab_size));
  TokenShard train = TokenShard::open(dir + "/train.bin", vocab_size);
  TokenShard val = TokenShard::open(dir + "/val.bin", vocab_size);
  require_window(train, T);
  require_window(val, T);
  const std::string identity = "{\"tokenizer\":" + tokenizer_json(*tokenizer) + ",\"train\":" + shard_identity(train) +
                               ",\"val\":" + shard_identity(val) + "}";
  return TokenDataset(ec ? dir : absolute, std::move(train), std::move(val), identity);
}

void TokenDataset::train_batch(uint64_t seed, uint32_t step, int B, int T, int32_t* x, int32_t* y) const {
  const int64_t starts = static_cast<int64_t>(train_.tokens().size()) - T;  // [0, n - T - 1]
  for (int r = 0; r < B; ++r) {
    const int64_t start = rng_below64(seed, RngStream::Windows, step, static_cast<uint64_t>(r), starts);
    copy_window(train_.tokens(), start, T, x + static_cast<int64_t>(r) * T, y + static_cast<int64_t>(r) * T);
  }
}

void TokenDataset::val_batch(int k, int batches, int B, int T, int32_t* x, int32_t* y) const {
  const int64_t windows = static_cast<int64_t>(batches) * B;
  const int64_t last_start = static_cast<int64_t>(val_.tokens().size()) - T - 1;
  const int64_t gaps = windows > 1 ? windows - 1 : 1;
  for (int r = 0; r < B; ++r) {
    const int64_t j = static_cast<int64_t>(k) * B + r;
    // (j <= M - 1 and last_start < 2^31: the product fits int64 for any M below 2^32)
    copy_window(val_.tokens(), j * last_start / gaps, T, x + static_cast<int64_t>(r) * T,
                y + static_cast<int64_t>(r) * T);
  }
}

}  // namespace tt
