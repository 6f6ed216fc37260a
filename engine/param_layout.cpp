// The parameter layout of the model family, in PyTorch state_dict order.
#include "engine/param_layout.h"

#include <stdexcept>

namespace tt {

namespace {

// The names of one member of the family, in state_dict order. GPT-style blocks keep
// nn.TransformerEncoder's; the Llama block (ModelConfig::llama_block) takes Hugging Face
// LlamaForCausalLM's, whose q, k and v (and gate and up) projections are separate tensors laid
// side by side where in_proj_weight (linear1.weight) would be, so one view still spans them.
struct ParamNames {
  bool llama;
  std::string layer(int l) const { return (llama ? "model.layers." : "encoder.layers.") + std::to_string(l) + "."; }
  std::string embed() const { return llama ? "model.embed_tokens.weight" : "embed.weight"; }
  std::string final_norm(const char* what) const {
    return std::string(llama ? "model.norm." : "encoder.norm.") + what;
  }
};

}  // namespace

ParamLayout::ParamLayout(const ModelConfig& c) {
  const int64_t C = c.d_model, F = c.d_ff, V = c.vocab_size, QKV = c.qkv_width(), F1 = c.ffn_in_width();
  const int64_t KV = static_cast<int64_t>(c.kv_heads()) * c.head_dim();  // one of k and v
  const ParamNames names{c.llama_block()};
  add(names.embed(), {V, C});
  if (c.pos_embedding == PosEmbedding::Learned) add("pos_embed.weight", {c.max_seq_len, C});
  // biases only where the config has them (--bias, --norm: kernels/backend.h's null data)
  auto add_bias = [&](const std::string& name, int64_t n, bool present) {
    if (present) add(name, {n});
  };
  const bool lb = c.bias, nb = c.norm_bias();
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = names.layer(l);
    if (names.llama) {  // no biases; RMSNorm
      add(p + "self_attn.q_proj.weight", {C, C});
      add(p + "self_attn.k_proj.weight", {KV, C});
      add(p + "self_attn.v_proj.weight", {KV, C});
      add(p + "self_attn.o_proj.weight", {C, C});
      add(p + "mlp.gate_proj.weight", {F, C});
      add(p + "mlp.up_proj.weight", {F, C});
      add(p + "mlp.down_proj.weight", {C, F});
      add(p + "input_layernorm.weight", {C});
      add(p + "post_attention_layernorm.weight", {C});
      continue;
    }
    add(p + "self_attn.in_proj_weight", {QKV, C});
    add_bias(p + "self_attn.in_proj_bias", QKV, lb);
    add(p + "self_attn.out_proj.weight", {C, C});
    add_bias(p + "self_attn.out_proj.bias", C, lb);
    add(p + "linear1.weight", {F1, C});
    add_bias(p + "linear1.bias", F1, lb);
    add(p + "linear2.weight", {C, F});
    add_bias(p + "linear2.bias", C, lb);
    add(p + "norm1.weight", {C});
    add_bias(p + "norm1.bias", C, nb);
    add(p + "norm2.weight", {C});
    add_bias(p + "norm2.bias", C, nb);
  }
  if (c.norm_first) {
    add(names.final_norm("weight"), {C});
    add_bias(names.final_norm("bias"), C, nb);
  }
  if (!c.tie_embeddings) add("lm_head.weight", {V, C});  // tied: the head reads the embedding's table
  add_bias("lm_head.bias", V, c.lm_head_bias());
}

int64_t ParamLayout::shard_elements(int shards) const {
  if (shards <= 1) return total_;
  const int64_t per_rank = (total_ + shards - 1) / shards;
  return (per_rank + 63) / 64 * 64;
}

void ParamLayout::add(const std::string& name, Shape shape) {
  params_.push_back({name, shape, total_});
  total_ += shape.numel();
}

const ParamInfo& ParamLayout::find(const std::string& name) const {
  for (const ParamInfo& p : params_)
    if (p.name == name) return p;
  throw std::out_of_range("no parameter named " + name);
}

Tensor ParamLayout::view(void* base, const ParamInfo& info, DType dtype) const {
  return Tensor{static_cast<char*>(base) + info.offset * dtype_size(dtype), dtype, info.shape};
}

ModelParams bind_params(const ParamLayout& layout, const ModelConfig& c, void* base, DType dtype) {
  return bind_params(layout, c, dtype, [&](const ParamInfo& info) {
    return static_cast<void*>(static_cast<char*>(base) + info.offset * dtype_size(dtype));
  });
}

ModelParams bind_params(const ParamLayout& layout, const ModelConfig& c, DType dtype,
                        const std::function<void*(const ParamInfo&)>& address) {
  auto get = [&](const std::string& name) {
    const ParamInfo& info = layout.find(name);
    return Tensor{address(info), dtype, info.shape};
  };
  // the parameters from `first` on, `rows` rows of `cols`: separately named tensors that lie
  // side by side (the Llama block's q, k, v and gate, up) seen as one matrix
  auto span = [&](const std::string& first, int64_t rows, int64_t cols) {
    Tensor t = get(first);
    t.shape = Shape{rows, cols};
    return t;
  };
  // a bias the config does not have: a view with null data, which every op skips
  auto bias = [&](const std::string& name, bool present) { return present ? get(name) : Tensor{nullptr, dtype, {}}; };
  const bool lb = c.bias, nb = c.norm_bias();
  const ParamNames names{c.llama_block()};
  ModelParams m;
  m.embed = get(names.embed());
  if (c.pos_embedding == PosEmbedding::Learned) m.pos_embed = get("pos_embed.weight");
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = names.layer(l);
    LayerParams L;
    const Tensor none{nullptr, dtype, {}};
    if (names.llama) {
      L.in_proj_weight = span(p + "self_attn.q_proj.weight", c.qkv_width(), c.d_model);
      L.out_proj_weight = get(p + "self_attn.o_proj.weight");
      L.linear1_weight = span(p + "mlp.gate_proj.weight", c.ffn_in_width(), c.d_model);
      L.linear2_weight = get(p + "mlp.down_proj.weight");
      L.norm1_weight = get(p + "input_layernorm.weight");
      L.norm2_weight = get(p + "post_attention_layernorm.weight");
      L.in_proj_bias = L.out_proj_bias = L.linear1_bias = L.linear2_bias = L.norm1_bias = L.norm2_bias = none;
      m.layers.push_back(L);
      continue;
    }
    L.in_proj_weight = get(p + "self_attn.in_proj_weight");
    L.in_proj_bias = bias(p + "self_attn.in_proj_bias", lb);
    L.out_proj_weight = get(p + "self_attn.out_proj.weight");
    L.out_proj_bias = bias(p + "self_attn.out_proj.bias", lb);
    L.linear1_weight = get(p + "linear1.weight");
    L.linear1_bias = bias(p + "linear1.bias", lb);
    L.linear2_weight = get(p + "linear2.weight");
    L.linear2_bias = bias(p + "linear2.bias", lb);
    L.norm1_weight = get(p + "norm1.weight");
    L.norm1_bias = bias(p + "norm1.bias", nb);
    L.norm2_weight = get(p + "norm2.weight");
    L.norm2_bias = bias(p + "norm2.bias", nb);
    m.layers.push_back(L);
  }
  if (c.norm_first) {
    m.norm_weight = get(names.final_norm("weight"));
    m.norm_bias = bias(names.final_norm("bias"), nb);
  }
  m.lm_head_weight = c.tie_embeddings ? m.embed : get("lm_head.weight");
  m.lm_head_bias = bias("lm_head.bias", c.lm_head_bias());
  return m;
}

}  // namespace tt
