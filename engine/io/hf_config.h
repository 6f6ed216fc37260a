// Hugging Face's config.json for the two causal LMs tinytrain's family can hold, both ways:
// LlamaForCausalLM (the Llama block: pre-norm RMSNorm, rotary positions, SwiGLU, no biases,
// grouped-query attention) and GPT2LMHeadModel (pre-norm LayerNorm, learned positions, exact
// GELU, biases everywhere but the head). docs/toy-lm.md, "Hugging Face both ways".
//
// What maps, field by field:
//   ours            LlamaForCausalLM            GPT2LMHeadModel
//   vocab_size      vocab_size                  vocab_size
//   d_model         hidden_size                 n_embd
//   n_head          num_attention_heads         n_head
//   n_kv_head       num_key_value_heads         (n_head)
//   n_layer         num_hidden_layers           n_layer
//   d_ff            intermediate_size           n_inner (null: 4 n_embd)
//   max_seq_len     max_position_embeddings     n_positions
//   layer_norm_eps  rms_norm_eps                layer_norm_epsilon
//   rope_theta      rope_theta / rope_parameters  -
//   tie_embeddings  tie_word_embeddings         tie_word_embeddings
//   dropout         attention_dropout           resid_pdrop = embd_pdrop = attn_pdrop
// Anything either side has that the other cannot run is refused in one line naming it.
#pragma once
#include <optional>
#include <string>

#include "engine/config.h"

namespace tt {

enum class HfArchitecture { Llama, Gpt2 };

const char* hf_class_name(HfArchitecture arch);  // "LlamaForCausalLM", "GPT2LMHeadModel"

// Whether `path` is a directory holding a config.json (a Hugging Face model directory), as
// opposed to a tinytrain checkpoint or a state_dict file.
bool is_hf_model_dir(const std::string& path);

// The class a config exports as. Throws InputError "cannot export to Hugging Face: ..." naming
// the first thing neither class can hold (the seed's post-norm ReLU encoder: "post-norm").
HfArchitecture hf_architecture_for(const ModelConfig& config);

// config.json's text for `config` (whose hf_architecture_for is `arch`). end_of_text: the
// tokenizer's end-of-text id, written as bos and eos token ids (-1: none known, written null).
std::string hf_config_json(const ModelConfig& config, HfArchitecture arch, int end_of_text);
// generation_config.json's text: the same token ids.
std::string hf_generation_config_json(int end_of_text);

// A Hugging Face directory's config, read from DIR/config.json and mapped to ours.
struct HfConfig {
  HfArchitecture arch;
  ModelConfig model;
};
// Throws one InputError "<dir>/config.json: ..." for a missing or malformed file, another model
// type, a field of the wrong type or range, and every option tinytrain does not run (rope
// scaling, sliding windows, biases where ours has none, another activation, ...). `dropout`,
// when given (train --dropout), replaces the config's dropout probabilities, which then need
// not agree with one another.
HfConfig read_hf_config(const std::string& dir, std::optional<float> dropout = std::nullopt);

}  // namespace tt
