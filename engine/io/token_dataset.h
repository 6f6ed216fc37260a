// A prepared data directory (`tinytrain prepare`, data/prepare.h) as batches for `train --data`:
// random training windows that are a pure function of (seed, step, row), and fixed validation
// windows. docs/toy-lm.md, "Training on data".
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

#include "data/token_shard.h"
#include "data/tokenizer.h"

namespace tt {

class TokenDataset {
 public:
  // Reads DIR/tokenizer.json, DIR/train.bin and DIR/val.bin, every token checked against the
  // model's vocabulary; each shard must hold at least T + 1 tokens (one window). Errors are one
  // InputError naming the file.
  static TokenDataset open(const std::string& dir, int vocab_size, int T);
  // The vocabulary of DIR's tokenizer (what --vocab-size defaults to with --data).
  static int tokenizer_vocab_size(const std::string& dir);

  // x, y (B*T each): the training windows of step `step`, rows [0, B) of the global batch.
  void train_batch(uint64_t seed, uint32_t step, int B, int T, int32_t* x, int32_t* y) const;
  // x, y (B*T each): validation batch k of `batches` (windows k B .. k B + B - 1 of the M).
  void val_batch(int k, int batches, int B, int T, int32_t* x, int32_t* y) const;

  // What a checkpoint records so that a run never resumes on other data: each shard's token
  // count and FNV-1a hash, and the tokenizer (JSON text, compared on resume).
  const std::string& identity() const { return identity_; }
  const std::string& dir() const { return dir_; }  // absolute
  int64_t train_tokens() const { return static_cast<int64_t>(train_.tokens().size()); }
  int64_t val_tokens() const { return static_cast<int64_t>(val_.tokens().size()); }

 private:
  TokenDataset(std::string dir, TokenShard train, TokenShard val, std::string identity);
  std::string dir_;
  TokenShard train_, val_;
  std::string identity_;
};

}  // namespace tt
