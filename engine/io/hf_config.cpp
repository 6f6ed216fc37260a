// Hugging Face config.json <-> ModelConfig (engine/io/hf_config.h).
#include "engine/io/hf_config.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/checked_input.h"

namespace tt {

using nlohmann::json;

namespace {

// The shortest decimal that reads back as `value` in fp32 (1e-05, not 9.99999975e-06), so the
// file says what the user typed and Python's float32 of it is our float.
json shortest_float(float value) {
  char text[32];
  for (int digits = 6; digits <= 9; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, static_cast<double>(value));
    if (std::strtof(text, nullptr) == value) break;
  }
  return std::strtod(text, nullptr);
}

// The optional fields of a config.json: Hugging Face's classes give every field a default, and
// an absent field (or null, as save_pretrained writes unset ones) takes it. A present one is
// checked for type and range by JsonFields, whose errors name the file and the field.
class OptionalFields {
 public:
  OptionalFields(const json& object, std::string where) : object_(object), fields_(object, where), where_(std::move(where)) {}

  bool has(const char* key) const { return object_.contains(key) && !object_.at(key).is_null(); }
  int positive_int(const char* key, int fallback) { return has(key) ? fields_.positive_int(key) : fallback; }
  int int_in(const char* key, int lo, int hi, int fallback) {
    return has(key) ? static_cast<int>(fields_.integer(key, lo, hi)) : fallback;
  }
  float number_f32(const char* key, float fallback) { return has(key) ? fields_.number_f32(key) : fallback; }
  bool boolean(const char* key, bool fallback) { return has(key) ? fields_.boolean(key) : fallback; }
  std::string string(const char* key, const char* fallback) { return has(key) ? fields_.string(key) : fallback; }
  const json& raw(const char* key) const { return object_.at(key); }

  // "<where>: <key> <value> <problem>", for an option that parses but that tinytrain does not run.
  [[noreturn]] void refuse(const char* key, const std::string& problem) const {
    const std::string value = has(key) ? printable(object_.at(key).dump()) : "(absent)";
    throw InputError(where_ + ": " + key + " " + value + ": " + problem);
  }
  const std::string& where() const { return where_; }

 private:
  const json& object_;
  JsonFields fields_;
  std::string where_;
};

// The dropout probabilities of a config, as one p: Llama's attention_dropout; GPT-2's three,
// which must agree (tinytrain drops with one p everywhere) unless `given` replaces them.
float llama_dropout(OptionalFields& f, std::optional<float> given) {
  return given ? *given : f.number_f32("attention_dropout", 0.0f);
}

float gpt2_dropout(OptionalFields& f, std::optional<float> given) {
  if (given) return *given;
  const float resid = f.number_f32("resid_pdrop", 0.1f), embd = f.number_f32("embd_pdrop", 0.1f),
              attn = f.number_f32("attn_pdrop", 0.1f);
  if (embd != resid || attn != resid)
    f.refuse("attn_pdrop", "resid_pdrop, embd_pdrop and attn_pdrop differ, and tinytrain drops with one "
                           "probability everywhere: give it with --dropout");
  return resid;
}

ModelConfig llama_model(OptionalFields& f, std::optional<float> dropout) {
  ModelConfig c = arch_preset("llama");
  c.vocab_size = f.positive_int("vocab_size", 32000);
  c.d_model = f.positive_int("hidden_size", 4096);
  c.d_ff = f.positive_int("intermediate_size", 11008);
  c.n_layer = f.positive_int("num_hidden_layers", 32);
  c.n_head = f.positive_int("num_attention_heads", 32);
  c.n_kv_head = f.positive_int("num_key_value_heads", c.n_head);
  c.max_seq_len = f.positive_int("max_position_embeddings", 2048);
  c.layer_norm_eps = f.number_f32("rms_norm_eps", 1e-6f);
  c.tie_embeddings = f.boolean("tie_word_embeddings", false);
  c.dropout = llama_dropout(f, dropout);
  if (f.string("hidden_act", "silu") != "silu")
    f.refuse("hidden_act", "tinytrain's Llama block gates with silu (SwiGLU) only");
  if (f.has("head_dim") && (c.d_model % c.n_head != 0 || f.positive_int("head_dim", 0) != c.d_model / c.n_head))
    f.refuse("head_dim", "tinytrain's heads split hidden_size evenly (head_dim = hidden_size / num_attention_heads)");
  if (f.boolean("attention_bias", false))
    f.refuse("attention_bias", "tinytrain's Llama block has no biases");
  if (f.boolean("mlp_bias", false)) f.refuse("mlp_bias", "tinytrain's Llama block has no biases");
  if (f.has("sliding_window")) f.refuse("sliding_window", "tinytrain attends to the whole causal context");
  // RoPE: transformers 5 writes rope_parameters {rope_type, rope_theta}; 4.x wrote rope_theta
  // beside rope_scaling (null unless scaled). Only the unscaled ("default") rotation runs here.
  if (f.has("rope_scaling")) {
    const json& s = f.raw("rope_scaling");
    if (!(s.is_object() && s.contains("rope_type") && s.at("rope_type") == "default"))
      f.refuse("rope_scaling", "tinytrain implements unscaled RoPE only (rope_type default)");
  }
  c.rope_theta = f.number_f32("rope_theta", 10000.0f);
  if (f.has("rope_parameters")) {
    const json& p = f.raw("rope_parameters");
    if (!p.is_object()) f.refuse("rope_parameters", "expected an object");
    if (p.contains("rope_type") && p.at("rope_type") != "default")
      f.refuse("rope_parameters", "tinytrain implements unscaled RoPE only (rope_type default)");
    OptionalFields rope(p, f.where() + ": rope_parameters");
    c.rope_theta = rope.number_f32("rope_theta", c.rope_theta);
  }
  return c;
}

ModelConfig gpt2_model(OptionalFields& f, std::optional<float> dropout) {
  ModelConfig c = arch_preset("gpt2");
  c.vocab_size = f.positive_int("vocab_size", 50257);
  c.d_model = f.positive_int("n_embd", 768);
  c.n_layer = f.positive_int("n_layer", 12);
  c.n_head = f.positive_int("n_head", 12);
  c.d_ff = f.positive_int("n_inner", 4 * c.d_model);  // null: 4 x n_embd
  c.max_seq_len = f.positive_int("n_positions", 1024);
  c.layer_norm_eps = f.number_f32("layer_norm_epsilon", 1e-5f);
  c.tie_embeddings = f.boolean("tie_word_embeddings", true);
  c.dropout = gpt2_dropout(f, dropout);
  const std::string act = f.string("activation_function", "gelu_new");
  if (act != "gelu")
    f.refuse("activation_function", act == "gelu_new" ? "GELU's tanh approximation; tinytrain's GELU is the exact erf "
                                                        "one, activation_function \"gelu\""
                                                      : "tinytrain's GPT-2 block uses the exact GELU (\"gelu\") only");
  if (!f.boolean("scale_attn_weights", true))
    f.refuse("scale_attn_weights", "tinytrain always scales the scores by 1/sqrt(head size)");
  if (f.boolean("scale_attn_by_inverse_layer_idx", false))
    f.refuse("scale_attn_by_inverse_layer_idx", "tinytrain scales every layer's scores alike");
  if (f.boolean("add_cross_attention", false))
    f.refuse("add_cross_attention", "tinytrain's blocks have no cross-attention");
  return c;
}

}  // namespace

const char* hf_class_name(HfArchitecture arch) {
  return arch == HfArchitecture::Llama ? "LlamaForCausalLM" : "GPT2LMHeadModel";
}

bool is_hf_model_dir(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec) && std::filesystem::is_regular_file(path + "/config.json", ec);
}

HfArchitecture hf_architecture_for(const ModelConfig& c) {
  auto refuse = [](const std::string& what) { throw InputError("cannot export to Hugging Face: " + what); };
  if (!c.norm_first)
    refuse("post-norm (norm_first false): LlamaForCausalLM and GPT2LMHeadModel are pre-norm (--arch llama or gpt2)");
  if (!c.causal) refuse("a bidirectional model (causal false): both classes are causal language models");
  const bool llama_like =
      c.norm == Norm::RmsNorm || c.pos_embedding == PosEmbedding::Rope || c.activation == Activation::Swiglu;
  if (llama_like) {
    if (c.norm != Norm::RmsNorm) refuse("LayerNorm in a Llama-style block: LlamaForCausalLM normalises with RMSNorm");
    if (c.pos_embedding != PosEmbedding::Rope)
      refuse(std::string("positions '") + pos_embedding_name(c.pos_embedding) + "' in a Llama-style block: "
             "LlamaForCausalLM uses rotary positions");
    if (c.activation != Activation::Swiglu)
      refuse(std::string("activation ") + activation_name(c.activation) + " in a Llama-style block: "
             "LlamaForCausalLM uses SwiGLU");
    if (c.bias) refuse("biases in a Llama-style block (bias true): tinytrain exports LlamaForCausalLM without them");
    return HfArchitecture::Llama;
  }
  if (c.activation != Activation::Gelu)
    refuse(std::string("activation ") + activation_name(c.activation) + ": GPT2LMHeadModel's is GELU");
  if (c.pos_embedding != PosEmbedding::Learned)
    refuse("no positional embedding: GPT2LMHeadModel learns one (pos_embedding learned)");
  if (!c.bias) refuse("no biases (bias false): GPT2LMHeadModel's linears and LayerNorms have them");
  if (c.head_bias) refuse("a bias on the head (head_bias true): GPT2LMHeadModel's head has none (--head-bias false)");
  return HfArchitecture::Gpt2;
}

std::string hf_config_json(const ModelConfig& c, HfArchitecture arch, int end_of_text) {
  const json token = end_of_text >= 0 ? json(end_of_text) : json(nullptr);
  json j;
  j["architectures"] = {hf_class_name(arch)};
  j["vocab_size"] = c.vocab_size;
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["bos_token_id"] = token;
  j["eos_token_id"] = token;
  j["initializer_range"] = 0.02;
  j["dtype"] = "float32";  // the tensors' type in model.safetensors
  j["use_cache"] = true;
  if (arch == HfArchitecture::Llama) {
    j["model_type"] = "llama";
    j["hidden_size"] = c.d_model;
    j["intermediate_size"] = c.d_ff;
    j["num_hidden_layers"] = c.n_layer;
    j["num_attention_heads"] = c.n_head;
    j["num_key_value_heads"] = c.kv_heads();
    j["head_dim"] = c.head_dim();
    j["hidden_act"] = "silu";
    j["max_position_embeddings"] = c.max_seq_len;
    j["rms_norm_eps"] = shortest_float(c.layer_norm_eps);
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", shortest_float(c.rope_theta)}};
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
    j["attention_dropout"] = shortest_float(c.dropout);
  } else {
    j["model_type"] = "gpt2";
    j["n_embd"] = c.d_model;
    j["n_inner"] = c.d_ff;
    j["n_layer"] = c.n_layer;
    j["n_head"] = c.n_head;
    j["n_positions"] = c.max_seq_len;
    j["activation_function"] = "gelu";  // the exact erf GELU, as ours
    j["layer_norm_epsilon"] = shortest_float(c.layer_norm_eps);
    for (const char* p : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) j[p] = shortest_float(c.dropout);
    j["scale_attn_weights"] = true;
    j["scale_attn_by_inverse_layer_idx"] = false;
    j["reorder_and_upcast_attn"] = false;
  }
  return j.dump(2) + "\n";
}

std::string hf_generation_config_json(int end_of_text) {
  const json token = end_of_text >= 0 ? json(end_of_text) : json(nullptr);
  return json{{"bos_token_id", token}, {"eos_token_id", token}}.dump(2) + "\n";
}

HfConfig read_hf_config(const std::string& dir, std::optional<float> dropout) {
  const std::string where = dir + "/config.json";
  std::ifstream in(where, std::ios::binary);
  if (!in) throw InputError(where + ": cannot read it (a Hugging Face model directory holds config.json)");
  std::ostringstream text;
  text << in.rdbuf();
  const json object = parse_json(text.str(), where);
  if (!object.is_object()) throw InputError(where + ": not a JSON object");
  OptionalFields f(object, where);
  // A model saved already quantised (bitsandbytes' 4-bit or 8-bit, GPTQ, ...) stores its
  // weights in that format: tinytrain reads the full-precision model and quantises its base
  // itself (train --base-quant nf4, docs/finetune.md)
  if (f.has("quantization_config"))
    f.refuse("quantization_config", "a model saved quantised: give the unquantised model, and --base-quant nf4 "
                                    "to train QLoRA on it");
  const std::string type = f.string("model_type", "");
  HfConfig out;
  if (type == "llama") {
    out.arch = HfArchitecture::Llama;
  } else if (type == "gpt2") {
    out.arch = HfArchitecture::Gpt2;
  } else {
    f.refuse("model_type", "tinytrain imports llama (LlamaForCausalLM) and gpt2 (GPT2LMHeadModel)");
  }
  if (f.has("architectures")) {
    const json& names = f.raw("architectures");
    if (!names.is_array() || names.size() != 1 || names[0] != hf_class_name(out.arch))
      f.refuse("architectures", std::string("tinytrain imports the causal LM with its head, ") + hf_class_name(out.arch));
  }
  out.model = out.arch == HfArchitecture::Llama ? llama_model(f, dropout) : gpt2_model(f, dropout);
  try {
    out.model.validate();
  } catch (const InputError& e) {
    throw InputError(where + ": " + e.what());
  }
  return out;
}

}  // namespace tt
