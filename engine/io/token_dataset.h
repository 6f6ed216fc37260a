// A data directory as batches for `train --data`: a prepared one (`tinytrain prepare`,
// data/prepare.h: tokenizer.json, train.bin, val.bin), or one of llm.c's shards (data/
// llmc_shards.h: *train*.bin and *val*.bin, each kind read in name order as one stream, the
// vocabulary from --vocab-size). Random training windows that are a pure function of (seed,
// step, row), and fixed validation windows. docs/toy-lm.md, "Training on data".
//
//   training   step s, global row r: a start o drawn uniformly from [0, n_train - T - 1] by the
//              counter-based generator keyed by (seed, s, r); x = train[o, o+T), y = train[o+1,
//              o+T+1). A resumed run, and every rank of a data-parallel one, sees the rows of
//              the uninterrupted single-process run: no generator state to save or share.
//   validation M = eval_batches x B windows spread evenly over val.bin: window j starts at
//              j (n_val - T - 1) / max(M - 1, 1) (integer division), the same windows at every
//              evaluation, so val losses of one run compare step to step.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/token_shard.h"
#include "data/tokenizer.h"

namespace tt {

class TokenDataset {
 public:
  // Reads DIR/tokenizer.json, DIR/train.bin and DIR/val.bin, or without tokenizer.json DIR's
  // llm.c shards; every token checked against the model's vocabulary; each stream must hold at
  // least T + 1 tokens (one window). Errors are one InputError naming the file.
  static TokenDataset open(const std::string& dir, int vocab_size, int T);
  // The vocabulary of DIR's tokenizer (what --vocab-size defaults to with --data). An llm.c
  // directory has none: an InputError asking for --vocab-size.
  static int tokenizer_vocab_size(const std::string& dir);

  // x, y (B*T each): the training windows of step `step`, rows [0, B) of the global batch.
  void train_batch(uint64_t seed, uint32_t step, int B, int T, int32_t* x, int32_t* y) const;
  // x, y (B*T each): validation batch k of `batches` (windows k B .. k B + B - 1 of the M).
  void val_batch(int k, int batches, int B, int T, int32_t* x, int32_t* y) const;

  // What a checkpoint records so that a run never resumes on other data: each shard's token
  // count and FNV-1a hash, and the tokenizer (JSON text, compared on resume).
  const std::string& identity() const { return identity_; }
  const std::string& dir() const { return dir_; }  // absolute
  int64_t train_tokens() const { return static_cast<int64_t>(train_.size()); }
  int64_t val_tokens() const { return static_cast<int64_t>(val_.size()); }
  // Whether DIR is a prepared directory with a tokenizer (false: llm.c shards, no tokenizer).
  bool has_tokenizer() const { return has_tokenizer_; }

 private:
  TokenDataset(std::string dir, std::vector<uint16_t> train, std::vector<uint16_t> val, std::string identity,
               bool has_tokenizer);
  std::string dir_;
  std::vector<uint16_t> train_, val_;  // each stream's tokens, its shards in order
  std::string identity_;
  bool has_tokenizer_;
};

}  // namespace tt
