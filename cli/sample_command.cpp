// `tinytrain sample`: text from a checkpoint of a causal model (cli/sampler.h, docs/toy-lm.md).
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "cli/sampler.h"

namespace tt {

namespace {

class SampleCommand final : public Command {
 public:
  const char* name() const override { return "sample"; }
  const char* summary() const override { return "generate text from a checkpoint of a causal model"; }

  void add_flags(CLI::App& cmd) override {
    SampleOptions& s = options_;
    cmd.add_option("--checkpoint", s.checkpoint,
                   "a checkpoint written by train --save-dir, or that directory (its latest), or a Hugging Face "
                   "directory of a LlamaForCausalLM or GPT2LMHeadModel")
        ->required();
    cmd.add_option("--prompt", s.prompt, "text the samples continue (after the end-of-text id)");
    add_int_option(cmd, "--max-new-tokens", s.max_new_tokens, "tokens to draw per sample, at most");
    cmd.add_option("--temperature", s.temperature, "divides the logits; 0: greedy")->capture_default_str();
    add_int_option(cmd, "--top-k", s.top_k, "draw from the k likeliest ids only (0: all)");
    add_seed_option(cmd, seed_, static_cast<int64_t>(s.seed), "seed of the draws, in [0, 2^63)");
    add_int_option(cmd, "--num-samples", s.num_samples, "samples, generated side by side");
    cmd.add_option("--prompt-ids", s.prompt_ids,
                   "the prompt as comma-separated ids, fed as given (no end-of-text added): where no encoder is, "
                   "e.g. 50256,464 with llm.c's GPT-2 tokenizer file");
    cmd.add_option("--tokenizer", s.tokenizer,
                   "directory with tokenizer.json, or llm.c's GPT-2 tokenizer file (gpt2_tokenizer.bin) "
                   "(default: the one the checkpoint names)");
    cmd.add_option("--dump-logits", s.dump_logits,
                   "instead of sampling, write the prompt's logits at every position to this safetensors file");
    add_backend_option(cmd, backend_);
    add_threads_option(cmd, threads_);
    add_debug_sync_flag(cmd, gpu_.debug_sync);
  }

  int run() override {
    set_cpu_threads(threads_);
    options_.seed = parse_seed(seed_, "invalid option: --seed");
    // standard output gets the samples only: the backend's note and the statistics go to stderr
    auto backend = select_backend(backend_, gpu_, std::cerr);
    run_sample(*backend, options_, std::cout, std::cerr);
    return 0;
  }

 private:
  SampleOptions options_;
  std::string seed_;
  BackendChoice backend_ = BackendChoice::Auto;
  int threads_ = 0;
  GpuOptions gpu_;  // only --debug-sync
};

}  // namespace

std::unique_ptr<Command> make_sample_command() { return std::make_unique<SampleCommand>(); }

}  // namespace tt
