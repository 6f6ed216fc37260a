// llm.c's GPT-2 tokenizer file (gpt2_tokenizer.bin, written by llm.c's train_gpt2.py
// write_tokenizer): the byte string of every id, for `sample --tokenizer FILE` to print text
// from a model trained on GPT-2 tokens (llm.c's shards, data/llmc_shards.h).
//
//   header  256 x int32, little-endian: [0] magic 20240328, [1] version 1 or 2, [2] the number
//           of ids N; version 2: [3] the end-of-text id (version 1: N - 1, GPT-2's 50256);
//           the rest zero
//   ids     N times: one byte L (1..255), then the id's L bytes
//
// The file must end right after the last id. It holds no merges, so it decodes only: encode
// is an InputError that points to `sample --prompt-ids`. An untrusted file (docs/hostile-input.md):
// every length is checked against what is left of it before anything is copied.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace tt {

constexpr int32_t kLlmcTokenizerMagic = 20240328;

class LlmcTokenizer : public Tokenizer {
 public:
  // Reads and checks the file; every error is one InputError "<path>: <problem>".
  explicit LlmcTokenizer(const std::string& path);
  // The same checks on bytes already in memory (`where` names them in errors).
  static LlmcTokenizer parse(const std::string& where, const std::string& bytes);

  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  std::vector<int32_t> encode(const std::string& text) const override;  // always an InputError
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::string kind() const override { return "llmc-gpt2"; }
  int32_t end_of_text() const override { return end_of_text_; }

 private:
  LlmcTokenizer() = default;
  std::string path_;
  std::vector<std::string> pieces_;  // id -> its bytes
  int32_t end_of_text_ = 0;
};

}  // namespace tt
