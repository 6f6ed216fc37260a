// Token shards: the training and validation tokens of a toy language model, in llm.c's
// format, so that shards made by llm.c's scripts (dev/data/*.py) train here and ours there.
//
//   header  256 x int32, little-endian: [0] magic 20240520, [1] version 1, [2] token count;
//           the rest zero
//   tokens  count x uint16, little-endian
//
// The file size is exactly 1024 + 2 x count. uint16 caps the vocabulary at 65536 ids, plenty
// for the tokenizers of data/tokenizer.h. A shard is untrusted input (docs/hostile-input.md):
// the reader checks the header against the file's size before it allocates anything and
// every token against the vocabulary before it returns.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tt {

constexpr int32_t kTokenShardMagic = 20240520;
constexpr int32_t kTokenShardVersion = 1;
constexpr size_t kTokenShardHeaderBytes = 256 * sizeof(int32_t);

// Writes tokens as a shard, atomically (data/file_io.h). Throws std::invalid_argument for a
// token outside [0, 65536) or more than INT32_MAX tokens (the header's count is an int32):
// the caller's bug, since tokens come from a tokenizer whose vocabulary was checked.
void write_token_shard(const std::string& path, const std::vector<int32_t>& tokens);

// A shard read whole and checked. Every error is one InputError "<path>: <problem>".
class TokenShard {
 public:
  // Reads the shard at `path`. Checked in this order, each before anything is allocated
  // from the file's numbers: a regular file; at least the 1024-byte header; the magic; the
  // version; count >= 1; file size == 1024 + 2 x count. Then every token < vocab_size
  // (vocab_size in [1, 65536]).
  static TokenShard open(const std::string& path, int vocab_size);
  // The same checks on a shard already in memory (`where` names it in errors): the fuzz
  // target's entry point.
  static TokenShard parse(const std::string& where, const char* bytes, size_t size, int vocab_size);

  const std::string& path() const { return path_; }
  const std::vector<uint16_t>& tokens() const { return tokens_; }

 private:
  std::string path_;
  std::vector<uint16_t> tokens_;
};

}  // namespace tt
