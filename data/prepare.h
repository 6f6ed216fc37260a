// `tinytrain prepare`: text files in, a directory a toy language model trains from out:
//
//   DIR/train.bin, DIR/val.bin   token shards (data/token_shard.h)
//   DIR/tokenizer.json           which tokenizer made them (data/tokenizer.h)
//   DIR/tokenizer.model          the SentencePiece model, for --tokenizer bpe
//
// Inputs are files and directories (walked recursively in sorted order). Every step is a pure
// function of the inputs and the seed, so the same command writes the same bytes.
// docs/toy-lm.md, "Preparing data", says why each rule is what it is:
//   documents  a file is split at lines holding only "%" (the fortune-file format); a file
//              without such a line is one document; documents of whitespace only are dropped
//   text       a file holding a NUL byte, or more than 1% bytes of invalid UTF-8, is binary:
//              refused when named, skipped (and counted) inside a directory, where symbolic
//              links are skipped too; a few invalid bytes become U+FFFD
//   split      document i goes to val when a uniform draw from (seed, i) is below
//              val_fraction; at least one document each side
//   shards     each document is preceded by the tokenizer's end-of-text id, as in llm.c
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace tt {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files and directories
  std::string out_dir;              // created when missing
  std::string tokenizer = "bpe";    // "bpe" | "byte"
  int vocab_size = 0;               // 0: the tokenizer's default (bpe 4096; byte has 256)
  double val_fraction = 0.05;       // in (0, 0.5]
  uint64_t seed = 1337;             // the split and SentencePiece's generator
};

// Checks the options, reads and splits the inputs, trains the tokenizer (bpe), writes the
// files above, then prints one summary line to `log`: documents (train/val), bytes, tokens,
// bytes per token, the vocabulary and the time taken (and, before it, a line for each thing
// skipped or replaced). Every bad input is one InputError line, raised before DIR is touched
// where it can be.
void run_prepare(const PrepareOptions& options, std::ostream& log);

}  // namespace tt
