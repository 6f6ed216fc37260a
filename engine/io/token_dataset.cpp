// Training and validation windows over a prepared data directory.
#include "engine/io/token_dataset.h"

#include <filesystem>
#include <utility>

#include "data/llmc_shards.h"
#include "engine/io/checksum.h"
#include "engine/config.h"
#include "engine/rng.h"

namespace tt {

namespace {

// "train.bin holds 40 tokens; --seq 64 needs at least 65 (one window of seq + 1)"
void require_window(const std::string& what, const std::vector<uint16_t>& tokens, int T) {
  if (static_cast<int64_t>(tokens.size()) < static_cast<int64_t>(T) + 1)
    throw InputError(what + ": holds " + std::to_string(tokens.size()) + " tokens; --seq " + std::to_string(T) +
                     " needs at least " + std::to_string(T + 1) + " (one window of seq + 1)");
}

std::string shard_identity(const TokenShard& shard) {
  Checksum sum;
  sum.add(shard.tokens().data(), shard.tokens().size() * sizeof(uint16_t));
  return "{\"tokens\":" + std::to_string(shard.tokens().size()) + ",\"fnv1a\":\"" + sum.hex() + "\"}";
}

// The shards at `paths`, read and checked one by one, as one stream; `identity` gets each
// shard's identity, comma-separated.
std::vector<uint16_t> read_stream(const std::vector<std::string>& paths, int vocab_size, std::string& identity) {
  std::vector<uint16_t> tokens;
  for (const std::string& path : paths) {
    const TokenShard shard = TokenShard::open(path, vocab_size);
    tokens.insert(tokens.end(), shard.tokens().begin(), shard.tokens().end());
    identity += (identity.empty() ? "" : ",") + shard_identity(shard);
  }
  return tokens;
}

// x, y of one row: the window of T + 1 tokens starting at `start`.
void copy_window(const std::vector<uint16_t>& tokens, int64_t start, int T, int32_t* x, int32_t* y) {
  for (int t = 0; t < T; ++t) {
    x[t] = tokens[static_cast<size_t>(start + t)];
    y[t] = tokens[static_cast<size_t>(start + t + 1)];
  }
}

}  // namespace

TokenDataset::TokenDataset(std::string dir, std::vector<uint16_t> train, std::vector<uint16_t> val,
                           std::string identity, bool has_tokenizer)
    : dir_(std::move(dir)),
      train_(std::move(train)),
      val_(std::move(val)),
      identity_(std::move(identity)),
      has_tokenizer_(has_tokenizer) {}

int TokenDataset::tokenizer_vocab_size(const std::string& dir) {
  if (!has_tokenizer_json(dir)) {
    find_llmc_shards(dir);  // a directory with neither says so first
    throw InputError("--data " + dir + ": llm.c shards carry no vocabulary: give --vocab-size (GPT-2's 50257 ids, " +
                     "or 50304 as llm.c pads them)");
  }
  return load_tokenizer(dir)->vocab_size();
}

TokenDataset TokenDataset::open(const std::string& dir, int vocab_size, int T) {
  std::error_code ec;
  const std::string absolute = std::filesystem::absolute(dir, ec).lexically_normal().string();
  std::string train_id, val_id, source;
  std::vector<uint16_t> train, val;
  const bool prepared = has_tokenizer_json(dir);
  if (prepared) {
    const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(dir);
    if (tokenizer->vocab_size() > vocab_size)
      throw InputError("--data " + dir + ": its tokenizer has " + std::to_string(tokenizer->vocab_size()) +
                       " ids but the model's --vocab-size is " + std::to_string(vocab_size));
    train = read_stream({dir + "/train.bin"}, vocab_size, train_id);
    val = read_stream({dir + "/val.bin"}, vocab_size, val_id);
    require_window(dir + "/train.bin", train, T);
    require_window(dir + "/val.bin", val, T);
    source = "\"tokenizer\":" + tokenizer_json(*tokenizer);
  } else {
    const LlmcShards shards = find_llmc_shards(dir);
    train = read_stream(shards.train, vocab_size, train_id);
    val = read_stream(shards.val, vocab_size, val_id);
    require_window("--data " + dir + ": its train shards", train, T);
    require_window("--data " + dir + ": its val shards", val, T);
    source = "\"llmc_vocab_size\":" + std::to_string(vocab_size);
  }
  // One shard: its identity as before (checkpoints of prepared directories resume unchanged);
  // several: a list.
  auto stream_id = [](const std::string& ids) { return ids.find("},{") == std::string::npos ? ids : "[" + ids + "]"; };
  const std::string identity = "{" + source + ",\"train\":" + stream_id(train_id) + ",\"val\":" + stream_id(val_id) + "}";
  return TokenDataset(ec ? dir : absolute, std::move(train), std::move(val), identity, prepared);
}

void TokenDataset::train_batch(uint64_t seed, uint32_t step, int B, int T, int32_t* x, int32_t* y) const {
  const int64_t starts = static_cast<int64_t>(train_.size()) - T;  // [0, n - T - 1]
  for (int r = 0; r < B; ++r) {
    const int64_t start = rng_below64(seed, RngStream::Windows, step, static_cast<uint64_t>(r), starts);
    copy_window(train_, start, T, x + static_cast<int64_t>(r) * T, y + static_cast<int64_t>(r) * T);
  }
}

void TokenDataset::val_batch(int k, int batches, int B, int T, int32_t* x, int32_t* y) const {
  const int64_t windows = static_cast<int64_t>(batches) * B;
  const int64_t last_start = static_cast<int64_t>(val_.size()) - T - 1;
  const int64_t gaps = windows > 1 ? windows - 1 : 1;
  for (int r = 0; r < B; ++r) {
    const int64_t j = static_cast<int64_t>(k) * B + r;
    // (j <= M - 1 and last_start < 2^31: the product fits int64 for any M below 2^32)
    copy_window(val_, j * last_start / gaps, T, x + static_cast<int64_t>(r) * T,
                y + static_cast<int64_t>(r) * T);
  }
}

}  // namespace tt
