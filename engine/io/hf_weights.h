// Hugging Face model directories' tensors, both ways: model.safetensors (or shards named by
// model.safetensors.index.json) <-> the flat parameter buffer in ParamLayout order.
//
// The Llama block already carries LlamaForCausalLM's names (engine/param_layout.h), so its
// tensors map one to one. GPT-2 renames every tensor, and its linears are Conv1D modules that
// store the weight as (in, out) where nn.Linear's, ours, is (out, in): those are transposed.
//   embed.weight                                  transformer.wte.weight
//   pos_embed.weight                              transformer.wpe.weight
//   encoder.layers.{i}.norm1.{weight,bias}        transformer.h.{i}.ln_1.{weight,bias}
//   encoder.layers.{i}.self_attn.in_proj_weight   transformer.h.{i}.attn.c_attn.weight   (T)
//   encoder.layers.{i}.self_attn.out_proj.weight  transformer.h.{i}.attn.c_proj.weight   (T)
//   encoder.layers.{i}.norm2.{weight,bias}        transformer.h.{i}.ln_2.{weight,bias}
//   encoder.layers.{i}.linear1.weight             transformer.h.{i}.mlp.c_fc.weight      (T)
//   encoder.layers.{i}.linear2.weight             transformer.h.{i}.mlp.c_proj.weight    (T)
//   encoder.norm.{weight,bias}                    transformer.ln_f.{weight,bias}
//   (biases alike, untransposed)                  lm_head.weight only when untied
#pragma once
#include <string>
#include <vector>

#include "engine/io/hf_config.h"
#include "engine/param_layout.h"

namespace tt {

// One parameter: its name in each state_dict, and its shape as Hugging Face stores it.
struct HfTensor {
  std::string ours;
  std::string hf;
  Shape hf_shape;
  bool transposed = false;  // stored (in, out): a GPT-2 Conv1D weight
};
std::vector<HfTensor> hf_tensors(const ModelConfig& config, HfArchitecture arch);

// The parameters of the model `config` describes, from DIR's model.safetensors or the shards its
// model.safetensors.index.json names, in ParamLayout(config.model) order. Tensors may be F32,
// BF16 or F16 (widened exactly). Each problem is one InputError naming the file: no weights
// file, an index naming a file that is missing or outside DIR, a missing tensor, another shape
// or dtype, a tensor the model does not have, a non-finite value.
std::vector<float> read_hf_params(const std::string& dir, const HfConfig& config);

// Writes DIR/config.json, DIR/generation_config.json and DIR/model.safetensors (F32, every
// file whole or not at all: written beside, then renamed) for `params` in ParamLayout(config)
// order. Creates DIR. end_of_text: the tokenizer's id (-1: unknown). Throws InputError when
// the directory or a file cannot be written.
void write_hf_model(const std::string& dir, const ModelConfig& config, HfArchitecture arch,
                    const std::vector<float>& params, int end_of_text);

}  // namespace tt
