// The model: parameters, gradients and activations of one member of the family, and the
// forward and backward passes written out op by op over a Backend. The model never touches
// elements itself: every line below is one backend op on planned views.
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/arena.h"
#include "engine/config.h"
#include "engine/dropout_context.h"
#include "engine/lora.h"
#include "engine/param_layout.h"
#include "kernels/backend.h"
#include "kernels/nf4_tensor.h"

namespace tt {

class Model {
 public:
  // Plans and allocates parameters, gradients and activations for batches of B x T tokens;
  // activations, their gradients and the working weights are stored as `act_dtype`. shards:
  // the ZeRO-1 ranks the flat parameters and gradients are padded for (ParamLayout::shard_elements).
  // With lora enabled (engine/lora.h) the model's own parameters are a frozen base, held only
  // as working weights (no masters, no gradients), and what trains is the adapters.
  Model(Backend& backend, const ModelConfig& config, int B, int T, DType act_dtype = DType::F32,
        Recompute recompute = Recompute::None, int shards = 1, const LoraConfig& lora = {});

  // The planned buffers, before anything is allocated (what `tinytrain plan` prints).
  static ArenaPlan plan_weights(const ModelConfig& config, DType act_dtype, int shards = 1,
                                const LoraConfig& lora = {});
  static ArenaPlan plan_activations(const ModelConfig& config, int B, int T, DType act_dtype, Recompute recompute,
                                    const LoraConfig& lora = {});

  const ModelConfig& config() const { return config_; }
  const LoraConfig& lora() const { return lora_; }
  // What training updates: every parameter (ParamLayout of the config), or the LoRA adapters
  // (lora_layout). The optimizer, the gradient collectives and checkpoints see only these.
  const ParamLayout& layout() const { return layout_; }
  Tensor params() const { return params_flat_; }  // (P) F32 master weights, flat, layout() order
  Tensor grads() const { return grads_flat_; }    // (P) F32, same layout
  // The model's own parameters: layout() itself, or under LoRA the frozen base's.
  const ParamLayout& base_layout() const { return base_layout_; }
  // Under LoRA: the frozen base from host fp32 values in base_layout() order, rounded once to
  // the working dtype (the same rounding as Backend::cast).
  void load_base(const float* host);
  // The same buffers padded with zeros to whole ZeRO-1 shards: (shards * shard) F32.
  Tensor params_padded() const { return params_padded_; }
  Tensor grads_padded() const { return grads_padded_; }
  // The working weights the ops read are the masters rounded to act_dtype (the masters
  // themselves in fp32): call after the masters change.
  void refresh_working_weights();
  Tensor logits() const { return logits_; }       // (B,T,V) after forward; dlogits after backward
  // The backend's line on library attention (`--attention cudnn`), asked once at construction
  // (Backend::use_library_attention); "" when the backend was not asked for it.
  const std::string& attention_note() const { return attention_note_; }
  size_t bytes() const { return weights_.bytes() + activations_.bytes(); }

  // tokens (B,T) int32 on the backend -> logits (B,T,V)
  void forward(Tensor tokens, const DropoutContext& ctx);
  // targets (B,T) int32 -> losses (B,T) F32 per token: fused softmax + cross-entropy, whose
  // gradient is dloss_scale (1) F32 (the loss scale, read from backend memory) / mean_over
  // (the tokens of the whole batch: B*T, or K*B*T for K accumulated micro-batches); then the
  // backward pass. Gradients are written into grads() (ParamGrads::Write: the first
  // micro-batch of a step) or added to them (Add: the others). Needs the forward just before.
  // grads_ready(first), when given, is called each time grads()[first, P) hold their last
  // contribution of this backward: the layout is in forward order and the backward runs in
  // reverse, so the finished part grows from the end (after the head, after each layer, and
  // with first 0 after the embedding). Data parallelism starts its bucket all-reduces there.
  void backward(Tensor tokens, Tensor targets, Tensor losses, Tensor dloss_scale, int64_t mean_over,
                const DropoutContext& ctx, ParamGrads grads,
                const std::function<void(int64_t first)>& grads_ready = nullptr);

 private:
  // Saved activations of one encoder layer; "ln1"/"ln2" are the outputs of norm1/norm2.
  struct LayerActs {
    Tensor ln1, ln1_mean, ln1_rstd;  // (N,C), (N), (N)
    Tensor qkv;                      // (N,3C)
    Tensor lse;                      // (B,NH,T) F32 attention row log-sum-exp (no (B,NH,T,T) weights)
    Tensor att;                      // (N,C) heads merged, the input of out_proj
    Tensor res1;                     // (N,C) x + dropout1(attention branch)
    Tensor ln2, ln2_mean, ln2_rstd;  // (N,C), (N), (N)
    Tensor h_pre;                    // (N,F) linear1 output
    Tensor h;                        // (N,F) dropout(activation(h_pre)), the input of linear2
    Tensor res2;                     // (N,C) residual + dropout2(ffn branch)
  };
  Tensor layer_input(int l) const;   // (N,C) what layer l reads
  Tensor layer_output(int l) const;  // (N,C) what layer l writes
  Tensor head_input() const;         // (N,C) what lm_head reads
  void layer_forward(int l, const DropoutContext& ctx);
  void ffn_hidden_forward(int l, const DropoutContext& ctx);  // h_pre = linear1(ff_in); h = dropout(act(h_pre))
  // dout (N,C) in, d(layer input) out
  void layer_backward(int l, Tensor dout, const DropoutContext& ctx, ParamGrads grads);
  // d_branch (N,C) in: the gradient of linear2's output; out: the gradient of ff_in
  void ffn_backward(int l, Tensor d_branch, const DropoutContext& ctx, ParamGrads grads);
  DropoutMask dropout(const DropoutContext& ctx, int layer, DropoutSite site) const;
  Tensor by_token(Tensor rows) const;  // (N, X) -> the same memory as (B, T, X)
  AttentionShape attention_shape() const;
  // The frozen linear at `site` of layer l, then its adapters (forward); their backward, after
  // the linear's (which wrote or added dx): nothing without LoRA.
  // QLoRA: the views of the quantised base, and the weight of layer l's linear at `site` decoded
  // into the tile (one nf4_dequantize per tensor it holds); without QLoRA `weight` itself
  void bind_quantised_base();
  Tensor frozen_weight(int l, LoraSite site, Tensor weight);
  void adapters_forward(int l, LoraSite site, Tensor x, Tensor out, const DropoutContext& ctx);
  void adapters_backward(int l, LoraSite site, Tensor dout, Tensor x, Tensor dx, const DropoutContext& ctx,
                         ParamGrads grads);

  Backend& backend_;
  ModelConfig config_;
  int B_, T_;
  DType act_dtype_;
  Recompute recompute_;
  LoraConfig lora_;
  std::string attention_note_;
  ParamLayout base_layout_;  // the config's parameters
  ParamLayout layout_;       // what trains: base_layout_, or the adapters
  Arena weights_, activations_;  // weights: parameters and gradients; activations: saved + scratch
  Tensor params_flat_, grads_flat_, working_flat_;  // working_flat_ is params_flat_ in fp32
  Tensor params_padded_, grads_padded_;             // the whole arena entries (shards * shard)
  // views of the working weights and of their gradients; under LoRA g_ has null data for every
  // frozen weight (no gradient is made), except the norms', whose fused backward kernels write
  // them into scratch nothing reads
  ModelParams p_, g_;
  std::unique_ptr<LoraAdapters> adapters_;  // under LoRA
  // QLoRA: one quantised tensor, and where in the tile it is decoded to
  struct Nf4Part {
    std::string name;  // its name in base_layout_
    Nf4Tensor weight;
    Tensor tile;
  };
  std::vector<std::array<std::vector<Nf4Part>, 4>> nf4_sites_;  // [layer][LoraSite]; empty without QLoRA

  Tensor embedded_;                 // (N,C) embedding output, the input of layer 0
  std::vector<LayerActs> layers_;
  Tensor final_norm_, final_mean_, final_rstd_;  // (N,C), (N), (N) encoder.norm, pre-norm only
  Tensor logits_;                   // (N,V), overwritten by dlogits in backward
  // Backward scratch, shared by all layers.
  Tensor d_scratch1_, d_scratch2_, d_scratch3_, d_residual_;  // (N,C)
  Tensor d_qkv_;    // (N,3C)
  Tensor dout_dot_out_;  // (B,NH,T) F32 attention backward scratch
  Tensor d_h_;      // (N,F)
};

}  // namespace tt
