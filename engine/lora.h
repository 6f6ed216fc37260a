// LoRA: low-rank adapters beside frozen linears (Hu et al. 2021, "LoRA: Low-Rank Adaptation of
// Large Language Models"), as PEFT's LoraLayer computes them. A targeted linear y = W x + b
// becomes
//   y = W x + b + s B A drop(x),   A (r, in), B (out, r), s = alpha / r
// with W and b frozen and only A and B trained. A starts kaiming-uniform(a = sqrt 5), which is
// U(-1/sqrt(in), 1/sqrt(in)), and B at zero, so the adapted model's step 0 is the base model.
//
// The Llama block's fused projections hold several PEFT modules: q_proj, k_proj and v_proj are
// column windows of in_proj's output, gate_proj and up_proj of linear1's. Each adapter adds its
// product to its own window (Backend::add_scaled_columns) and reads its window of the gradient
// (Backend::copy_scaled_columns); the rank-r products are the backend's GEMMs (linear_forward,
// linear_backward), with no fusion: at rank 8-64 the (N, r) intermediate is a few percent of the
// base GEMM's traffic (docs/finetune.md).
#pragma once
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/dropout_context.h"
#include "engine/param_layout.h"
#include "kernels/arena.h"
#include "kernels/backend.h"

namespace tt {

// Which of a layer's four linears an adapter sits beside.
enum class LoraSite { InProj, OutProj, Linear1, Linear2 };

// --lora-rank, --lora-alpha, --lora-dropout, --lora-targets.
struct LoraConfig {
  int rank = 0;          // 0: no adapters, every parameter trains
  float alpha = 8.0f;    // PEFT's default lora_alpha
  float dropout = 0.0f;  // PEFT's default lora_dropout
  std::vector<std::string> targets;  // module names; empty: lora_default_targets
  // --base-quant nf4 (QLoRA, Dettmers et al. 2023): the frozen base's linear weights stored as
  // NF4 (engine/nf4_weight.h) and decoded into a reused tile before each use (engine/model.h)
  bool nf4_base = false;
  bool enabled() const { return rank > 0; }
  float scale() const { return alpha / static_cast<float>(rank); }
};

// One adapted module of a layer.
struct LoraTarget {
  std::string name;   // PEFT's module name: "q_proj", ..., or the GPT-style block's "in_proj", ...
  LoraSite site;      // the linear it adapts
  int64_t first_out;  // its window of that linear's output columns: [first_out, first_out + out)
  int64_t out, in;    // B is (out, r), A is (r, in)
  int index;          // its place in lora_module_names: its dropout site is LoraInput + index
};

// Every module name a model offers, in layer order: the Llama block's q_proj, k_proj, v_proj,
// o_proj, gate_proj, up_proj, down_proj (Hugging Face's names); the GPT-style block's in_proj,
// out_proj, linear1, linear2 (nn.TransformerEncoderLayer's).
std::vector<std::string> lora_module_names(const ModelConfig& model);
// PEFT's defaults for the two families: q_proj and v_proj for Llama; GPT-2's c_attn, ours in_proj.
std::vector<std::string> lora_default_targets(const ModelConfig& model);
// The adapted modules of one layer, in lora_module_names' order whatever the flag's order.
// Throws InputError for a rank below 1, an alpha that is not positive and finite, a dropout
// outside [0, 1), a target the model lacks (naming the ones it has) or given twice.
std::vector<LoraTarget> lora_targets(const ModelConfig& model, const LoraConfig& lora);
// The adapted modules, comma-separated, for the log: "q_proj,v_proj".
std::string lora_targets_text(const ModelConfig& model, const LoraConfig& lora);
// The module's PyTorch path: "model.layers.3.self_attn.q_proj", "encoder.layers.0.linear1".
std::string lora_module_path(const ModelConfig& model, int layer, const std::string& module);
// The adapters' flat layout: per layer, per target, "<path>.lora_A.weight" (r, in) then
// "<path>.lora_B.weight" (out, r), PEFT's names without its "base_model.model." prefix.
ParamLayout lora_layout(const ModelConfig& model, const LoraConfig& lora);
// A from kaiming-uniform(a = sqrt 5) on --seed's Init stream, B zeros.
std::vector<float> lora_init(const ParamLayout& adapters, uint64_t seed);

// The frozen linear weights QLoRA stores as NF4, by name in ParamLayout(model): every weight of
// the blocks' linears (the Llama block's q, k, v, o, gate, up, down; the GPT-style block's
// in_proj, out_proj, linear1, linear2), as bitsandbytes' Linear4bit replaces every nn.Linear of
// the blocks; the embedding, the head and the norms stay in the working dtype.
bool is_quantised_base_weight(const std::string& name);

// The config as JSON, for checkpoints ({"rank":8,"alpha":16,"dropout":0.05,"targets":"q_proj,v_proj"}),
// and back (checked; `where` names the source in errors).
std::string lora_config_to_json(const LoraConfig& lora);
LoraConfig lora_config_from_json(const std::string& json, const std::string& where);

// The adapters' ops on a backend: their forward beside a frozen linear, their backward.
class LoraAdapters {
 public:
  // working (the adapters' working weights, `act` dtype) and grads (F32) are laid out as
  // lora_layout; the activation buffers come from the model's arena (plan_activations).
  LoraAdapters(Backend& backend, const ModelConfig& model, const LoraConfig& lora, int B, int T, DType act,
               void* working, void* grads, const Arena& activations);

  // What the adapters keep and use per step, added to the model's activation plan:
  // "layers.L.lora.<module>.u" (N, r) per adapter (A drop(x), for B's gradient), and scratch
  // shared by all: "lora.delta" (N, widest out), "lora.du" (N, r) and, with dropout,
  // "lora.dropped" (N, widest in).
  static void plan_activations(ArenaPlan& plan, const ModelConfig& model, const LoraConfig& lora, int B, int T,
                               DType act);

  // x (N,in) the linear's input, out (N,O) its output, already W x + b: every adapter of the
  // layer at `site` adds s B A drop(x) to its window.
  void forward(int layer, LoraSite site, Tensor x, Tensor out, const DropoutContext& ctx);
  // dout (N,O) the linear's output gradient, x its input -> dA, dB (written or added: grads),
  // and dx (N,in) += every adapter's input gradient (dx already holds the frozen linear's).
  void backward(int layer, LoraSite site, Tensor dout, Tensor x, Tensor dx, const DropoutContext& ctx,
                ParamGrads grads);
  // Where layer l's adapter gradients start in the flat gradient buffer, in elements: the
  // backward runs the layers in reverse, so after layer l everything from here on is final.
  int64_t first_grad_of_layer(int l) const;

 private:
  struct Adapter {
    LoraTarget target;
    Tensor a, b;    // working weights (r, in), (out, r)
    Tensor da, db;  // F32 gradients, same shapes
    Tensor u;       // (N, r) A drop(x), saved by the forward
  };
  DropoutMask input_dropout(const DropoutContext& ctx, int layer, const LoraTarget& t) const;

  Backend& backend_;
  LoraConfig lora_;
  int B_, T_;
  std::vector<std::vector<Adapter>> layers_;  // [layer][adapter]
  std::vector<int64_t> first_grad_;           // per layer
  Tensor delta_, du_, dropped_;               // scratch (N, widest out), (N, r), (N, widest in)
};

}  // namespace tt
