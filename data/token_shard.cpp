// llm.c's token-shard format: writer and checked reader (see token_shard.h).
#include "data/token_shard.h"

#include <climits>
#include <cstring>
#include <stdexcept>

#include "data/file_io.h"
#include "base/input_error.h"

namespace tt {
namespace {

// The int32 at position i of the header, assembled byte by byte (little-endian on any host).
int32_t header_int(const unsigned char* header, int i) {
  uint32_t v = 0;
  for (int b = 3; b >= 0; --b) v = (v << 8) | header[4 * i + b];
  return static_cast<int32_t>(v);
}

void put_header_int(unsigned char* header, int i, int32_t value) {
  const uint32_t v = static_cast<uint32_t>(value);
  for (int b = 0; b < 4; ++b) header[4 * i + b] = static_cast<unsigned char>(v >> (8 * b));
}

// The header's checks against the file's size; returns the token count. `header` is read
// only once the file is known to hold all 1024 bytes of it.
int64_t checked_token_count(const std::string& where, const unsigned char* header, uint64_t file_size) {
  if (file_size < kTokenShardHeaderBytes)
    throw InputError(where + ": truncated: the file has " + std::to_string(file_size) + " bytes, fewer than the " +
                     std::to_string(kTokenShardHeaderBytes) + "-byte header of a token shard");
  const int32_t magic = header_int(header, 0), version = header_int(header, 1), count = header_int(header, 2);
  if (magic != kTokenShardMagic)
    throw InputError(where + ": not a token shard: magic " + std::to_string(magic) + ", expected " +
                     std::to_string(kTokenShardMagic));
  if (version != kTokenShardVersion)
    throw InputError(where + ": token shard version " + std::to_string(version) + ", expected " +
                     std::to_string(kTokenShardVersion));
  if (count < 1) throw InputError(where + ": the header's token count is " + std::to_string(count) + ", expected >= 1");
  // 64-bit arithmetic: 1024 + 2 x INT32_MAX cannot overflow it.
  const uint64_t expected = kTokenShardHeaderBytes + 2 * static_cast<uint64_t>(count);
  if (file_size != expected)
    throw InputError(where + ": the header's token count " + std::to_string(count) + " needs a file of " +
                     std::to_string(expected) + " bytes; the file has " + std::to_string(file_size));
  return count;
}

void check_vocab_size(const std::string& where, int vocab_size) {
  if (vocab_size < 1 || vocab_size > 65536)
    throw InputError(where + ": vocabulary size " + std::to_string(vocab_size) + " is outside [1, 65536]");
}

// The first token >= vocab_size, named with its index.
void check_tokens(const std::string& where, const std::vector<uint16_t>& tokens, int vocab_size) {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] >= vocab_size)
      throw InputError(where + ": token " + std::to_string(i) + " is " + std::to_string(tokens[i]) +
                       ", outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
}

}  // namespace

void write_token_shard(const std::string& path, const std::vector<int32_t>& tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX))
    throw std::invalid_argument(path + ": " + std::to_string(tokens.size()) + " tokens do not fit one shard");
  std::string bytes(kTokenShardHeaderBytes + 2 * tokens.size(), '\0');
  unsigned char* out = reinterpret_cast<unsigned char*>(bytes.data());
  put_header_int(out, 0, kTokenShardMagic);
  put_header_int(out, 1, kTokenShardVersion);
  put_header_int(out, 2, static_cast<int32_t>(tokens.size()));
  unsigned char* token_bytes = out + kTokenShardHeaderBytes;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > 65535)
      throw std::invalid_argument(path + ": token " + std::to_string(i) + " is " + std::to_string(tokens[i]) +
                                  ", outside the uint16 range of a token shard");
    token_bytes[2 * i] = static_cast<unsigned char>(tokens[i] & 0xff);
    token_bytes[2 * i + 1] = static_cast<unsigned char>(tokens[i] >> 8);
  }
  write_file_atomically(path, bytes);
}

TokenShard TokenShard::open(const std::string& path, int vocab_size) {
  check_vocab_size(path, vocab_size);
  RegularFile file(path);
  unsigned char header[kTokenShardHeaderBytes] = {};
  if (file.size() >= kTokenShardHeaderBytes) file.read_exactly(header, sizeof header);
  const int64_t count = checked_token_count(path, header, file.size());
  // Only now, with count x 2 bytes known to be in the file, is anything allocated. The
  // tokens are read as they lie: little-endian, as are the hosts tinytrain runs on (x86-64).
  TokenShard shard;
  shard.path_ = path;
  shard.tokens_.resize(static_cast<size_t>(count));
  file.read_exactly(shard.tokens_.data(), 2 * shard.tokens_.size());
  check_tokens(path, shard.tokens_, vocab_size);
  return shard;
}

TokenShard TokenShard::parse(const std::string& where, const char* bytes, size_t size, int vocab_size) {
  check_vocab_size(where, vocab_size);
  const int64_t count = checked_token_count(where, reinterpret_cast<const unsigned char*>(bytes), size);
  TokenShard shard;
  shard.path_ = where;
  shard.tokens_.resize(static_cast<size_t>(count));
  std::memcpy(shard.tokens_.data(), bytes + kTokenShardHeaderBytes, 2 * shard.tokens_.size());
  check_tokens(where, shard.tokens_, vocab_size);
  return shard;
}

}  // namespace tt
