// PEFT's LoRA adapter directories, both ways: adapter_model.safetensors and adapter_config.json
// <-> tinytrain's adapters (engine/lora.h), and the adapters folded into their base.
//
// The Llama block's adapters carry PEFT's names already (engine/lora.h: lora_layout); PEFT's
// file prefixes each with "base_model.model.", the PeftModel's path to the wrapped model:
//   model.layers.0.self_attn.q_proj.lora_A.weight  <->  base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight
// Only the Llama block maps: PEFT adapts transformers' modules, and the GPT-style block's fused
// in_proj is a parameter of nn.MultiheadAttention, not a module PEFT names the same way.
#pragma once
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/lora.h"

namespace tt {

// Writes DIR/adapter_config.json (peft_type LORA, task_type CAUSAL_LM, r, lora_alpha,
// lora_dropout, target_modules, bias "none", fan_in_fan_out false, base_model_name_or_path)
// and DIR/adapter_model.safetensors (F32, PEFT's names), each whole or not at all. `adapters`
// in lora_layout(model, lora) order. Throws InputError for a model that is not the Llama block,
// or when a file cannot be written.
void write_peft_adapter(const std::string& dir, const ModelConfig& model, const LoraConfig& lora,
                        const std::vector<float>& adapters, const std::string& base_name);

// A PEFT adapter directory for the model `model` describes: its LoRA config and adapters, in
// lora_layout order. Each problem is one InputError naming the file: a config PEFT's LoRA with
// options tinytrain does not run (rslora, DoRA, a bias, fan_in_fan_out, per-module ranks), a
// module the model lacks, a missing or unexpected tensor, a shape of another base, a
// non-finite value.
struct PeftAdapter {
  LoraConfig lora;
  std::vector<float> adapters;
};
PeftAdapter read_peft_adapter(const std::string& dir, const ModelConfig& model);
bool is_peft_adapter_dir(const std::string& path);  // holds adapter_config.json

// W + (alpha / r) B A for every adapted module, into a copy of `base` (ParamLayout(model)
// order): PEFT's merge_and_unload. Each element of B A is summed over the rank in fp32, in order.
std::vector<float> merge_lora(const ModelConfig& model, const std::vector<float>& base, const LoraConfig& lora,
                              const std::vector<float>& adapters);

}  // namespace tt
