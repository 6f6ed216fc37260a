// The flags `train`, `plan` and `profile` share, so that one command line describes one run
// for all three: the model, the run and the optimizer, how a step runs (--precision,
// --recompute, --grad-accum, the fp16 loss scaler) and --backend. They fill one TrainOptions
// (engine/train_options.h), which finish() checks.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "engine/backend_select.h"
#include "engine/train_options.h"

namespace tt {

struct TrainFlags {
  TrainOptions options;  // the seed workload's values until a flag says otherwise
  BackendChoice backend = BackendChoice::Auto;
  // Flags kept as text until finish() parses them, so that a bad value is one error naming it.
  std::string activation = "relu", pos_embedding = "none", norm = "layernorm", seed, precision = "fp32",
      recompute = "none", arch;
  std::string lora_target_list;  // --lora-targets, comma-separated; "": the model's default (engine/lora.h)
  std::string base_quant = "none";  // --base-quant none|nf4 (QLoRA)
  std::string model_size;  // --model-size: a published Llama's dimensions (engine/config.h); "": the flags'
  std::string init;  // --init; "": the default of --arch (hf for gpt2 and llama, else pytorch)
  // The block's flags that --arch presets: a flag given on the command line wins over the preset.
  std::vector<CLI::Option*> block_flags;
  // Every flag that describes the model, and --dropout: `train --init-from` a Hugging Face
  // directory takes the model from its config.json, and refuses these beside it but --dropout.
  std::vector<CLI::Option*> model_flags;
  CLI::Option* dropout_flag = nullptr;

  TrainFlags();  // the seed workload: its lr is 1e-4
  // Declares the model, run and optimizer flags, the step's and the loss scaler's, and --backend.
  void add_to(CLI::App& cmd);
  // --zero and --bucket-mb: how several ranks share a step (`train` and `plan`; `profile` runs
  // in one process).
  void add_data_parallel_to(CLI::App& cmd);
  // Parses the text flags into `options` and checks every value; throws InputError naming the flag.
  void finish();
  // --init-from DIR of Hugging Face (engine/io/hf_config.h): options.model becomes DIR's model,
  // with --dropout's p when given. Throws InputError for a model flag given beside it.
  void take_model_from_hf_dir();
  // Checks that `ranks` ranks split the batch, each into --grad-accum micro-batches, and sets
  // options.ranks, the ranks the memory plan is for.
  void set_ranks(int ranks);
  // Throws InputError with the memory plan's numbers and remedies when the run does not fit in
  // where.available (engine/memory_plan.h).
  void check_fits(const Placement& where) const;
};

}  // namespace tt
