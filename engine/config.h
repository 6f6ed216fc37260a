// Model, optimizer and run configuration, with validation that names the bad field.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/input_error.h"
#include "kernels/backend.h"

namespace tt {

enum class PosEmbedding { None, Learned, Rope };  // rope: rotary, on q and k (kernels/common/rope.h)

// --norm: nn.LayerNorm, or Llama's RMSNorm (no mean subtracted, no bias: kernels/backend.h).
enum class Norm { LayerNorm, RmsNorm };

// --recompute: which activations backward recomputes instead of keeping them from forward.
// ffn: the two (N, d_ff) feed-forward buffers; layer: everything but each layer's output.
enum class Recompute { None, Ffn, Layer };

// --backend: which backend runs (engine/backend_select.h makes it). CudaEmu is the CUDA
// backend's own code on the SIMT emulator (simt/), on the CPU.
enum class BackendChoice { Auto, Cpu, Cuda, CudaEmu };

// --precision: the storage type of activations, activation gradients and working weights.
// Master weights, AdamW state and parameter gradients stay fp32 in every mode.
enum class Precision { FP32, BF16, FP16 };

// One member of the model family: nn.Embedding -> [+ learned positions] ->
// nn.TransformerEncoder(n_layer x nn.TransformerEncoderLayer) -> [encoder.norm] -> lm_head.
struct ModelConfig {
  int vocab_size = 512;
  int d_model = 128;
  int n_head = 4;
  int n_layer = 2;
  int d_ff = 2048;
  Activation activation = Activation::Relu;
  bool norm_first = false;  // pre-norm (adds the final encoder.norm) or post-norm
  bool causal = false;
  PosEmbedding pos_embedding = PosEmbedding::None;
  int max_seq_len = 64;
  float layer_norm_eps = 1e-5f;  // the epsilon of either norm
  float dropout = 0.1f;
  Norm norm = Norm::LayerNorm;
  bool bias = true;  // every linear (and LayerNorm) has a bias; false: none (RMSNorm never has one)
  bool tie_embeddings = false;  // the head's weight is the embedding's (one parameter, both uses' gradients)
  // --head-bias: lm_head has a bias when `bias` is on and this is too; GPT-2's head has none
  // (Hugging Face GPT2LMHeadModel), its other linears and norms do.
  bool head_bias = true;
  float rope_theta = 10000.0f;  // --rope-theta: RoPE's base (pos_embedding rope)
  int n_kv_head = 0;  // --n-kv-head: key/value heads, dividing n_head (grouped-query attention); 0: n_head

  // Whether the norms, and the linears, have biases.
  bool norm_bias() const { return bias && norm == Norm::LayerNorm; }
  bool lm_head_bias() const { return bias && head_bias; }

  int head_dim() const { return d_model / n_head; }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  // in_proj's output per token: the q heads, then the k and v heads (kernels/common/qkv_layout.h)
  int64_t qkv_width() const { return static_cast<int64_t>(n_head + 2 * kv_heads()) * head_dim(); }
  // linear1's output per token: d_ff, or gate and up (2 d_ff) for SwiGLU
  int64_t ffn_in_width() const { return activation == Activation::Swiglu ? 2 * int64_t{d_ff} : d_ff; }
  // Llama's block (pre-norm, RMSNorm, rotary positions, SwiGLU, no biases): its parameters take
  // the names of Hugging Face's LlamaForCausalLM (engine/param_layout.h)
  bool llama_block() const {
    return norm_first && norm == Norm::RmsNorm && pos_embedding == PosEmbedding::Rope &&
           activation == Activation::Swiglu && !bias;
  }
  // The number of parameters (ParamLayout's total). In double, so that validate() can call it
  // on any config to refuse models beyond 2^40; exact for every config that passes.
  double parameter_count() const;
  void validate() const;  // throws InputError naming the field
};

// torch.optim.AdamW hyper-parameters (kernels/common/adamw_update.h), validated, with the lr
// schedule and gradient clipping. schedule.total_steps is --steps for the cosine and linear
// schedules and 0 for the constant one, which needs none (so a constant-lr checkpoint resumes
// with any --steps).
struct AdamWConfig : AdamWHyper {
  void validate() const;
};

struct RunConfig {
  int batch = 16;
  int seq = 64;
  int steps = 100;
  int64_t seed = 1337;  // in [0, 2^63)
  void validate(const ModelConfig& model) const;
};

const char* activation_name(Activation act);
const char* pos_embedding_name(PosEmbedding pos);
const char* recompute_name(Recompute recompute);
Recompute parse_recompute(const std::string& name);          // throws InputError
const char* backend_choice_name(BackendChoice choice);       // "auto", "cpu", "cuda", "cuda-emu"
BackendChoice parse_backend_choice(const std::string& name); // throws InputError
const char* precision_name(Precision precision);
DType activation_dtype(Precision precision);
// `base` with dynamic loss scaling on exactly for fp16 (bf16 and fp32 need none).
LossScalerConfig loss_scaler_for(Precision precision, LossScalerConfig base = {});
Precision parse_precision(const std::string& name);          // throws InputError
Activation parse_activation(const std::string& name);        // throws InputError
const char* lr_schedule_name(LrScheduleKind kind);
LrScheduleKind parse_lr_schedule(const std::string& name);   // throws InputError
PosEmbedding parse_pos_embedding(const std::string& name);   // throws InputError
const char* norm_name(Norm norm);                           // "layernorm", "rmsnorm"
Norm parse_norm(const std::string& name);                   // throws InputError

// --arch: a named block, the block fields of a ModelConfig (activation, norm_first, causal,
// pos_embedding, norm, bias, head_bias, tie_embeddings) set as that family has them: "seed"
// (the default: nn.TransformerEncoder's), "gpt2" (pre-norm, GELU, learned positions, causal,
// head tied to the embedding and without a bias), "llama" (pre-norm, RMSNorm, rotary positions, SwiGLU, no biases,
// causal). Throws InputError naming the flag for another name.
ModelConfig arch_preset(const std::string& name);
// --model-size: the dimensions of a published Llama checkpoint on the Llama block (arch_preset
// "llama"), for `plan` to size real models: 1b, 3b (Llama 3.2), 7b, 13b (Llama 2), 8b, 70b
// (Llama 3.1); each row's source, its config.json on the Hugging Face hub, is in config.cpp.
// Throws InputError naming the sizes for another name.
ModelConfig llama_size_preset(const std::string& size);
// Copies the preset's block fields into `model`, except those whose flag (--activation,
// --norm-first, --causal, --pos-embedding, --norm, --bias, --head-bias,
// --tie-embeddings) is in `given`.
void apply_block_preset(const ModelConfig& preset, const std::vector<std::string>& given, ModelConfig& model);

// The reference format's JSON spelling (see docs/reference-format.md). The readers check
// every field's type and range (base/checked_input.h), refuse unknown fields, then
// validate; each error is one InputError starting with `where` (e.g. "ref.safetensors:
// metadata 'config'").
std::string model_config_to_json(const ModelConfig& c);
ModelConfig model_config_from_json(const std::string& json, const std::string& where = "config");
std::string adamw_config_to_json(const AdamWConfig& c);
AdamWConfig adamw_config_from_json(const std::string& json, const std::string& where = "optimizer config");

}  // namespace tt
