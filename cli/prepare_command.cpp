// `tinytrain prepare`: text files to token shards and a tokenizer (data/prepare.h, docs/toy-lm.md).
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "data/prepare.h"

namespace tt {

namespace {

class PrepareCommand final : public Command {
 public:
  const char* name() const override { return "prepare"; }
  const char* summary() const override { return "text files to token shards and a tokenizer (docs/toy-lm.md)"; }

  void add_flags(CLI::App& cmd) override {
    PrepareOptions& p = options_;
    cmd.add_option("--input", p.inputs, "text files and directories (walked recursively)")->required();
    cmd.add_option("--out", p.out_dir, "output directory: train.bin, val.bin, tokenizer.json")->required();
    cmd.add_option("--tokenizer", p.tokenizer, "bpe (SentencePiece, trained here) | byte")->capture_default_str();
    add_int_option(cmd, "--vocab-size", p.vocab_size, "bpe vocabulary size (0: 4096)");
    cmd.add_option("--val-fraction", p.val_fraction, "share of documents held out for val, in (0, 0.5]")
        ->capture_default_str();
    add_seed_option(cmd, seed_, static_cast<int64_t>(p.seed),
                    "seed of the train/val split and the tokenizer, in [0, 2^63)");
  }

  int run() override {
    options_.seed = parse_seed(seed_, "invalid config: --seed");
    run_prepare(options_, std::cout);
    return 0;
  }

 private:
  PrepareOptions options_;
  std::string seed_;
};

}  // namespace

std::unique_ptr<Command> make_prepare_command() { return std::make_unique<PrepareCommand>(); }

}  // namespace tt
