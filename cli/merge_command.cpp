// `tinytrain merge`: LoRA adapters folded into their base, W + (alpha / r) B A, written as a
// Hugging Face directory that `train --init-from`, `sample` and transformers load
// (engine/io/peft_adapter.h, docs/finetune.md).
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "engine/io/checkpoint.h"
#include "engine/io/checksum.h"
#include "engine/io/hf_weights.h"
#include "engine/io/peft_adapter.h"

namespace tt {

namespace {

class MergeCommand final : public Command {
 public:
  const char* name() const override { return "merge"; }
  const char* summary() const override { return "fold LoRA adapters into their base: a Hugging Face directory"; }

  void add_flags(CLI::App& cmd) override {
    cmd.add_option("--base", base_, "the base model: a Hugging Face directory (LlamaForCausalLM or GPT2LMHeadModel)")
        ->required();
    cmd.add_option("--adapter", adapter_,
                   "the adapters: a checkpoint of a LoRA run (a file, or its directory's latest) or a PEFT adapter "
                   "directory")
        ->required();
    cmd.add_option("--out", out_, "the directory to write (created; its files are replaced whole)")->required();
  }

  int run() override {
    if (!is_hf_model_dir(base_))
      throw InputError(base_ + ": --base takes a Hugging Face model directory (with config.json)");
    const HfConfig base_config = read_hf_config(base_);
    const ModelConfig& model = base_config.model;
    const std::vector<float> base = read_hf_params(base_, base_config);
    LoraConfig lora;
    std::vector<float> adapters;
    if (is_peft_adapter_dir(adapter_)) {
      PeftAdapter peft = read_peft_adapter(adapter_, model);
      lora = peft.lora;
      adapters = std::move(peft.adapters);
    } else {
      const std::string path = find_resume_checkpoint(adapter_);
      const CheckpointModel run = read_checkpoint_adapters(path);
      // the adapters were trained on this base: the same model, and the base the run fingerprinted
      ModelConfig trained = run.config;
      trained.dropout = model.dropout;  // (how the run trained, not what the weights are)
      if (model_config_to_json(trained) != model_config_to_json(model))
        throw InputError(path + ": adapters of another model than --base " + base_ + " (the configs differ)");
      Checksum fingerprint;
      fingerprint.add(base.data(), base.size() * sizeof(float));
      const auto trained_on = run.metadata.find("lora_base");
      if (trained_on != run.metadata.end() && trained_on->second != fingerprint.hex())
        throw InputError(path + ": adapters trained on another base than " + base_ + " (its fingerprint " +
                         trained_on->second + ", this base's " + fingerprint.hex() + ")");
      lora = run.lora;
      adapters = run.params;
    }
    write_hf_model(out_, model, base_config.arch, merge_lora(model, base, lora, adapters), -1);
    std::cout << "merge: " << base_ << " + LoRA rank " << lora.rank << " on " << lora_targets_text(model, lora)
              << " (" << adapter_ << ") -> " << out_ << ": " << hf_class_name(base_config.arch) << std::endl;
    return 0;
  }

 private:
  std::string base_, adapter_, out_;
};

}  // namespace

std::unique_ptr<Command> make_merge_command() { return std::make_unique<MergeCommand>(); }

}  // namespace tt
