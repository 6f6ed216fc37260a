// `tinytrain export`: a checkpoint as a Hugging Face model directory that transformers'
// AutoModelForCausalLM.from_pretrained loads (engine/io/hf_weights.h, docs/toy-lm.md), or a
// LoRA run's adapters as a directory PEFT's PeftModel.from_pretrained loads
// (engine/io/peft_adapter.h, docs/finetune.md).
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "data/tokenizer.h"
#include "engine/io/checkpoint.h"
#include "engine/io/hf_tokenizer.h"
#include "engine/io/hf_weights.h"
#include "engine/io/peft_adapter.h"

namespace tt {

namespace {

class ExportCommand final : public Command {
 public:
  const char* name() const override { return "export"; }
  const char* summary() const override {
    return "a checkpoint as a Hugging Face directory (LlamaForCausalLM or GPT2LMHeadModel)";
  }

  void add_flags(CLI::App& cmd) override {
    cmd.add_option("--checkpoint", checkpoint_, "a checkpoint written by train --save-dir, or that directory (its latest)")
        ->required();
    cmd.add_option("--format", format_,
                   "hf: config.json, generation_config.json and model.safetensors (fp32); peft: a LoRA run's "
                   "adapter_config.json and adapter_model.safetensors")
        ->required()
        ->check(CLI::IsMember({"hf", "peft"}));
    cmd.add_option("--base-name", base_name_,
                   "--format peft: the adapter config's base_model_name_or_path (where PEFT finds the base)");
    cmd.add_option("--out", out_, "the directory to write (created; its files are replaced whole)")->required();
  }

  int run() override {
    const std::string path = find_resume_checkpoint(checkpoint_);
    if (format_ == "peft") {
      const CheckpointModel run = read_checkpoint_adapters(path);
      write_peft_adapter(out_, run.config, run.lora, run.params, base_name_);
      std::cout << "export: " << path << " (step " << run.step << ") -> " << out_ << ": LoRA rank " << run.lora.rank
                << " on " << lora_targets_text(run.config, run.lora) << ", " << run.params.size()
                << " parameters; adapter_config.json, adapter_model.safetensors" << std::endl;
      return 0;
    }
    const CheckpointModel model = read_checkpoint_model(path);
    const HfArchitecture arch = hf_architecture_for(model.config);  // refuses what no class holds, first
    // The tokenizer the run trained with (the checkpoint names its directory): its end-of-text
    // id becomes the bos and eos ids, so generate() stops where `tinytrain sample` does.
    std::unique_ptr<Tokenizer> tokenizer;
    const auto named = model.metadata.find("tokenizer");
    if (named != model.metadata.end() && !named->second.empty()) tokenizer = load_tokenizer(named->second);
    write_hf_model(out_, model.config, arch, model.params, tokenizer ? tokenizer->end_of_text() : -1);
    std::cout << "export: " << path << " (step " << model.step << ") -> " << out_ << ": " << hf_class_name(arch)
              << ", " << ParamLayout(model.config).total() << " parameters; config.json, generation_config.json, "
              << "model.safetensors" << std::endl;
    // SentencePiece's model has a transformers class; the byte tokenizer has none
    if (const auto* bpe = dynamic_cast<const SentencePieceTokenizer*>(tokenizer.get())) {
      write_hf_tokenizer(out_, *bpe, model.config.max_seq_len);
      std::cout << "export: the run's tokenizer (" << named->second << ") -> tokenizer.model, tokenizer_config.json"
                << std::endl;
    } else if (tokenizer) {
      std::cout << "export: the run's " << tokenizer->kind() << " tokenizer has no transformers class: not exported"
                << std::endl;
    }
    return 0;
  }

 private:
  std::string checkpoint_, format_, out_, base_name_;
};

}  // namespace

std::unique_ptr<Command> make_export_command() { return std::make_unique<ExportCommand>(); }

}  // namespace tt
